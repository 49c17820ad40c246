"""PREF prompts (paper, Appendix A, Figures 3-5).

Stage 1 (``pref/coverage``) sees the question only and lists what makes a good answer as
``{keyword: sentence}``. Stage 2 (``pref/alignment``) sees the question, that list and the user's
preference, and weighs every factor 0..10 (0 when unrelated), adding missing preference factors
under keys that start with ``preh_``. Stage 3 (``pref/score``) sees the question, the preference,
all candidate answers and the factor list and gives each candidate a 0..10 score as a JSON list.
``base`` scores with no factor list (``pref/score-base``); ``w/S1`` shows stage 1's factors
without weights. The JSON schemas below are what structured output enforces on each stage.

For the ``choice_probs`` path of stage 3 the same request gets an assistant prefix that restates one
candidate and opens its score (``score_prefix``); the 0..10 distribution there gives an expected
score per candidate. (The zero-shot letter-choice prompt is :mod:`persetrain.prompts.mcq_letter`.)
"""

from __future__ import annotations

from persetrain.engine.types import ChatRequest
from persetrain.person import stated
from persetrain.prompts.template import PromptTemplate, register

SCORE_MIN, SCORE_MAX = 0, 10
SCORE_CHOICES: tuple[str, ...] = tuple(str(n) for n in range(SCORE_MIN, SCORE_MAX + 1))
#: Stage 2 keys that the preference stage adds start with this prefix (the paper's convention).
ADDED_PREFIX = "preh_"
#: Bounds that keep small models from looping inside a JSON object.
MAX_FACTORS, MAX_ADDED, KEY_CHARS, DESCRIPTION_CHARS = 6, 3, 30, 100

COVERAGE = register(
    PromptTemplate(
        method="pref",
        task="coverage",
        user=(
            "Question:\n{question}\n\n"
            "What makes a good answer to this question? List the points to check, each as a short keyword "
            "and one sentence, for example\n"
            '"Goals": "Understands what the person asking wants to achieve"\n\n'
            "Reply with a JSON object that maps each keyword to its sentence."
        ),
    )
)

ALIGNMENT = register(
    PromptTemplate(
        method="pref",
        task="alignment",
        user=(
            "Question:\n{question}\n\n"
            "An expert listed these factors to consider when answering it:\n{factors}\n\n"
            "The user who asks has this preference:\n{preference}\n\n"
            "Which factors matter for this user's preference when answering the question? Give every factor "
            "of the list a weight from 0 to 10: high when it is closely tied to the preference, 0 when the "
            "preference does not touch it. Most factors are not closely tied. If the preference calls for a "
            f"factor the list lacks, add it under a keyword that starts with '{ADDED_PREFIX}'.\n\n"
            "Reply with a JSON object that maps each factor keyword to its weight."
        ),
    )
)

_SCORE_TAIL = (
    "Taking the user's preference{with_factors} into account, score every candidate answer from "
    f"{SCORE_MIN} to {SCORE_MAX}. Reply with a JSON list holding one score per candidate, in order, "
    "and nothing else."
)

SCORE = register(
    PromptTemplate(
        method="pref",
        task="score",
        user=(
            "Question:\n{question}\n\n"
            "The user's preference:\n{preference}\n\n"
            "Candidate answers:\n{candidates}\n\n"
            "Factors to consider when judging an answer{factor_note}:\n{factors}\n\n"
            + _SCORE_TAIL.format(with_factors=" and the factors")
        ),
    )
)

SCORE_BASE = register(
    PromptTemplate(
        method="pref",
        task="score-base",
        user=(
            "Question:\n{question}\n\n"
            "The user's preference:\n{preference}\n\n"
            "Candidate answers:\n{candidates}\n\n" + _SCORE_TAIL.format(with_factors="")
        ),
    )
)

#: Shown after "Factors to consider" so the model knows how to read the numbers.
WEIGHTED_NOTE = " (weight 0-10: a high weight means the factor matters a lot for this user)"


def candidate_list(options: list[str]) -> str:
    return "\n".join(f"{k}. {option}" for k, option in enumerate(options, start=1))


def factor_lines(factors: dict[str, str], weights: dict[str, int] | None = None) -> str:
    """``- keyword: sentence`` per factor; with weights, ``[w]`` is shown and the heaviest come first."""
    if weights is None:
        return "\n".join(f"- {key}: {text}" for key, text in factors.items())
    keys = sorted(weights, key=lambda k: -weights[k])
    return "\n".join(f"- {key} [{weights[key]}]" + (f": {factors[key]}" if factors.get(key) else "") for key in keys)


def coverage_request(question: str, id: str | None = None) -> ChatRequest:
    return COVERAGE.render(id=id, question=question)


def alignment_request(question: str, factors: dict[str, str], preference: str, id: str | None = None) -> ChatRequest:
    return ALIGNMENT.render(id=id, question=question, factors=factor_lines(factors), preference=stated(preference))


def score_request(
    question: str, preference: str, options: list[str], factors: str | None, weighted: bool, id: str | None = None
) -> ChatRequest:
    """Stage 3; ``factors=None`` is the ``base`` ablation (no guideline at all)."""
    preference = stated(preference)
    if factors is None:
        return SCORE_BASE.render(id=id, question=question, preference=preference, candidates=candidate_list(options))
    return SCORE.render(
        id=id,
        question=question,
        preference=preference,
        candidates=candidate_list(options),
        factors=factors or "(none)",
        factor_note=WEIGHTED_NOTE if weighted else "",
    )


def score_prefix(index: int, option: str) -> str:
    """Assistant prefix that asks for one candidate's score (the ``choice_probs`` path of stage 3)."""
    return f'Candidate {index + 1}: "{option}"\nScore (0-10): '


def coverage_schema() -> dict:
    return {
        "type": "object",
        "propertyNames": {"pattern": f"^[A-Za-z][A-Za-z0-9 _-]{{0,{KEY_CHARS - 1}}}$"},
        "additionalProperties": {"type": "string", "minLength": 1, "maxLength": DESCRIPTION_CHARS},
        "minProperties": 2,
        "maxProperties": MAX_FACTORS,
    }


def _weight() -> dict:
    return {"type": "integer", "minimum": SCORE_MIN, "maximum": SCORE_MAX}


def alignment_schema(keys: list[str]) -> dict:
    """Every stage-1 factor must get a weight; up to ``MAX_ADDED`` ``preh_`` factors may be added."""
    return {
        "type": "object",
        "properties": {key: _weight() for key in keys},
        "required": list(keys),
        "patternProperties": {f"^{ADDED_PREFIX}[a-z0-9_]{{1,{KEY_CHARS}}}$": _weight()},
        "additionalProperties": False,
        "maxProperties": len(keys) + MAX_ADDED,
    }


def scores_schema(n: int) -> dict:
    return {"type": "array", "items": _weight(), "minItems": n, "maxItems": n}
