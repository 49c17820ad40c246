"""Typed records shared by data preparation, training, evaluators and metrics.

Validation lives here (score ranges, non-empty profiles) so that every reader reports bad input
the same way; no file is read and no model is called in this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from persetrain.engine.types import Cost

PERDOC_ASPECTS: tuple[str, ...] = (
    "Interestingness",
    "Adaptability",
    "Surprise",
    "Character Development",
    "Ending",
)


def ten_point_score(score: int, score_max: int) -> int:
    """Map a score on 1..score_max linearly onto the judge's 1..10 (1 -> 1, score_max -> 10).

    Amazon stars shown to a 1-10 judge as raw stars would read as harsh (5 stars = "5/10"); the
    same linear map, inverted, turns the judge's 1-10 back into stars (``metrics.calibration``).
    Halves round up (3 stars -> 5.5 -> 6).
    """
    return int(1 + (score - 1) * 9 / (score_max - 1) + 0.5)


def _none_blank(texts: list[str], what: str) -> list[str]:
    """``texts`` as they are, or a ValueError naming the first blank one (``what`` and its index)."""
    for i, text in enumerate(texts):
        if not text.strip():
            raise ValueError(f"{what} {i} is empty")
    return texts


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProfileReview(_Record):
    """One past review of the reviewer: the plot they saw, what they wrote, the 1-10 score."""

    plot_id: str
    plot: str = Field(min_length=1)
    review: str
    score: int = Field(ge=1, le=10)


class ScalarExample(_Record):
    """Per-MPST / Amazon: predict the review and score this reviewer gives the query plot."""

    id: str
    reviewer_id: str
    profile: list[ProfileReview] = Field(min_length=1)
    query_plot_id: str
    query_plot: str = Field(min_length=1)
    review: str = ""
    score: int = Field(ge=1, le=10)
    #: Top of the scale the scores (query and profile) are on: 10 for Per-MPST, 5 for Amazon stars.
    #: The judge always works on 1-10; ``ten_point_score`` maps into it for prompts.
    score_max: int = Field(default=10, ge=2, le=10)

    # A check across fields is a validator of the later field: pydantic validates fields in declaration
    # order, ``info.data`` holds the earlier ones that passed, and the error names the field it is on.
    @field_validator("query_plot_id")
    @classmethod
    def _not_in_profile(cls, plot_id: str, info: ValidationInfo) -> str:
        for i, item in enumerate(info.data.get("profile", [])):
            if item.plot_id == plot_id:
                raise ValueError(f"plot {plot_id!r} is also in the profile (item {i}): its review gives the answer")
        return plot_id

    @field_validator("score_max")
    @classmethod
    def _scores_on_scale(cls, score_max: int, info: ValidationInfo) -> int:
        # Runs only when score_max is given: the default, 10, is already every score's upper bound.
        scores = [("score", info.data.get("score"))]
        scores += [(f"profile item {i}'s score", item.score) for i, item in enumerate(info.data.get("profile", []))]
        for what, score in scores:
            if score is not None and score > score_max:
                raise ValueError(f"{what} {score} is above score_max {score_max}")
        return score_max


class PairwiseProfileItem(_Record):
    """One past Per-DOC annotation: two plots from one premise and the one the annotator preferred."""

    premise: str
    plot_a: str
    plot_b: str
    aspect: str
    preferred: Literal["A", "B"]


class PairwiseExample(_Record):
    """Per-DOC: which of two plots this annotator prefers on one aspect."""

    id: str
    annotator_id: str
    aspect: str
    profile: list[PairwiseProfileItem] = Field(min_length=1)
    premise: str
    plot_a: str
    plot_b: str
    preferred: Literal["A", "B"]

    @field_validator("aspect")
    @classmethod
    def _known_aspect(cls, aspect: str) -> str:
        if aspect not in PERDOC_ASPECTS:
            raise ValueError(f"unknown aspect {aspect!r}; expected one of {PERDOC_ASPECTS}")
        return aspect


class PreferencePairExample(_Record):
    """A preference row (TRL's ``prompt`` / ``chosen`` / ``rejected``, and a person) as a pairwise task: which of
    two responses this person prefers.

    The rows a user holds say ``chosen`` and ``rejected``; the reader (``persetrain.data``) shows them as
    ``response_a`` / ``response_b`` in an order seeded per example, so that a judge that favours the first
    position gains nothing, and ``preferred`` names the chosen one. ``person`` is empty for rows without a person
    column: a plain preference, judged with the person-blind prompts.
    """

    id: str = Field(min_length=1)
    person: str = ""
    person_label: str = "User preference"
    prompt: str = Field(min_length=1)
    response_a: str = Field(min_length=1)
    response_b: str = Field(min_length=1)
    preferred: Literal["A", "B"]

    @property
    def chosen(self) -> str:
        return self.response_a if self.preferred == "A" else self.response_b


class Judgment(_Record):
    """What an evaluator said about one example, with its rationale and what it cost.

    ``parsed`` is False when the model's text could not be read as an answer; such judgments are
    kept (and counted by the metrics) instead of being dropped. ``evaluator`` is the name of the
    system the judgment belongs to (``NAME-suffix`` for a method's second output, e.g. PerSE's
    ``NAME-expected``). ``target`` names which candidate of the example was judged when an example
    holds several (a generator system's output); ``details`` is the method's structured explanation
    (PREF's weighted factors, ExPerT's aspect matches, PARL's rules) next to the readable ``explanation``.
    """

    example_id: str
    evaluator: str
    target: str | None = None
    score: float | None = None
    choice: str | None = None
    probs: dict[str, float] | None = None
    explanation: str = ""
    raw: str = ""
    parsed: bool = True
    details: dict | None = None
    cost: Cost = Field(default_factory=Cost)


def reviewer_of(example: BaseModel) -> str:
    """Whose taste an example records: its reviewer, annotator or user."""
    for field in ("reviewer_id", "annotator_id", "user_id"):
        if hasattr(example, field):
            return getattr(example, field)
    raise ValueError(f"{type(example).__name__} records no reviewer, annotator or user")


class HistoryItem(_Record):
    """One earlier item of a PARL user: the task input and what the user wrote for it."""

    input: str = Field(min_length=1)
    output: str = Field(min_length=1)


class RubricExample(_Record):
    """PARL (task kind ``rubric``): a user's history, their own text for a new input, and competitors'.

    ``task`` is ``amazon`` (review text), ``reddit`` (post content) or ``news`` (headline);
    ``history`` holds up to the 10 latest earlier items, oldest first; ``baselines`` maps a
    generator's name (``non``, ``rag``, a checkpoint) to its text for the same ``input``.
    """

    id: str
    task: Literal["amazon", "reddit", "news"]
    user_id: str
    history: list[HistoryItem] = Field(min_length=1)
    input: str = Field(min_length=1)
    output: str = Field(min_length=1)
    baselines: dict[str, str] = Field(default_factory=dict)


class McqExample(_Record):
    """PrefEval (implicit multiple choice): which option answers the question as this user prefers.

    ``options`` are in the order shown to the evaluator (PrefEval's files list the gold option first;
    the reader shuffles them) and ``gold`` is the index of the preference-following one. One option
    is a valid record but not a valid judging task: evaluators that compare options refuse it.
    """

    id: str
    preference: str = Field(min_length=1)
    question: str = Field(min_length=1)
    options: list[str] = Field(min_length=1)
    #: Strict: an index written as text or as true/false is a mistake in the data, not a number to coerce.
    gold: int = Field(ge=0, strict=True)
    topic: str = ""
    explanation: str = ""

    @field_validator("options")
    @classmethod
    def _options_present(cls, options: list[str]) -> list[str]:
        return _none_blank(options, "option")

    @field_validator("gold")
    @classmethod
    def _gold_in_range(cls, gold: int, info: ValidationInfo) -> int:
        options = info.data.get("options")  # absent when the options themselves are invalid
        if options is not None and gold >= len(options):
            raise ValueError(f"gold index {gold} is outside the {len(options)} options")
        return gold


class ReferenceExample(_Record):
    """Reference-based personalized generation (ExPerT, AuPEL): one task input of one user.

    ``reference`` is the user's own text for the input (what ExPerT compares against; AuPEL does not
    need it, so it may be empty here and ExPerT refuses such a record), ``profile`` the user's
    earlier writing samples, and ``outputs`` one generated text per system (``{"rag": "..."}``).
    Every record of a dataset must hold the same systems; the reader checks that across records.
    """

    id: str = Field(min_length=1)
    user_id: str = Field(min_length=1)
    input: str = Field(min_length=1)
    reference: str = ""
    profile: list[str] = Field(min_length=1)
    outputs: dict[str, str] = Field(min_length=1)

    @field_validator("profile")
    @classmethod
    def _samples_present(cls, profile: list[str]) -> list[str]:
        return _none_blank(profile, "profile sample")

    @field_validator("outputs")
    @classmethod
    def _outputs_present(cls, outputs: dict[str, str]) -> dict[str, str]:
        for system, text in outputs.items():
            if not system.strip():
                raise ValueError("an output has an empty system name")
            if not text.strip():
                raise ValueError(f"the output of system {system!r} is empty")
        return outputs


def uneven_outputs(examples: Sequence[ReferenceExample]) -> tuple[int, str, str] | None:
    """The first record whose systems differ from the first record's: ``(index, field, problem)``; None if all agree.

    A single record cannot show this, so dataset readers apply it to the whole file: a record lacking
    a system would otherwise leave that system's mean score over fewer records than the others'.
    """
    systems = set(examples[0].outputs) if examples else set()
    for i, ex in enumerate(examples):
        missing, extra = sorted(systems - set(ex.outputs)), sorted(set(ex.outputs) - systems)
        if missing or extra:
            what = f"no output of {', '.join(missing)}" if missing else f"outputs of {', '.join(extra)}"
            return i, "outputs", f"{what}, unlike the first record (systems {sorted(systems)})"
    return None
