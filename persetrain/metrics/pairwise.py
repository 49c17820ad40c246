"""Accuracy of pairwise preferences (Per-DOC, PerSE Table 3): per aspect and their macro average.

A prediction of ``None`` (the judge's answer could not be read as "A" or "B") counts as wrong
and is reported in ``n_unparsed``: a judge that refuses to answer must not look more accurate
than one that guesses. Reading the model's text into a label is the evaluator's job; here a
prediction is correct only when it equals the gold label exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def accuracy(pred: Sequence[str | None], gold: Sequence[str]) -> dict:
    """Share of exact matches; ``None`` predictions are wrong and counted in ``n_unparsed``."""
    if len(pred) != len(gold):
        raise ValueError(f"pred has {len(pred)} items but gold has {len(gold)}")
    if any(g is None for g in gold):
        raise ValueError("gold labels must all be present; a missing label is a data error")
    n_correct = sum(p is not None and p == g for p, g in zip(pred, gold, strict=True))
    return {
        "accuracy": n_correct / len(gold) if gold else math.nan,
        "n": len(gold),
        "n_correct": n_correct,
        "n_unparsed": sum(p is None for p in pred),
    }


def pairwise_accuracy(pred: Sequence[str | None], gold: Sequence[str], aspects: Sequence[str]) -> dict:
    """Accuracy per aspect, their unweighted mean (``macro_accuracy``) and the pooled accuracy.

    The paper's "Average" column is the macro mean, so an aspect with fewer test examples weighs
    as much as the others; ``micro_accuracy`` (pooled over all examples) is given alongside.
    Aspects appear in ``per_aspect`` in order of first occurrence.
    """
    if not len(pred) == len(gold) == len(aspects):
        raise ValueError(f"lengths differ: pred {len(pred)}, gold {len(gold)}, aspects {len(aspects)}")
    per_aspect = {}
    for aspect in dict.fromkeys(aspects):
        idx = [i for i, a in enumerate(aspects) if a == aspect]
        per_aspect[aspect] = accuracy([pred[i] for i in idx], [gold[i] for i in idx])
    overall = accuracy(pred, gold)
    return {
        "per_aspect": per_aspect,
        "macro_accuracy": (
            sum(a["accuracy"] for a in per_aspect.values()) / len(per_aspect) if per_aspect else math.nan
        ),
        "micro_accuracy": overall["accuracy"],
        "n": overall["n"],
        "n_unparsed": overall["n_unparsed"],
    }


def preference_accuracy(choices: Sequence[str | None], parsed: Sequence[bool], gold: Sequence[str]) -> dict:
    """Preference rows: the share of pairs where the chosen response wins (``accuracy``).

    A readable judgment without a choice is a tie (``n_ties``: both responses scored the same), an unreadable one
    is ``n_unparsed``; both count as not won. ``micro_accuracy`` and ``macro_accuracy`` repeat ``accuracy`` (one
    aspect), the keys a pairwise task's comparisons read.
    """
    if not len(choices) == len(parsed) == len(gold):
        raise ValueError(f"lengths differ: choices {len(choices)}, parsed {len(parsed)}, gold {len(gold)}")
    n_won = sum(ok and c == g for c, ok, g in zip(choices, parsed, gold, strict=True))
    share = n_won / len(gold) if gold else math.nan
    return {
        "accuracy": share,
        "micro_accuracy": share,
        "macro_accuracy": share,
        "n": len(gold),
        "n_correct": n_won,
        "n_ties": sum(ok and c is None for c, ok in zip(choices, parsed, strict=True)),
        "n_unparsed": sum(not ok for ok in parsed),
    }
