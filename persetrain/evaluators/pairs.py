"""Preference rows judged by a method that compares a question's options: the pair as a two-option question.

A preference row (``PreferencePairExample``: a person, a prompt, two responses) is, for a method written for
PrefEval's questions (PREF, the LLM judges, mcq-letter), a question with two options: the person as the stated
preference, the prompt as the question, ``response_a`` and ``response_b`` as options 0 and 1 in the order the
reader drew. The method judges that question with its own prompts; its choice of option 0 or 1 is read back as
``A`` or ``B`` (no choice: a tie), every score and rationale kept. So one adapter, not a second code path per
method, makes a method that ranks options judge pairs. A method that compares systems' outputs (AuPEL) sees a pair
as a test case of two systems, ``A`` and ``B`` (:func:`judge_pairs_as_cases`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from persetrain.schema import Judgment, McqExample, PairwiseExample, PreferencePairExample, ReferenceExample

#: Option index -> the side of the pair it shows.
SIDES = {"0": "A", "1": "B"}


def is_pairs(examples: Sequence) -> bool:
    """Whether ``examples`` are preference rows (every reader keeps one layout per dataset)."""
    return bool(examples) and isinstance(examples[0], PreferencePairExample)


def as_questions(examples: Sequence[PreferencePairExample]) -> list[McqExample]:
    """Each pair as a two-option question. Built without validation, as the probes' copies are: a pair without
    a person (a plain preference, or the blind probe's copy) is a question without a stated preference."""
    return [
        McqExample.model_construct(
            id=ex.id,
            preference=ex.person,
            question=ex.prompt,
            options=[ex.response_a, ex.response_b],
            gold=0 if ex.preferred == "A" else 1,
            topic="",
            explanation="",
        )
        for ex in examples
    ]


def as_pair_judgment(judgment: Judgment) -> Judgment:
    """A question's judgment as the pair's: option 0 or 1 becomes ``A`` or ``B``; the option scores stay in
    ``details``."""
    return judgment.model_copy(update={"choice": SIDES.get(judgment.choice) if judgment.choice is not None else None})


def judge_pairs(judge: Callable[[Sequence[McqExample]], list[Judgment]], examples: Sequence) -> list[Judgment]:
    """``judge`` (a method's judging of questions) applied to the pairs as questions, read back as pairs."""
    return [as_pair_judgment(j) for j in judge(as_questions(examples))]


def refuse_plot_pairs(examples: Sequence, method: str) -> None:
    """A method that judges pairs as questions reads preference rows; Per-DOC's records (an aspect of two plots
    judged against an annotator's earlier choices) are PerSE's task, refused in one line."""
    if examples and isinstance(examples[0], PairwiseExample):
        raise ValueError(
            f"{method} judges the pairwise kind's preference rows (prompt / chosen / rejected), not "
            f"{type(examples[0]).__name__} records; PerSE and the learned judges read those"
        )


def refuse_preference_rows(examples: Sequence, method: str, reads: str) -> None:
    """A pairwise method written for Per-DOC (``reads`` says what of it) refuses preference rows in one line."""
    if is_pairs(examples):
        raise ValueError(
            f"{method} reads {reads}, which preference rows (prompt / chosen / rejected) do not have; judge them with "
            "rm, verifier, llm-judge or pref"
        )


#: A comparison's outcome for the first system (response A) as the pair's choice; a tie chooses neither.
OUTCOMES = {"win": "A", "loss": "B", "tie": None}


def as_test_cases(examples: Sequence[PreferencePairExample]) -> list[ReferenceExample]:
    """Each pair as a test case of two systems, ``A`` and ``B``, for a method that compares systems' outputs
    (AuPEL): the prompt as the task input, the person as the user's one writing sample (none without one)."""
    return [
        ReferenceExample.model_construct(
            id=ex.id,
            user_id=ex.id,
            input=ex.prompt,
            reference="",
            profile=[ex.person] if ex.person.strip() else [],
            outputs={"A": ex.response_a, "B": ex.response_b},
        )
        for ex in examples
    ]


def judge_pairs_as_cases(
    judge: Callable[[Sequence[ReferenceExample]], list[Judgment]], examples: Sequence, dimension: str
) -> list[Judgment]:
    """``judge`` (a comparison of systems) applied to the pairs as test cases; the outcome of A against B on
    ``dimension`` becomes the pair's choice, the other dimensions' judgments dropped."""
    return [
        j.model_copy(update={"choice": OUTCOMES[j.choice], "target": None, "score": None})
        for j in judge(as_test_cases(examples))
        if (j.details or {}).get("dimension") == dimension
    ]
