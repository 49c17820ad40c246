"""Map scores from the judge's 1-10 scale onto another one (PerSE on Amazon books: 1-5 stars).

The paper says only that PerSE's predictions were "calibrated" to 1-5 and gives no formula, so two
documented maps are offered:

* ``linear`` -- the affine map of the source range onto the target range (1 -> 1, 10 -> 5). It
  needs no data, so it cannot leak test labels, but it keeps the judge's own score distribution.
* ``quantile`` -- histogram matching: a prediction is placed in the empirical distribution of the
  judge's predictions on a calibration set, and mapped to the same quantile of that set's gold
  scores. It corrects a judge that is, say, never below 5, but it is fit on labelled data, which
  must be held out from the examples it is then applied to; hence the fit/apply split.

Both maps are monotone non-decreasing, so they never change Spearman or Kendall except through
ties created by rounding; they matter for Pearson and for any error measured on the target scale.
Missing predictions (``None``) pass through as ``None`` so the correlation can still count them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True)
class Calibration:
    """A fitted map; plain data so that it can be written to the run's metrics JSON (``to_dict``).

    For ``quantile``, ``pred_points`` are the distinct calibration predictions, ``pred_cdf`` their
    mid-rank empirical CDF values and ``gold_sorted`` the sorted calibration gold scores.
    """

    method: Literal["linear", "quantile"]
    source: tuple[float, float]
    target: tuple[float, float]
    round_to_int: bool = False
    pred_points: tuple[float, ...] = ()
    pred_cdf: tuple[float, ...] = ()
    gold_sorted: tuple[float, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)


def _present(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def linear_calibration(
    source: tuple[float, float] = (1.0, 10.0),
    target: tuple[float, float] = (1.0, 5.0),
    *,
    round_to_int: bool = False,
) -> Calibration:
    """The affine map sending ``source`` ends onto ``target`` ends; values outside are clipped."""
    if source[0] >= source[1] or target[0] > target[1]:
        raise ValueError(f"ranges must be increasing: source {source}, target {target}")
    return Calibration("linear", tuple(source), tuple(target), round_to_int)


def fit_quantile_calibration(
    pred: Sequence[float | None], gold: Sequence[float], *, round_to_int: bool = False
) -> Calibration:
    """Fit the quantile map on held-out (prediction, gold) pairs; pairs without a prediction are
    skipped since they say nothing about where a prediction should land.

    Ties are common (a judge scores integers), so a prediction's position is its mid-rank: the
    share of calibration predictions below it plus half the share equal to it. Between distinct
    calibration predictions the position is interpolated linearly; beyond them it is clamped.
    """
    if len(pred) != len(gold):
        raise ValueError(f"pred has {len(pred)} items but gold has {len(gold)}")
    pairs = [(float(p), float(g)) for p, g in zip(pred, gold, strict=True) if _present(p)]
    if not pairs:
        raise ValueError("no parsed predictions to fit a quantile calibration on")
    x = np.array([p for p, _ in pairs])
    y = np.sort([g for _, g in pairs])
    points, counts = np.unique(x, return_counts=True)
    below = np.cumsum(counts) - counts
    cdf = (below + counts / 2) / len(x)
    return Calibration(
        "quantile",
        source=(float(points[0]), float(points[-1])),
        target=(float(y[0]), float(y[-1])),
        round_to_int=round_to_int,
        pred_points=tuple(points.tolist()),
        pred_cdf=tuple(cdf.tolist()),
        gold_sorted=tuple(y.tolist()),
    )


def _map(calibration: Calibration, x: np.ndarray) -> np.ndarray:
    if calibration.method == "linear":
        (s_lo, s_hi), (t_lo, t_hi) = calibration.source, calibration.target
        return t_lo + (np.clip(x, s_lo, s_hi) - s_lo) * (t_hi - t_lo) / (s_hi - s_lo)
    if calibration.method == "quantile":
        u = np.interp(x, calibration.pred_points, calibration.pred_cdf)
        return np.quantile(np.asarray(calibration.gold_sorted), u)
    raise ValueError(f"unknown calibration method {calibration.method!r}")


def apply_calibration(calibration: Calibration, pred: Sequence[float | None]) -> list[float | None]:
    """Map each prediction; ``None`` stays ``None``. With ``round_to_int`` the result is rounded
    half up (not numpy's half-to-even, which would send 2.5 and 3.5 in different directions) and
    kept within the target range."""
    present = [i for i, p in enumerate(pred) if _present(p)]
    mapped = _map(calibration, np.array([pred[i] for i in present], dtype=float))
    if calibration.round_to_int:
        mapped = np.clip(np.floor(mapped + 0.5), *calibration.target)
    out: list[float | None] = [None] * len(pred)
    for i, value in zip(present, mapped.tolist(), strict=True):
        out[i] = value
    return out


def cross_fitted_quantile(
    pred: Sequence[float | None],
    gold: Sequence[float],
    keys: Sequence[str],
    fallback: Calibration | None = None,
    folds: int = 2,
) -> tuple[list[float | None], dict]:
    """The quantile map without leaking labels into their own predictions: k-fold cross-fitting.

    Each item goes to a fold by a hash of its ``key`` (an example id), and is mapped by a quantile
    calibration fit on the other folds only. A fold whose others hold no prediction is mapped by
    ``fallback`` (left as is without one); the record counts such folds.
    """
    if not len(pred) == len(gold) == len(keys):
        raise ValueError(f"pred, gold and keys differ in length: {len(pred)}, {len(gold)}, {len(keys)}")
    mapped: list[float | None] = list(pred)
    fold_of = [int(hashlib.sha256(k.encode()).hexdigest(), 16) % folds for k in keys]
    record = {"method": "quantile", "folds": folds, "fallback_folds": 0}
    for fold in range(folds):
        fit_on = [i for i, f in enumerate(fold_of) if f != fold and _present(pred[i])]
        apply_to = [i for i, f in enumerate(fold_of) if f == fold]
        if not fit_on:
            record["fallback_folds"] += 1
            if fallback is None:
                continue
        fitted = fit_quantile_calibration([pred[i] for i in fit_on], [gold[i] for i in fit_on]) if fit_on else fallback
        for i, value in zip(apply_to, apply_calibration(fitted, [pred[i] for i in apply_to]), strict=True):
            mapped[i] = value
    return mapped, record
