"""``prepare_perse``: raw files in, PerSE instruction datasets out (what ``persetrain prepare`` calls).

Raw layout (what ``data_prep.synthetic.perse.write_sample_data`` writes; each source is optional):

    raw_dir/mpst/plots.{csv,jsonl}      raw_dir/mpst/reviews.{csv,jsonl}
    raw_dir/doc/annotations.{csv,jsonl}
    raw_dir/amazon/Books.json[l][.gz] (or Books_5)   raw_dir/amazon/meta_Books.json[l][.gz]  (2018 or 2023 layout)
    raw_dir/ground_truth.json           (synthetic data only: marks the datasets as synthetic)

With an engine, MPST plots are anonymized, then summarized, and a title probe measures how many of
the raw / anonymized / summarized synopses the model recognises; the LLM outputs live in
``out_dir/work`` and are reused by a rerun. Without one, the datasets use the raw synopses.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from data_prep.licenses import AMAZON_REVIEWS, SYNTHETIC
from data_prep.perse.anonymize import anonymize_plots, apply_mapping
from data_prep.perse.builders import (
    NothingLeft,
    build_amazon_books,
    build_per_doc,
    build_per_mpst,
)
from data_prep.perse.contamination import probe_titles
from data_prep.perse.dataset import save_dataset
from data_prep.perse.summarize import summarize_plots
from data_prep.readers import amazon, doc, mpst
from data_prep.readers.tables import ColumnMap
from persetrain.console import console, warn
from persetrain.io import InputError, write_json
from persetrain.prompts.perse import PAIRWISE_PROFILE_WORDS, PROFILE_WORDS

if TYPE_CHECKING:
    from persetrain.engine import Engine

PlotText = Literal["raw", "anonymized", "summary"]
#: The raw tables ``prepare perse`` reads and their default columns (``--columns TABLE.FIELD=COLUMN``); Amazon's
#: are the 2018 dump's, a 2023 file being told by its own columns (``data_prep.readers.amazon.detect_layout``).
PERSE_TABLES: dict[str, ColumnMap] = {
    "mpst_plots": mpst.PLOT_COLUMNS,
    "mpst_reviews": mpst.REVIEW_COLUMNS,
    "doc": doc.ANNOTATION_COLUMNS,
    "amazon_reviews": amazon.REVIEW_COLUMNS,
    "amazon_meta": amazon.META_COLUMNS,
}
_TABLE_SUFFIXES = (".csv", ".jsonl", ".json", ".csv.gz", ".jsonl.gz", ".json.gz")


def find_table(folder: Path, stems: Sequence[str]) -> Path | None:
    """The one file ``<stem><suffix>`` in ``folder`` (first stem that exists); two candidates is an error."""
    for stem in stems:
        found = [folder / f"{stem}{suffix}" for suffix in _TABLE_SUFFIXES if (folder / f"{stem}{suffix}").is_file()]
        if len(found) > 1:
            raise InputError(folder, f"several files could be the {stem!r} table: {[p.name for p in found]}")
        if found:
            return found[0]
    return None


@dataclass
class PrepareResult:
    """Where each dataset went, what the LLM steps left out, and the contamination probe's summary."""

    datasets: dict[str, Path] = field(default_factory=dict)
    left_out: dict[str, list[str]] = field(default_factory=dict)
    contamination: dict | None = None
    report: Path | None = None


@dataclass(frozen=True)
class LLMTokens:
    """New-token budgets of the LLM steps: real synopses need the defaults, the CPU demo less."""

    anonymize: int = 192
    summarize: int = 160


def _is_synthetic(raw_dir: Path) -> bool:
    truth = raw_dir / "ground_truth.json"
    return truth.is_file() and bool(json.loads(truth.read_text(encoding="utf-8")).get("synthetic"))


