"""Reader for Amazon reviews in the public 2018 JSON-lines layout, and the 5-core filter.

Reviews: one JSON object a line with ``reviewerID``, ``asin``, ``overall`` (1.0-5.0 stars),
``reviewText`` and ``summary`` (other keys are ignored). Metadata: one object a line with ``asin``,
``title`` and ``description`` (a string or, as in the 2018 dump, a list of strings that may hold
HTML). Files may be gzipped (``.json.gz``), as they are distributed.
"""

from __future__ import annotations

import html
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from data_prep.readers.tables import ColumnMap, Id, Integral, Text, merged_columns, parse_row, read_rows
from persetrain.console import warn

REVIEW_COLUMNS: dict[str, str] = {
    "reviewer_id": "reviewerID",
    "asin": "asin",
    "stars": "overall",
    "text": "reviewText",
    "summary": "summary",
}
META_COLUMNS: dict[str, str] = {"asin": "asin", "title": "title", "description": "description"}


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
    """Read reviews. The 2018 dump has reviews without text (rating only); by default they are an
    error like any empty text, ``drop_empty_text=True`` skips them and says how many.
    """
    cols = merged_columns(REVIEW_COLUMNS, columns)
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
    """Read the metadata file into ``asin -> Book``; the 2018 dump repeats some asins, the first wins."""
    cols = merged_columns(META_COLUMNS, columns)
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
