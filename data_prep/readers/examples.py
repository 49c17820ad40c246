"""Two rows of each raw layout ``persetrain prepare`` reads, the one place they are written.

``docs/formats.md`` shows them, and ``tests/test_formats.py`` checks that it does and that each pair of rows reads
through its real reader (so neither the page nor these rows can drift from what the readers take).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data_prep.readers import amazon, doc, mpst


@dataclass(frozen=True)
class RawLayout:
    """A raw file's name (as ``persetrain prepare`` looks for it), two of its rows, and the reader that takes it."""

    file: str
    rows: tuple[dict, dict]
    read: Callable[[Path], object]


RAW_EXAMPLES: dict[str, RawLayout] = {
    "MPST plots": RawLayout(
        "mpst/plots.jsonl",
        (
            {"imdb_id": "tt0000001", "title": "The Keeper", "plot_synopsis": "A keeper tends a remote light."},
            {"imdb_id": "tt0000002", "title": "Red Run", "plot_synopsis": "A crew races a storm across Mars."},
        ),
        mpst.read_plots,
    ),
    "MPST reviews": RawLayout(
        "mpst/reviews.jsonl",
        (
            {"imdb_id": "tt0000001", "reviewer_id": "ur1", "review": "Calm and moving.", "rating": 8},
            {"imdb_id": "tt0000002", "reviewer_id": "ur1", "review": "Too rushed.", "rating": 3},
        ),
        mpst.read_reviews,
    ),
    "DOC annotations": RawLayout(
        "doc/annotations.jsonl",
        (
            {
                "premise": "A lost dog.",
                "plot_a": "The dog is never found.",
                "plot_b": "The dog walks home at dawn.",
                "annotator_id": "w1",
                "question": "Which story plot has a better ending?",
                "answer": "B",
            },
            {
                "premise": "A locked room.",
                "plot_a": "The butler did it.",
                "plot_b": "The victim staged it all.",
                "annotator_id": "w1",
                "question": "Which story plot is more surprising?",
                "answer": "Plot B",
            },
        ),
        doc.read_annotations,
    ),
    "Amazon 2018 reviews": RawLayout(
        "amazon/Books.jsonl",
        (
            {
                "reviewerID": "A1",
                "asin": "0001",
                "overall": 5.0,
                "reviewText": "Moving.",
                "summary": "Lovely",
                "unixReviewTime": 1500000000,
            },
            {
                "reviewerID": "A2",
                "asin": "0001",
                "overall": 2.0,
                "reviewText": "Slow.",
                "summary": "Meh",
                "unixReviewTime": 1500086400,
            },
        ),
        amazon.read_reviews,
    ),
    "Amazon 2018 metadata": RawLayout(
        "amazon/meta_Books.jsonl",
        (
            {"asin": "0001", "title": "The Keeper", "description": ["A keeper tends a remote <b>light</b>."]},
            {"asin": "0002", "title": "Red Run", "description": "A crew races a storm across Mars."},
        ),
        amazon.read_books,
    ),
    "Amazon 2023 reviews": RawLayout(
        "amazon/Books.jsonl",
        (
            {
                "user_id": "AE1",
                "parent_asin": "0001",
                "asin": "0001",
                "rating": 5.0,
                "title": "Lovely",
                "text": "Moving.",
                "timestamp": 1600000000000,
            },
            {
                "user_id": "AE2",
                "parent_asin": "0001",
                "asin": "0001",
                "rating": 2.0,
                "title": "Meh",
                "text": "Slow.",
                "timestamp": 1600086400000,
            },
        ),
        amazon.read_reviews,
    ),
    "Amazon 2023 metadata": RawLayout(
        "amazon/meta_Books.jsonl",
        (
            {
                "parent_asin": "0001",
                "title": "The Keeper",
                "description": ["A keeper tends a remote light."],
                "main_category": "Books",
            },
            {"parent_asin": "0002", "title": "Red Run", "description": [], "main_category": "Books"},
        ),
        amazon.read_books,
    ),
}