def _mpst_texts(
    plots: Sequence[mpst.Plot],
    reviews: list[mpst.Review],
    engine: Engine | None,
    plot_text: PlotText,
    work: Path,
    seed: int,
    probe: bool,
    batch_size: int,
    result: PrepareResult,
    llm_tokens: LLMTokens,
) -> tuple[dict[str, str], list[mpst.Review]]:
    """The text shown for each plot, and the reviews (with names replaced when plots were anonymized)."""
    raw = {p.id: p.synopsis for p in plots}
    if engine is None:
        return raw, reviews
    anonymized = anonymize_plots(
        engine, raw, work / "anonymized.jsonl", seed=seed, batch_size=batch_size, max_new_tokens=llm_tokens.anonymize
    )
    anon_text = {pid: r["text"] for pid, r in anonymized.records.items()}
    summarized = summarize_plots(
        engine,
        anon_text,
        work / "summaries.jsonl",
        seed=seed,
        batch_size=batch_size,
        max_new_tokens=llm_tokens.summarize,
    )
    summary_text = {pid: r["summary"] for pid, r in summarized.records.items()}
    result.left_out = {"anonymize": anonymized.failed, "summarize": summarized.failed}
    if probe:
        probed = probe_titles(
            engine,
            {"raw": raw, "anonymized": anon_text, "summarized": summary_text},
            {p.id: p.title for p in plots},
            work / "contamination.jsonl",
            seed=seed,
            batch_size=batch_size,
        )
        result.contamination = probed.summary
        write_json(work / "contamination.json", probed.summary)
    if plot_text == "raw":
        return raw, reviews
    renamed = rename_in_reviews(reviews, {pid: r["mapping"] for pid, r in anonymized.records.items()})
    return (anon_text if plot_text == "anonymized" else summary_text), renamed


def rename_in_reviews(reviews: Sequence[mpst.Review], mappings: dict[str, dict[str, str]]) -> list[mpst.Review]:
    """Apply each plot's name mapping to its reviews: a review naming a character the plot no longer
    has would undo the anonymization (and tell the judge which film it is)."""
    return [
        r.model_copy(update={"text": apply_mapping(r.text, mappings[r.plot_id])}) if r.plot_id in mappings else r
        for r in reviews
    ]


def _prepare_doc(
    raw_dir: Path, out_dir: Path, seed: int, doc_columns: ColumnMap | None, synthetic: bool
) -> dict[str, Path] | None:
    """Per-DOC from ``doc/annotations``; None when the file is not there."""
    annotations_path = find_table(raw_dir / "doc", ["annotations"])
    if not annotations_path:
        return None
    built = build_per_doc(
        doc.read_annotations(annotations_path, doc_columns), seed=seed, profile_words=PAIRWISE_PROFILE_WORDS
    )
    sources = {"DOC annotations": str(annotations_path)}
    return {built.name: save_dataset(built, out_dir / built.name, sources, synthetic)}


def _prepare_amazon(
    raw_dir: Path,
    out_dir: Path,
    seed: int,
    profile_words: int,
    limit: int | None,
    synthetic: bool,
    columns: Mapping[str, ColumnMap] | None = None,
    core: int = 5,
) -> dict[str, Path] | None:
    """Amazon books from ``amazon/Books`` and ``amazon/meta_Books`` (the 2018 or the 2023 layout, each file told by
    its own columns; ``columns["amazon_reviews"]`` / ``["amazon_meta"]`` map others); None (with a warning when only
    one of them is there) otherwise. A filter that leaves nothing is one line naming the reviews file and it."""
    columns = columns or {}
    books_path = find_table(raw_dir / "amazon", ["Books_5", "Books"])
    meta_path = find_table(raw_dir / "amazon", ["meta_Books"])
    if not (books_path and meta_path):
        if books_path or meta_path:
            warn(f"{raw_dir / 'amazon'}: needs both Books and meta_Books; Amazon skipped")
        return None
    # The dumps hold rating-only reviews; with no text they can be neither profile nor target.
    reviews = amazon.read_reviews(books_path, columns.get("amazon_reviews"), drop_empty_text=True)
    try:
        built = build_amazon_books(
            reviews,
            amazon.read_books(meta_path, columns.get("amazon_meta")),
            seed=seed,
            profile_words=profile_words,
            core=core,
            limit=limit,
        )
    except NothingLeft as err:
        raise InputError(books_path, str(err)) from None
    sources = {"Amazon reviews": str(books_path), "Amazon metadata": str(meta_path)}
    license = SYNTHETIC if synthetic else AMAZON_REVIEWS
    return {built.name: save_dataset(built, out_dir / built.name, sources, synthetic, license)}


