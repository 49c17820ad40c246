"""A built PerSE dataset on disk: rows with TRL's chat columns, the dataset card, an atomic save.

``data_prep.perse.builders`` decides which examples exist; this module decides what a saved dataset holds: each
typed record's fields plus the ``prompt`` / ``completion`` columns TRL's ``SFTTrainer`` reads, a
``README.md`` card that says how the data was made (sources, filters in order, settings, splits,
columns) and a machine-read ``build_info.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

from datasets import Dataset, DatasetDict

from data_prep.card import bullets, render_card, synthetic_note, write_card
from data_prep.licenses import SYNTHETIC, License, source_terms
from data_prep.perse.builders import BuiltDataset
from data_prep.perse.reviewer_split import Example
from persetrain.console import warn
from persetrain.io import atomic_dir
from persetrain.prompts.perse import pairwise_completion, pairwise_request, scalar_completion, scalar_request
from persetrain.schema import ScalarExample, reviewer_of, ten_point_score


def to_row(example: Example, profile_words: int) -> dict:
    """The typed record's fields plus TRL's prompt-completion chat columns."""
    if isinstance(example, ScalarExample):
        request = scalar_request(example, profile_words)
        target = scalar_completion(example.review, ten_point_score(example.score, example.score_max))
    else:
        request = pairwise_request(example, profile_words)
        target = pairwise_completion(example.preferred)
    return {
        **example.model_dump(mode="json"),
        "prompt": request.chat_messages(),
        "completion": [{"role": "assistant", "content": target}],
    }


def to_dataset_dict(built: BuiltDataset) -> DatasetDict:
    rows = {
        split: [to_row(e, built.params["profile_words"]) for e in examples] for split, examples in built.splits.items()
    }
    filled = [split for split, r in rows.items() if r]
    if not filled:
        raise ValueError(f"{built.title}: no examples survived the filters; see {built.filters}")
    features = Dataset.from_list(rows[filled[0]]).features
    for split, r in rows.items():
        if not r:
            warn(f"{built.title}: the {split!r} split is empty (too few reviewers for a 9:1 split)")
    return DatasetDict({split: Dataset.from_list(r, features=features) for split, r in rows.items()})


def _count_table(built: BuiltDataset) -> str:
    lines = ["| split | examples | reviewers |", "|---|---:|---:|"]
    for split, examples in built.splits.items():
        lines.append(f"| {split} | {len(examples)} | {len({reviewer_of(e) for e in examples})} |")
    return "\n".join(lines)


_COLUMNS = {
    "scalar": "`id`, `reviewer_id`, `profile` (list of {plot_id, plot, review, score}), `query_plot_id`, "
    "`query_plot`, `review`, `score`, `score_max` (the `persetrain.schema.ScalarExample` fields); "
    "`prompt` (system + user messages) and `completion` (assistant message "
    "`[Review] <review> [Score] <1-10>`) for TRL's SFTTrainer.",
    "pairwise": "`id`, `annotator_id`, `aspect`, `profile` (list of {premise, plot_a, plot_b, aspect, "
    "preferred}), `premise`, `plot_a`, `plot_b`, `preferred` (the `persetrain.schema."
    "PairwiseExample` fields); `prompt` (system + user messages) and `completion` (assistant "
    "message `Plot A` or `Plot B`) for TRL's SFTTrainer.",
}


def dataset_card(built: BuiltDataset, sources: Mapping[str, str], synthetic: bool, license: License) -> str:
    filters = "\n".join(
        f"| {f.name} | {f.dropped} {f.unit}{f' ({f.detail})' if f.detail else ''} |" for f in built.filters
    )
    intro = [f"PerSE {built.task} instruction data built by `data_prep.perse.builders` (persetrain).\n"]
    if synthetic:
        intro.append(
            synthetic_note(
                "Built from `data_prep.synthetic.perse` output: plots, reviewers and scores are generated with "
                "planted preferences (see the source's `ground_truth.json`). Nothing here is a real review."
            )
        )
    return render_card(
        built.title,
        tags=("perse", "personalized-evaluation"),
        license=license,
        synthetic=synthetic,
        intro=intro,
        sections=[
            ("Sources", "\n".join(f"- {name}: `{path}`" for name, path in sources.items()) or "- (not recorded)"),
            ("Filters (in order)", "| filter | dropped |\n|---|---|\n" + filters),
            ("Settings", bullets(built.params)),
            (
                "Splits",
                'Reviewers are split 9:1 by `sha256(f"{seed}:{reviewer_id}") % 10 == 0` -> test; '
                "no reviewer is in two splits.\n\n" + _count_table(built),
            ),
            ("Columns", _COLUMNS[built.task]),
            ("Notes", "\n".join(f"- {n}" for n in built.notes) if built.notes else None),
        ],
    )


def save_dataset(
    built: BuiltDataset,
    out_dir: str | Path,
    sources: Mapping[str, str] | None = None,
    synthetic: bool = False,
    license: License | None = None,
) -> Path:
    """Write ``built`` as a DatasetDict with README.md (card) and build_info.json, whole or not at all
    (``persetrain.io.atomic_dir``: ``out_dir`` is the previous complete dataset or the new one, never a mix).

    ``license`` is the source's; without one, SYNTHETIC data is persetrain's own and other data is under its
    sources' own terms, named as such."""
    empty = [split for split, examples in built.splits.items() if not examples]
    if empty:
        counts = ", ".join(f"{f.name}: {f.dropped} dropped" for f in built.filters) or "no filters"
        raise ValueError(
            f"{built.name}: split(s) {empty} would be empty ({counts}); "
            "the raw data has too few reviewers or records after filtering"
        )
    sources = dict(sources or {})
    if license is None:
        license = SYNTHETIC if synthetic else source_terms(", ".join(sources) or built.title)
    info = {
        "name": built.name,
        "title": built.title,
        "task": built.task,
        "params": built.params,
        "filters": [asdict(f) for f in built.filters],
        "sources": sources,
        "synthetic": synthetic,
        "splits": {s: len(e) for s, e in built.splits.items()},
        "notes": built.notes,
        **license.info(),
    }
    with atomic_dir(out_dir) as tmp:
        to_dataset_dict(built).save_to_disk(str(tmp))
        write_card(tmp, info, dataset_card(built, sources, synthetic, license))
    return Path(out_dir)
