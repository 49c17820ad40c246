"""Reader for DOC human annotations: which of two story plots an annotator preferred, per question.

One row per (annotator, plot pair, question): premise, plot A, plot B, annotator id, the question
asked and the answer (A / B / both / neither). CSV or JSON lines; pass ``columns`` for other headers.
Which questions count as which PerSE aspect is decided by the Per-DOC builder, not here, so that
the reader keeps every row the file holds.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from data_prep.readers.tables import ColumnMap, Id, Text, merged_columns, read_table

ANNOTATION_COLUMNS: dict[str, str] = {
    "pair_id": "pair_id",
    "premise": "premise",
    "plot_a": "plot_a",
    "plot_b": "plot_b",
    "annotator_id": "annotator_id",
    "question": "question",
    "answer": "answer",
}

Answer = Literal["A", "B", "both", "neither"]

# Spellings seen in survey exports, all meaning the same four answers.
_ANSWERS: dict[str, Answer] = {
    "a": "A",
    "plot a": "A",
    "story a": "A",
    "1": "A",
    "plot 1": "A",
    "b": "B",
    "plot b": "B",
    "story b": "B",
    "2": "B",
    "plot 2": "B",
    "both": "both",
    "both are good": "both",
    "both good": "both",
    "neither": "neither",
    "neither is good": "neither",
    "none": "neither",
}


class Annotation(BaseModel):
    """One answer of one annotator about one plot pair.

    ``pair_id`` is optional in the file: without it a pair is identified by a hash of its premise and
    plots, so two rows about the same pair always agree on the id.
    """

    model_config = ConfigDict(extra="forbid")
    pair_id: str = ""
    premise: Text
    plot_a: Text
    plot_b: Text
    annotator_id: Id
    question: Text
    answer: Answer

    @field_validator("answer", mode="before")
    @classmethod
    def _normalize_answer(cls, value: object) -> object:
        if isinstance(value, str | int):
            key = re.sub(r"\s+", " ", str(value).strip().lower())
            if key not in _ANSWERS:
                raise ValueError(f"unknown answer {value!r}; expected A, B, both or neither")
            return _ANSWERS[key]
        return value

    @field_validator("pair_id", mode="before")
    @classmethod
    def _pair_id_text(cls, value: object) -> object:
        return str(value).strip() if isinstance(value, str | int) else value

    @model_validator(mode="after")
    def _derive_pair_id(self) -> Annotation:
        if not self.pair_id:
            digest = hashlib.sha256("\x1f".join((self.premise, self.plot_a, self.plot_b)).encode()).hexdigest()
            self.pair_id = "pair-" + digest[:12]
        return self


def read_annotations(path: str | os.PathLike, columns: ColumnMap | None = None) -> list[Annotation]:
    return read_table(path, Annotation, merged_columns(ANNOTATION_COLUMNS, columns), optional=("pair_id",))