def prepare_perse(
    raw_dir: str | Path,
    out_dir: str | Path,
    engine: Engine | None = None,
    ks: Sequence[int] = (3,),
    seed: int = 0,
    profile_words: int | None = None,
    plot_text: PlotText | None = None,
    mpst_plot_columns: ColumnMap | None = None,
    mpst_review_columns: ColumnMap | None = None,
    doc_columns: ColumnMap | None = None,
    probe: bool = True,
    amazon_limit: int | None = None,
    amazon_columns: Mapping[str, ColumnMap] | None = None,
    k_core: int = 5,
    batch_size: int = 16,
    llm_tokens: LLMTokens = LLMTokens(),
) -> PrepareResult:
    """Build every dataset whose raw files are in ``raw_dir``: ``per_mpst_k<K>`` for each K in ``ks``,
    ``per_doc`` and ``amazon_books``, each a DatasetDict directory under ``out_dir``.

    ``plot_text`` picks what the MPST judge sees: the summary of the anonymized plot (default with an
    engine, as in the paper), the anonymized plot, or the raw synopsis (the only choice without one).
    ``amazon_columns`` maps the Amazon files' columns (``{"amazon_reviews": {field: column}, "amazon_meta": ...}``)
    and ``k_core`` is the Amazon core (5, the paper's).
    ``profile_words`` cuts the plots of scalar profiles (Per-MPST, Amazon); Per-DOC profiles keep
    ``PAIRWISE_PROFILE_WORDS``, because a pairwise preference may hinge on a plot's last sentence.
    """
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    plot_text = plot_text or ("summary" if engine is not None else "raw")
    if engine is None and plot_text != "raw":
        raise ValueError(f"plot_text={plot_text!r} needs an engine to anonymize/summarize; use 'raw' or pass one")
    synthetic = _is_synthetic(raw_dir)
    result = PrepareResult()
    found_any = False

    plots_path, reviews_path = find_table(raw_dir / "mpst", ["plots"]), find_table(raw_dir / "mpst", ["reviews"])
    if plots_path and reviews_path:
        found_any = True
        plots = mpst.read_plots(plots_path, mpst_plot_columns)
        reviews = mpst.read_reviews(reviews_path, mpst_review_columns)
        texts, reviews = _mpst_texts(
            plots, reviews, engine, plot_text, out_dir / "work", seed, probe, batch_size, result, llm_tokens
        )
        sources = {"MPST plots": str(plots_path), "MPST reviews": str(reviews_path), "plot text": plot_text}
        for k in ks:
            built = build_per_mpst(texts, reviews, k=k, seed=seed, profile_words=profile_words or PROFILE_WORDS)
            result.datasets[built.name] = save_dataset(built, out_dir / built.name, sources, synthetic)

    for written in (
        _prepare_doc(raw_dir, out_dir, seed, doc_columns, synthetic),
        _prepare_amazon(
            raw_dir,
            out_dir,
            seed,
            profile_words or PROFILE_WORDS,
            amazon_limit,
            synthetic,
            amazon_columns,
            k_core,
        ),
    ):
        if written is not None:
            found_any = True
            result.datasets.update(written)

    if not found_any:
        raise InputError(
            raw_dir,
            "no raw data found; expected mpst/plots + mpst/reviews, doc/annotations, "
            "or amazon/Books + amazon/meta_Books (.csv/.jsonl/.json[.gz])",
        )
    result.report = out_dir / "prepare_report.json"
    write_json(
        result.report,
        {
            "raw_dir": str(raw_dir),
            "synthetic": synthetic,
            "seed": seed,
            "ks": list(ks),
            "plot_text": plot_text,
            "profile_words": profile_words,
            "datasets": {n: str(p) for n, p in result.datasets.items()},
            "left_out": result.left_out,
            "contamination": result.contamination,
        },
    )
    for name, path in result.datasets.items():
        console.print(f"[green]wrote[/green] {name} -> {path}")
    return result
