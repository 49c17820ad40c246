"""PARL metrics: how well a user's valid rubric set tells their own text from competitors'.

Input per run: for every user, the valid rules' satisfaction (p(yes) > 0.5) on the user's own text
(``gt``) and on each generator's text, as ``{target: [bool per rule]}``; a user whose rubric set came
out empty has ``{}`` (no valid rules). Definitions (docs/methods.md, PARL):

* user-level accuracy of a target: the share of users whose every valid rule the target satisfies
  (all-or-nothing), over the users with a non-empty valid set (an empty set judges nothing);
* rubric-level accuracy: the share of all valid rules (pooled over users) the target satisfies;
* user coverage: the share of users with a non-empty valid set;
* Max-Diff: user-level accuracy of ``gt`` minus that of the best other target;
* average rules per user: valid rules per user, over all users;
* paired t-test (scipy, one-sided "greater"): per-user all-or-nothing scores of ``gt`` vs each target;
  and of one generator against another over runs paired by seed (``paired_runs_t_test``, e.g. Max-Diff).

Several runs (different seeds) give mean and standard deviation (ddof=1) of every number.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from scipy import stats

GT = "gt"

Run = Sequence[Mapping[str, Sequence[bool]]]  # users -> target -> satisfaction of each valid rule


def _covered(run: Run) -> list[Mapping[str, Sequence[bool]]]:
    return [user for user in run if user and any(len(v) for v in user.values())]


def targets(run: Run) -> list[str]:
    names = {t for user in run for t in user}
    return ([GT] if GT in names else []) + sorted(names - {GT})


def user_level_accuracy(run: Run, target: str) -> float | None:
    scored = [all(user[target]) for user in _covered(run) if target in user]
    return sum(scored) / len(scored) if scored else None


def rubric_level_accuracy(run: Run, target: str) -> float | None:
    pooled = [s for user in _covered(run) if target in user for s in user[target]]
    return sum(pooled) / len(pooled) if pooled else None


def user_coverage(run: Run) -> float | None:
    return len(_covered(run)) / len(run) if run else None


def average_rules(run: Run) -> float | None:
    if not run:
        return None
    return sum(len(next(iter(user.values()), [])) for user in run) / len(run)


def max_diff(run: Run) -> float | None:
    gt = user_level_accuracy(run, GT)
    others = [a for t in targets(run) if t != GT if (a := user_level_accuracy(run, t)) is not None]
    return gt - max(others) if gt is not None and others else None


def paired_t_test(run: Run, target: str) -> dict[str, float | None]:
    """t and one-sided p of "``gt`` is satisfied all-or-nothing more often than ``target``", paired by user."""
    pairs = [
        (float(all(user[GT])), float(all(user[target]))) for user in _covered(run) if GT in user and target in user
    ]
    if len(pairs) < 2 or len({a - b for a, b in pairs}) == 1:  # no variance of the differences: no t
        return {"t": None, "p": None, "n": len(pairs)}
    result = stats.ttest_rel([a for a, _ in pairs], [b for _, b in pairs], alternative="greater")
    t, p = float(result.statistic), float(result.pvalue)
    return {"t": t if math.isfinite(t) else None, "p": p if math.isfinite(p) else None, "n": len(pairs)}


def paired_runs_t_test(trained: Sequence[float | None], untrained: Sequence[float | None]) -> dict[str, float | None]:
    """t and one-sided p of "``trained`` > ``untrained``" over runs paired by seed (e.g. each run's Max-Diff).

    Runs are the unit because a seed of rubric induction is what a second evaluation would redraw; a run
    where either number is undefined (no covered user) drops out of the pairs.
    """
    pairs = [(a, b) for a, b in zip(trained, untrained, strict=True) if a is not None and b is not None]
    if len(pairs) < 2 or len({a - b for a, b in pairs}) == 1:  # no variance of the differences: no t
        return {"t": None, "p": None, "n": len(pairs)}
    result = stats.ttest_rel([a for a, _ in pairs], [b for _, b in pairs], alternative="greater")
    t, p = float(result.statistic), float(result.pvalue)
    return {"t": t if math.isfinite(t) else None, "p": p if math.isfinite(p) else None, "n": len(pairs)}


def run_metrics(run: Run) -> dict:
    """Every number of one run (flat keys, so runs can be averaged key by key)."""
    out: dict[str, float | None] = {
        "user_coverage": user_coverage(run),
        "avg_rules_per_user": average_rules(run),
        "max_diff": max_diff(run),
        "users": float(len(run)),
    }
    for t in targets(run):
        out[f"user_acc/{t}"] = user_level_accuracy(run, t)
        out[f"rubric_acc/{t}"] = rubric_level_accuracy(run, t)
        if t != GT:
            test = paired_t_test(run, t)
            out[f"ttest_t/{t}"], out[f"ttest_p/{t}"] = test["t"], test["p"]
    return out


def first_last_fifth(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Means of the first and the last fifth of a training curve (at least one value each): did it rise?"""
    if not values:
        return None, None
    k = max(1, len(values) // 5)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def mean_std(values: Sequence[float | None]) -> dict[str, float | None]:
    """Mean and sample standard deviation of the defined values (std None for fewer than two)."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"mean": None, "std": None, "n": 0}
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return {"mean": mean, "std": std, "n": len(xs)}


def parl_metrics(runs: Sequence[Run]) -> dict:
    """``{metric: value}`` for one run; ``{metric: value (mean), metric_std: std, runs: n}`` for several."""
    per_run = [run_metrics(run) for run in runs]
    keys = sorted({k for m in per_run for k in m})
    out: dict[str, float | int | None] = {"runs": len(runs)}
    for k in keys:
        summary = mean_std([m.get(k) for m in per_run])
        out[k] = summary["mean"]
        if len(runs) > 1:
            out[f"{k}_std"] = summary["std"]
    return out


def runs_from_checks(
    example_ids: Sequence[str], checks: Sequence[tuple[str, str, int, Sequence[bool] | None]]
) -> list[list[dict]]:
    """Runs in the ``Run`` layout from ``(example id, target, run, satisfaction per valid rule)``.

    ``None`` satisfaction (an unparsable rubric set) and an empty one both make the user uncovered.
    """
    n_runs = max((run for _, _, run, _ in checks), default=-1) + 1
    index = {id: i for i, id in enumerate(example_ids)}
    runs: list[list[dict]] = [[{} for _ in example_ids] for _ in range(n_runs)]
    for id, target, run, satisfied in checks:
        if satisfied:
            runs[run][index[id]][target] = list(satisfied)
    return runs
