"""SYNTHETIC raw data with planted reviewer preferences, in all three raw formats.

Nothing here is real: plots, names, titles, reviews and ratings are generated from templates by a
seeded random generator. The point is a data set whose ground truth is known, so the whole PerSE
pipeline (prepare -> sft -> evaluate) can be run and checked on a CPU in minutes, and the analysis
can ask whether a judge recovered the preferences that were planted:

* MPST-like: each plot has a genre mix (weights over ``GENRES`` summing to 1) and a quality; each
  reviewer has a harshness and one affinity per genre (a strong favourite, a strong least
  favourite, mild others); the score is ``clip(round(5.5 + quality + taste - harshness + noise), 1, 10)``
  where ``taste`` counts the favourite and least favourite genre whenever the plot has them (as the
  review says) and the mild ones by their share of the mix, and the review
  text gives the reasons for it: it says what kind of story the plot is, states the reviewer's
  favourite and least favourite genre and whether the plot has them, and remarks on the craft of a
  clearly good or bad plot; the score comes after the reasons, with no verdict sentence in between.
* DOC-like: plot pairs from one premise, each plot with a tone, setting, twist, cast and ending;
  each annotator prefers one value per aspect (e.g. Ending: tragic) and picks the plot that has it.
* Amazon-like (2018 JSON lines): books with a genre mix and quality, customers with harshness and
  affinities, 1-5 stars, a metadata file whose descriptions are lists of strings.

``ground_truth.json`` holds every planted parameter. Sizes are small by default (the demo trains a
135M model on CPU); a few sparse reviewers and rare books are planted so that every filter of the
builders (fewer than 6 reviews, 5-core, both/neither answers, unknown questions) has work to do.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from data_prep.synthetic.doc import doc_sample
from data_prep.synthetic.plots import GENRES
from data_prep.synthetic.reviews import SCORE_FORMULA, amazon_sample, mpst_sample
from persetrain.io import atomic_write, write_json, write_jsonl


@dataclass(frozen=True)
class SampleData:
    """Where ``write_sample_data`` put each raw file (the layout ``prepare_perse`` expects)."""

    root: Path
    mpst_plots: Path
    mpst_reviews: Path
    doc_annotations: Path
    amazon_reviews: Path
    amazon_meta: Path
    ground_truth: Path


def _write_csv(path: Path, rows: list[dict]) -> None:
    with atomic_write(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


_README = """# SYNTHETIC sample data (not real)

Written by `data_prep.synthetic.perse.write_sample_data(seed={seed})`. Every plot, name, title, review and
rating here was generated from templates with planted preferences; `ground_truth.json` holds the
planted parameters (plot quality and genre mix, reviewer harshness and genre affinities, annotator
aspect preferences) so that a trained judge can be checked against the truth.

- `mpst/plots.csv` (imdb_id, title, plot_synopsis) and `mpst/reviews.jsonl` (imdb_id, reviewer_id,
  review, rating 1-10): score = {formula}
- `doc/annotations.csv` (pair_id, premise, plot_a, plot_b, annotator_id, question, answer)
- `amazon/Books.json` and `amazon/meta_Books.json`: Amazon 2018 JSON-lines layout, 1-5 stars
"""


def write_sample_data(
    out_dir: str | Path,
    seed: int = 0,
    n_plots: int = 120,
    n_reviewers: int = 40,
    reviews_per_reviewer: tuple[int, int] = (8, 12),
    n_sparse_reviewers: int = 4,
    n_premises: int = 24,
    n_annotators: int = 30,
    pairs_per_annotator: tuple[int, int] = (3, 6),
    n_sparse_annotators: int = 3,
    n_books: int = 24,
    n_customers: int = 30,
    reviews_per_customer: tuple[int, int] = (6, 10),
    n_sparse_customers: int = 5,
    n_rare_books: int = 4,
) -> SampleData:
    """Write the synthetic raw files under ``out_dir`` and return their paths.

    The same arguments always write the same bytes. Each source draws from its own random stream,
    so resizing one (say, more DOC annotators) leaves the others unchanged.
    """
    root = Path(out_dir)
    plots, reviews, mpst_truth = mpst_sample(
        random.Random(f"{seed}:mpst"), n_plots, n_reviewers, reviews_per_reviewer, n_sparse_reviewers
    )
    annotations, doc_truth = doc_sample(
        random.Random(f"{seed}:doc"), n_premises, n_annotators, pairs_per_annotator, n_sparse_annotators
    )
    amazon_reviews, books, amazon_truth = amazon_sample(
        random.Random(f"{seed}:amazon"), n_books, n_customers, reviews_per_customer, n_sparse_customers, n_rare_books
    )
    data = SampleData(
        root=root,
        mpst_plots=root / "mpst" / "plots.csv",
        mpst_reviews=root / "mpst" / "reviews.jsonl",
        doc_annotations=root / "doc" / "annotations.csv",
        amazon_reviews=root / "amazon" / "Books.json",
        amazon_meta=root / "amazon" / "meta_Books.json",
        ground_truth=root / "ground_truth.json",
    )
    # The synthetic marker first: a run killed midway leaves data that `prepare` still knows to be synthetic.
    write_json(
        data.ground_truth,
        {
            "synthetic": True,
            "seed": seed,
            "genres": list(GENRES),
            "mpst": mpst_truth,
            "doc": doc_truth,
            "amazon": amazon_truth,
        },
    )
    _write_csv(data.mpst_plots, plots)
    write_jsonl(data.mpst_reviews, reviews)
    _write_csv(data.doc_annotations, annotations)
    write_jsonl(data.amazon_reviews, amazon_reviews)
    write_jsonl(data.amazon_meta, books)
    with atomic_write(root / "README.md") as f:
        f.write(_README.format(seed=seed, formula=SCORE_FORMULA))
    return data
