"""Multiple-choice judging (PrefEval, PREF Table 2): accuracy, MSE and nDCG of per-option scores.

An evaluator scores every option of a question on 0..10; the gold option is the one that follows
the user's preference. The paper's three numbers:

* accuracy — the gold option gets the strictly highest score (a tie at the top is wrong: a judge
  that gives every option 10 has not found the answer);
* MSE — squared error against the ideal scores (gold -> 10, every distractor -> 0), averaged over
  all options of all questions, so it measures calibration as well as ranking;
* nDCG — the gold option is the one relevant item, so DCG = 1 / log2(1 + rank). Tied options are
  ranked by their expected position under a random tie-break (the mean of 1 / log2(1 + p) over
  the tied positions), so ties neither help nor hurt on average.

A question whose scores are ``None`` (the evaluator's output could not be read) counts as wrong
for accuracy, as a random ranking for nDCG, and is left out of the MSE (there is no number to
compare); it is reported in ``n_unparsed`` either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Scores = Sequence[float] | None

#: The scale the paper maps gold and distractors onto.
GOLD_SCORE, DISTRACTOR_SCORE = 10.0, 0.0


def _check(scores: Sequence[Scores], gold: Sequence[int]) -> None:
    if len(scores) != len(gold):
        raise ValueError(f"scores has {len(scores)} questions but gold has {len(gold)}")
    for i, (s, g) in enumerate(zip(scores, gold, strict=True)):
        if s is not None and not 0 <= g < len(s):
            raise ValueError(f"question {i}: gold index {g} is outside its {len(s)} options")


def is_correct(scores: Scores, gold: int) -> bool:
    """True when the gold option's score is strictly above every other option's."""
    if scores is None:
        return False
    return all(scores[gold] > s for k, s in enumerate(scores) if k != gold)


def strict_argmax(scores: Scores) -> int | None:
    """The index of the strictly highest score; None when the top is tied or there are no scores.

    A judge's "choice" among options: a tie at the top is no choice (and never a correct one).
    """
    if not scores:
        return None
    best = max(range(len(scores)), key=scores.__getitem__)
    return best if is_correct(scores, best) else None


def squared_error(scores: Sequence[float], gold: int) -> float:
    """Mean over the options of (score - ideal)^2, ideal = 10 for gold and 0 otherwise."""
    ideal = [GOLD_SCORE if k == gold else DISTRACTOR_SCORE for k in range(len(scores))]
    return sum((s - t) ** 2 for s, t in zip(scores, ideal, strict=True)) / len(scores)


def ndcg(scores: Scores, gold: int, n_options: int | None = None) -> float:
    """nDCG of one question with a single relevant option (ideal DCG = 1); ``None`` scores are a
    random ranking of ``n_options`` options."""
    if scores is None:
        if n_options is None:
            raise ValueError("an unparsed question needs n_options to score a random ranking")
        above, tied = 0, n_options - 1
    else:
        above = sum(s > scores[gold] for k, s in enumerate(scores) if k != gold)
        tied = sum(s == scores[gold] for k, s in enumerate(scores) if k != gold)
    positions = range(above + 1, above + tied + 2)
    return sum(1 / math.log2(1 + p) for p in positions) / len(positions)


def mcq_metrics(scores: Sequence[Scores], gold: Sequence[int], n_options: Sequence[int] | None = None) -> dict:
    """Accuracy, MSE and nDCG over questions; ``scores[i]`` lists question i's option scores (0..10).

    ``n_options`` (needed only for unparsed questions) gives each question's number of options.
    """
    _check(scores, gold)
    counts = list(n_options) if n_options is not None else [len(s) if s is not None else None for s in scores]
    parsed = [(s, g) for s, g in zip(scores, gold, strict=True) if s is not None]
    n = len(gold)
    return {
        "accuracy": sum(is_correct(s, g) for s, g in zip(scores, gold, strict=True)) / n if n else math.nan,
        "mse": sum(squared_error(s, g) for s, g in parsed) / len(parsed) if parsed else math.nan,
        "ndcg": sum(ndcg(s, g, c) for s, g, c in zip(scores, gold, counts, strict=True)) / n if n else math.nan,
        "n": n,
        "n_unparsed": n - len(parsed),
    }
