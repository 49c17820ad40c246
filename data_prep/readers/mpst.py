"""Reader for MPST-with-reviews: movie synopses and the IMDb reviews of them (source of Per-MPST).

Two tables, CSV or JSON lines: plots (id, title, synopsis) and reviews (plot id, reviewer id, review
text, 1-10 score). Default column names follow the public MPST release (``imdb_id``,
``plot_synopsis``); pass ``columns`` to read files with other headers.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from data_prep.readers.tables import ColumnMap, Id, Integral, Text, merged_columns, read_table

PLOT_COLUMNS: dict[str, str] = {"id": "imdb_id", "title": "title", "synopsis": "plot_synopsis"}
REVIEW_COLUMNS: dict[str, str] = {
    "plot_id": "imdb_id",
    "reviewer_id": "reviewer_id",
    "text": "review",
    "score": "rating",
}


class Plot(BaseModel):
    """One movie: its title (kept for the contamination probe) and its synopsis."""

    model_config = ConfigDict(extra="forbid")
    id: Id
    title: Text
    synopsis: Text


class Review(BaseModel):
    """One reviewer's comment on one movie, with the 1-10 score they gave it."""

    model_config = ConfigDict(extra="forbid")
    plot_id: Id
    reviewer_id: Id
    text: Text
    score: Integral = Field(ge=1, le=10)


def read_plots(path: str | os.PathLike, columns: ColumnMap | None = None) -> list[Plot]:
    """Read the plots table; a repeated plot id is an error since reviews could not say which one."""
    return read_table(path, Plot, merged_columns(PLOT_COLUMNS, columns), unique="id")


def read_reviews(path: str | os.PathLike, columns: ColumnMap | None = None) -> list[Review]:
    return read_table(path, Review, merged_columns(REVIEW_COLUMNS, columns))
