"""Correlation between predicted and gold scalar scores (PerSE Table 2: Pearson, Spearman, Kendall).

An evaluator's score can be missing: the model wrote text we could not read as a number. Dropping
those examples would flatter a model that fails on exactly the hard cases, so missing predictions
are always counted (``n_unparsed``) and, by default, replaced by the midpoint of the score scale
(an uninformative guess that keeps every example in the sample). ``unparsed="drop"`` is available
for analyses that want the conditional correlation, and says so in its result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from scipy import stats

UnparsedPolicy = Literal["midpoint", "drop"]
CorrelationMethod = Literal["pearson", "spearman", "kendall"]
METHODS: tuple[CorrelationMethod, ...] = ("pearson", "spearman", "kendall")


def _is_missing(value: float | None) -> bool:
    return value is None or math.isnan(value)


def _resolve(
    pred: Sequence[float | None],
    gold: Sequence[float],
    unparsed: UnparsedPolicy,
    scale: tuple[float, float],
) -> tuple[np.ndarray, np.ndarray, int]:
    """Apply the unparsed-prediction policy; return the paired arrays and how many were missing."""
    if len(pred) != len(gold):
        raise ValueError(f"pred has {len(pred)} items but gold has {len(gold)}")
    if any(_is_missing(g) for g in gold):
        raise ValueError("gold scores must all be present; a missing label is a data error")
    missing = np.array([_is_missing(p) for p in pred], dtype=bool)
    if unparsed == "midpoint":
        fill = (scale[0] + scale[1]) / 2
        x = np.array([fill if m else p for p, m in zip(pred, missing, strict=True)], dtype=float)
        y = np.asarray(gold, dtype=float)
    elif unparsed == "drop":
        keep = ~missing
        x = np.array([p for p, m in zip(pred, missing, strict=True) if not m], dtype=float)
        y = np.asarray(gold, dtype=float)[keep]
    else:
        raise ValueError(f"unknown unparsed policy {unparsed!r}; use 'midpoint' or 'drop'")
    return x, y, int(missing.sum())


def _undefined_reason(x: np.ndarray, y: np.ndarray) -> str:
    """Why a correlation cannot be computed on these arrays, or '' when it can.

    Checked up front because scipy answers a constant input with a warning per call and a nan,
    which in a bootstrap loop becomes thousands of identical warnings.
    """
    if len(x) < 2:
        return f"fewer than 2 scored pairs ({len(x)}): correlation undefined"
    if np.all(x == x[0]):
        return "predictions are constant: correlation undefined"
    if np.all(y == y[0]):
        return "gold scores are constant: correlation undefined"
    return ""


def _kendall_b(x: np.ndarray, y: np.ndarray):
    return stats.kendalltau(x, y, variant="b")


_SCIPY: dict[CorrelationMethod, Callable] = {
    "pearson": stats.pearsonr,
    "spearman": stats.spearmanr,
    "kendall": _kendall_b,
}


def correlations(
    pred: Sequence[float | None],
    gold: Sequence[float],
    *,
    unparsed: UnparsedPolicy = "midpoint",
    scale: tuple[float, float] = (1.0, 10.0),
) -> dict:
    """Pearson, Spearman and Kendall tau-b of ``pred`` against ``gold``, with two-sided p-values.

    ``pred`` may contain ``None`` (or nan) for unparsed predictions. With ``unparsed="midpoint"``
    (default) they are scored as the midpoint of ``scale``; with ``"drop"`` they are left out.
    Either way ``n`` is the number of examples, ``n_unparsed`` how many predictions were missing
    and ``n_used`` how many pairs entered the correlation. When the correlation is undefined
    (constant input, fewer than two pairs) every coefficient is nan and ``note`` says why.
    """
    x, y, n_unparsed = _resolve(pred, gold, unparsed, scale)
    result: dict = {
        "n": len(gold),
        "n_unparsed": n_unparsed,
        "n_used": len(x),
        "unparsed_policy": unparsed,
        "unparsed_value": (scale[0] + scale[1]) / 2 if unparsed == "midpoint" else None,
        "note": _undefined_reason(x, y),
    }
    for method in METHODS:
        if result["note"]:
            coef, p = math.nan, math.nan
        else:
            res = _SCIPY[method](x, y)
            coef, p = float(res[0]), float(res[1])
        result[method], result[f"{method}_p"] = coef, p
    return result


def bootstrap_ci(
    pred: Sequence[float | None],
    gold: Sequence[float],
    *,
    method: CorrelationMethod = "kendall",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    unparsed: UnparsedPolicy = "midpoint",
    scale: tuple[float, float] = (1.0, 10.0),
) -> tuple[float, float]:
    """Percentile bootstrap interval of one correlation, resampling (pred, gold) pairs.

    The differences between evaluators in the PerSE tables are a few hundredths of Kendall on
    ~1,000 examples, so an interval tells whether an ordering is worth reporting. Missing
    predictions follow the same policy as :func:`correlations`. Resamples on which the correlation
    is undefined (all values equal) are skipped; ``(nan, nan)`` when none is defined.
    """
    x, y, _ = _resolve(pred, gold, unparsed, scale)
    if _undefined_reason(x, y):
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(x), size=len(x))
        xs, ys = x[idx], y[idx]
        if not _undefined_reason(xs, ys):
            draws.append(float(_SCIPY[method](xs, ys)[0]))
    if not draws:
        return math.nan, math.nan
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return float(low), float(high)
