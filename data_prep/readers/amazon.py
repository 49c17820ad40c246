"""Reader for Amazon reviews in the public 2018 and 2023 JSON-lines layouts, and the k-core filter.

Each dump is recognized by its own column names (:data:`LAYOUTS`, :func:`detect_layout`), read from the first
record (or a CSV header):

* **2018** (McAuley lab, "Amazon Review Data 2018"): reviews with ``reviewerID``, ``asin``, ``overall`` (1.0-5.0
  stars), ``reviewText``, ``summary`` (and ``unixReviewTime``); metadata with ``asin``, ``title``,
  ``description`` (a string or a list of strings that may hold HTML).
* **2023** ("Amazon Reviews 2023"): reviews with ``user_id``, ``parent_asin``, ``rating``, ``title`` (the
  review's title), ``text`` (and ``timestamp``); metadata with ``parent_asin``, ``title``, ``description`` (a
  list of strings).

Other keys are ignored. ``columns`` (``persetrain prepare perse --columns FIELD=COLUMN``) maps any of our fields
to another column, on top of the layout found. Files may be gzipped (``.json.gz``, ``.jsonl.gz``), as they are
distributed.
"""

from __future__ import annotations

import html
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from data_prep.readers.tables import (
    ColumnMap,
    Id,
    Integral,
    Text,
    first_columns,
    merged_columns,
    parse_row,
    read_rows,
)
from persetrain.console import warn
from persetrain.io import InputError

#: Our fields -> each dump's column names: reviews, and the metadata file.
LAYOUTS: dict[str, dict[str, dict[str, str]]] = {
    "2018": {
        "reviews": {
            "reviewer_id": "reviewerID",
            "asin": "asin",
            "stars": "overall",
            "text": "reviewText",
            "summary": "summary",
        },
        "meta": {"asin": "asin", "title": "title", "description": "description"},
    },
    "2023": {
        "reviews": {
            "reviewer_id": "user_id",
            "asin": "parent_asin",
            "stars": "rating",
            "text": "text",
            "summary": "title",
        },
        "meta": {"asin": "parent_asin", "title": "title", "description": "description"},
    },
}
#: The id columns that tell the dumps apart, by file kind, newest first (a 2023 review also holds an ``asin``).
LAYOUT_IDS: dict[str, dict[str, tuple[str, ...]]] = {
    "reviews": {"2023": ("user_id", "parent_asin"), "2018": ("reviewerID", "asin")},
    "meta": {"2023": ("parent_asin",), "2018": ("asin",)},
}
REVIEW_COLUMNS = LAYOUTS["2018"]["reviews"]
META_COLUMNS = LAYOUTS["2018"]["meta"]


def detect_layout(path: str | os.PathLike, kind: str, columns: ColumnMap | None = None) -> dict[str, str]:
    """The column mapping of a reviews or metadata (``kind``) file: its dump's (2018 or 2023, told by the id
    columns of its first record), with ``columns`` on top. A file of neither layout needs ``columns``, which then
    go on top of the 2018 names; without them it is one line naming both layouts' columns."""
    found = first_columns(path)
    year = next((y for y, ids in LAYOUT_IDS[kind].items() if set(ids) <= found), None)
    if year is None and not columns:
        layouts = "; ".join(f"{y}: {', '.join(LAYOUTS[y][kind].values())}" for y in LAYOUT_IDS[kind])
        raise InputError(
            path,
            f"not an Amazon {kind} file of a known layout ({layouts}); it has {', '.join(sorted(found))}: map its "
            "columns with --columns FIELD=COLUMN",
        )
    return merged_columns(LAYOUTS[year or "2018"][kind], columns)


class AmazonReview(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reviewer_id: Id
    asin: Id
    stars: Integral = Field(ge=1, le=5)
    text: Text
    summary: str = ""


def _clean(text: str) -> str:
    """Descriptions carry HTML markup and entities in the 2018 dump; the judge should see prose."""
    text = re.sub(r"<[^>]+>", " ", html.unescape(text))
    return re.sub(r"\s+", " ", text).strip()


class Book(BaseModel):
    model_config = ConfigDict(extra="forbid")
    asin: Id
    title: str = ""
    description: str = ""

    @field_validator("title", "description", mode="before")
    @classmethod
    def _flatten(cls, value: object) -> object:
        if value is None:
            return ""
        if isinstance(value, list):
            if not all(isinstance(v, str) for v in value):
                raise ValueError("expected a string or a list of strings")
            value = " ".join(value)
        return _clean(value) if isinstance(value, str) else value


def read_reviews(
    path: str | os.PathLike, columns: ColumnMap | None = None, drop_empty_text: bool = False
) -> list[AmazonReview]:
    """Read reviews of either layout (:func:`detect_layout`). The dumps hold reviews without text (rating only); by
    default they are an error like any empty text, ``drop_empty_text=True`` skips them and says how many.
    """
    cols = detect_layout(path, "reviews", columns)
    if cols["text"] not in first_columns(path):  # rating-only reviews lack a text; a file without the column is wrong
        raise InputError(path, "missing column (holds our 'text')", record=1, field=cols["text"])
    required = ["reviewer_id", "asin", "stars"] + ([] if drop_empty_text else ["text"])
    optional = ["summary"] + (["text"] if drop_empty_text else [])
    reviews, empty = [], 0
    for line, row in read_rows(path, cols, required, optional):
        if drop_empty_text and not str(row.get("text") or "").strip():
            empty += 1
            continue
        reviews.append(parse_row(AmazonReview, row, path, line, cols))
    if empty:
        warn(f"{path}: skipped {empty} reviews without text")
    return reviews


def read_books(path: str | os.PathLike, columns: ColumnMap | None = None) -> dict[str, Book]:
    """Read the metadata file (either layout) into ``asin -> Book``; the dumps repeat some ids, the first wins."""
    cols = detect_layout(path, "meta", columns)
    books: dict[str, Book] = {}
    for line, row in read_rows(path, cols, ["asin"], ["title", "description"]):
        book = parse_row(Book, row, path, line, cols)
        books.setdefault(book.asin, book)
    return books


@dataclass(frozen=True)
class CoreResult:
    reviews: list[AmazonReview]
    rounds: int
    dropped_reviews: int
    dropped_users: int
    dropped_items: int


def k_core(reviews: Sequence[AmazonReview], k: int = 5) -> CoreResult:
    """Keep reviews whose user and item both have >= k reviews, repeating until nothing changes.

    One pass is not enough: dropping a rare item can push one of its users below k, which can push
    another item below k, and so on; the loop runs until a pass removes nothing.
    """
    kept = list(reviews)
    rounds = 0
    while True:
        users = Counter(r.reviewer_id for r in kept)
        items = Counter(r.asin for r in kept)
        survivors = [r for r in kept if users[r.reviewer_id] >= k and items[r.asin] >= k]
        rounds += 1
        if len(survivors) == len(kept):
            break
        kept = survivors
    return CoreResult(
        reviews=kept,
        rounds=rounds,
        dropped_reviews=len(reviews) - len(kept),
        dropped_users=len({r.reviewer_id for r in reviews}) - len({r.reviewer_id for r in kept}),
        dropped_items=len({r.asin for r in reviews}) - len({r.asin for r in kept}),
    )
