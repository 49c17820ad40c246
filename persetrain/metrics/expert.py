"""ExPerT's scores from a match table: five aggregations x (recall, precision, F1) = 15 numbers.

A match record says, for one aspect of one side, whether it was matched to an aspect of the other
side and, if so, whether the evidences align in content and in writing style. The aggregation ε
turns (content, style) into a number:

* ``content_only``: content; ``style_only``: style;
* ``content_and_style``: both; ``content_or_style``: either;
* ``content_style_average``: (content + style) / 2 — the paper's default (0.74 human alignment).

Recall is the mean of ε over the reference's aspects (an unmatched aspect scores 0), precision the
mean over the output's aspects, F1 their harmonic mean. Names and edge cases follow the paper's
package (``expert_score.matching.utils``): a side with no aspects scores 0 (its sum is empty), F1 is
0 when recall + precision is 0, and an aspect whose matching failed after the retries stays in the
denominator as unmatched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

AGGREGATIONS: dict[str, object] = {
    "content_only": lambda c, s: float(c),
    "style_only": lambda c, s: float(s),
    "content_and_style": lambda c, s: float(c and s),
    "content_or_style": lambda c, s: float(c or s),
    "content_style_average": lambda c, s: (float(c) + float(s)) / 2,
}
DEFAULT = "content_style_average"
SCORE_NAMES: tuple[str, ...] = tuple(f"{a}_{m}" for a in AGGREGATIONS for m in ("recall", "precision", "f1"))


def _side(records: Sequence[Mapping], aggregate) -> float:
    if not records:
        return 0.0
    total = sum(aggregate(bool(r["content"]), bool(r["style"])) for r in records if r.get("matched_aspect") is not None)
    return total / len(records)


def f1(recall: float, precision: float) -> float:
    return 0.0 if recall + precision == 0 else 2 * precision * recall / (precision + recall)


def expert_scores(recall: Sequence[Mapping], precision: Sequence[Mapping]) -> dict[str, float]:
    """The 15 numbers from one instance's match records.

    ``recall`` holds one record per reference aspect and ``precision`` one per output aspect; each
    record has ``matched_aspect`` (None when unmatched) and booleans ``content`` and ``style``.
    """
    scores = {}
    for name, aggregate in AGGREGATIONS.items():
        r, p = _side(recall, aggregate), _side(precision, aggregate)
        scores[f"{name}_recall"], scores[f"{name}_precision"], scores[f"{name}_f1"] = r, p, f1(r, p)
    return scores


def mean_scores(per_instance: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Average of each of the 15 numbers over instances (the package's ``average_scores``)."""
    if not per_instance:
        return {name: float("nan") for name in SCORE_NAMES}
    return {name: sum(s[name] for s in per_instance) / len(per_instance) for name in SCORE_NAMES}


def per_target_means(
    targets: Sequence[str | None], scores: Sequence[float | None], details: Sequence[Mapping[str, float] | None]
) -> dict[str, dict]:
    """Reference-task metrics of one evaluator: per generator system (the judged ``target``), the mean
    score, and the mean of each of the 15 ExPerT numbers where judgments carry them.

    A ``None`` score is an unparsed judgment: counted in ``n_unparsed``, left out of the means.
    """
    grouped: dict[str, list[int]] = {}
    for i, target in enumerate(targets):
        grouped.setdefault(str(target), []).append(i)
    result = {}
    for target, rows in grouped.items():
        scored = [i for i in rows if scores[i] is not None]
        entry: dict = {
            "score": sum(scores[i] for i in scored) / len(scored) if scored else float("nan"),
            "n": len(rows),
            "n_unparsed": len(rows) - len(scored),
        }
        with_numbers = [details[i] for i in scored if details[i]]
        if with_numbers:
            entry.update(mean_scores(with_numbers))
        result[target] = entry
    return result
