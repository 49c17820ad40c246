"""``persetrain compare RUN_A RUN_B``: how two runs differ, per metric and per system, on the examples both judged.

The metrics are the task's own (``TaskKind.metrics``), recomputed from the records of the examples both runs
judged, so on two runs of the same examples the difference is exactly the one their ``metrics.json`` files give
(``reported_diff`` sits beside it to show so). The interval is a paired bootstrap: each resample draws examples
with replacement and scores both runs on the same draw, so what the two runs share (which examples are hard)
cancels out. The test is McNemar's exact test (a two-sided sign test on the examples exactly one run got right)
for a metric that is the share of examples judged right, and the paired bootstrap's own two-sided p-value for the
others. Both are seeded. Where the examples have a topic (PrefEval's topic, Per-DOC's aspect) or a person, the
same is given per group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import binomtest

from persetrain.records import chosen, judgment_of
from persetrain.view.rows import topic_of, whose
from persetrain.view.runs import Run
from persetrain.view.summary import flat_numbers

#: Groups a comparison is broken down by at most: more (a person per example) would be noise, not a table.
MAX_GROUPS = 30


def _paired_systems(a: Run, b: Run) -> list[tuple[str, str]]:
    common = [s for s in a.systems if s in b.records]
    if common:
        return [(s, s) for s in common]
    if len(a.systems) == 1 and len(b.systems) == 1:  # one system each under different names: two models
        return [(a.systems[0], b.systems[0])]
    raise ValueError(
        f"{a.path} and {b.path} share no system (A: {', '.join(a.systems)}; B: {', '.join(b.systems)}); "
        "compare runs of the same systems, or of one system each"
    )


def _count(key: str) -> bool:
    last = key.rsplit(".", 1)[-1]
    return last == "n" or last.startswith("n_")


def _numbers(metrics: Mapping) -> dict[str, float]:
    """A system's metrics as numbers by dotted key, counts (``n``, ``n_unparsed``) left out."""
    return {k: v for k, v in flat_numbers(metrics).items() if not _count(k)}


def _scores(task, examples: Sequence, judged: Sequence[list], idx: Sequence[int]) -> dict[str, float]:
    """The task's metrics on the examples at ``idx`` (repeats allowed), with their judgments."""
    chosen = [examples[i] for i in idx]
    judgments = [j for i in idx for j in judged[i]]
    return _numbers(task.metrics(chosen, judgments))


def _mcnemar(right_a: Sequence[bool], right_b: Sequence[bool]) -> float:
    only_a = sum(x and not y for x, y in zip(right_a, right_b, strict=True))
    only_b = sum(y and not x for x, y in zip(right_a, right_b, strict=True))
    return 1.0 if only_a + only_b == 0 else float(binomtest(only_a, only_a + only_b, 0.5).pvalue)


def paired_metrics(
    task,
    examples: Sequence,
    judged_a: Sequence[list],
    judged_b: Sequence[list],
    correct: tuple[list[bool], list[bool]] | None,
    resamples: int,
    seed: int,
    confidence: float,
) -> dict[str, dict]:
    """Every metric of both runs on ``examples``, B - A, its paired bootstrap interval and a paired test."""
    everything = range(len(examples))
    full_a, full_b = _scores(task, examples, judged_a, everything), _scores(task, examples, judged_b, everything)
    keys = [k for k in full_a if k in full_b and math.isfinite(full_a[k]) and math.isfinite(full_b[k])]
    rng = np.random.default_rng(seed)
    draws = {k: [] for k in keys}
    for _ in range(resamples):
        idx = rng.integers(0, len(examples), len(examples))
        a, b = _scores(task, examples, judged_a, idx), _scores(task, examples, judged_b, idx)
        for k in keys:
            if math.isfinite(a.get(k, math.nan)) and math.isfinite(b.get(k, math.nan)):
                draws[k].append(b[k] - a[k])
    tail = (1 - confidence) / 2
    found = {}
    for k in keys:
        diffs = np.array(draws[k])
        share = None
        if correct is not None:  # the metric is the share judged right: McNemar on the same examples
            share = all(
                math.isclose(full, sum(c) / len(c)) for full, c in ((full_a[k], correct[0]), (full_b[k], correct[1]))
            )
        if share:
            test, p = "mcnemar-exact", _mcnemar(*correct)
        else:
            test = "paired-bootstrap"
            p = float(min(1.0, 2 * min((diffs <= 0).mean(), (diffs >= 0).mean()))) if len(diffs) else math.nan
        found[k] = {
            "a": full_a[k],
            "b": full_b[k],
            "diff": full_b[k] - full_a[k],
            "low": float(np.quantile(diffs, tail)) if len(diffs) else None,
            "high": float(np.quantile(diffs, 1 - tail)) if len(diffs) else None,
            "test": test,
            "p": p,
        }
    return found


def _by_example(run: Run, system: str) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for record in run.records.get(system, []):
        found.setdefault(record["example_id"], []).append(record)
    return found


def _verdict(records: Sequence[dict]) -> list:
    return [(r.get("target"), r.get("choice"), r.get("choice_label"), r.get("correct")) for r in records]


def _grouping(views: Sequence[dict]) -> tuple[str, list[str]] | None:
    for field, by in (("topic", "topic"), ("whose", "person")):
        values = [v[field] for v in views]
        if all(values) and 1 < len(set(values)) <= MAX_GROUPS:
            return by, values
    return None


def compare_system(a: Run, b: Run, sa: str, sb: str, task, resamples: int, seed: int, confidence: float) -> dict:
    """One system of both runs: its metrics' differences, overall and per group, and the verdicts that changed."""
    rec_a, rec_b = _by_example(a, sa), _by_example(b, sb)
    examples = [ex for ex in a.examples if ex.id in rec_a and ex.id in rec_b]
    judged_a = [[judgment_of(r, ex) for r in rec_a[ex.id]] for ex in examples]
    judged_b = [[judgment_of(r, ex) for r in rec_b[ex.id]] for ex in examples]
    correct = None
    if all(len(rec_a[ex.id]) == 1 and rec_a[ex.id][0].get("correct") is not None for ex in examples) and all(
        len(rec_b[ex.id]) == 1 and rec_b[ex.id][0].get("correct") is not None for ex in examples
    ):
        correct = ([rec_a[ex.id][0]["correct"] for ex in examples], [rec_b[ex.id][0]["correct"] for ex in examples])
    if not examples:
        raise ValueError(f"system {sa!r} of {a.path} and {sb!r} of {b.path} judged no example in common")
    metrics = paired_metrics(task, examples, judged_a, judged_b, correct, resamples, seed, confidence)
    reported_a = _numbers((a.metrics.get("systems") or {}).get(sa) or {})
    reported_b = _numbers((b.metrics.get("systems") or {}).get(sb) or {})
    for key, m in metrics.items():
        m["reported_diff"] = reported_b[key] - reported_a[key] if key in reported_a and key in reported_b else None
    groups = {}
    grouping = _grouping([{"topic": topic_of(ex), "whose": whose(ex)} for ex in examples])
    if grouping is not None:
        by, values = grouping
        for value in dict.fromkeys(values):
            idx = [i for i, v in enumerate(values) if v == value]
            sub = (
                None if correct is None else ([correct[0][i] for i in idx], [correct[1][i] for i in idx]),
                [examples[i] for i in idx],
            )
            groups[value] = {
                "n": len(idx),
                "metrics": paired_metrics(
                    task,
                    sub[1],
                    [judged_a[i] for i in idx],
                    [judged_b[i] for i in idx],
                    sub[0],
                    resamples,
                    seed,
                    confidence,
                ),
            }
        groups = {"by": by, "values": groups}
    changed = [
        {
            "example_id": ex.id,
            "a": [_brief(r) for r in rec_a[ex.id]],
            "b": [_brief(r) for r in rec_b[ex.id]],
        }
        for ex in examples
        if _verdict(rec_a[ex.id]) != _verdict(rec_b[ex.id])
    ]
    return {"a": sa, "b": sb, "n": len(examples), "metrics": metrics, "groups": groups, "changed": changed}


def _brief(record: Mapping) -> dict:
    return {k: record.get(k) for k in ("target", "choice", "choice_label", "correct", "score", "parsed")}


def compare_runs(a: Run, b: Run, resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict:
    """Every system both runs hold, compared on the examples both judged (module docstring)."""
    from persetrain.tasks import get_task

    if a.kind != b.kind:
        raise ValueError(f"{a.path} judged {a.kind or 'an unknown kind'} and {b.path} {b.kind or 'an unknown kind'}")
    task = get_task(a.kind)
    ids_a, ids_b = {ex.id for ex in a.examples}, {ex.id for ex in b.examples}
    return {
        "a": str(a.path),
        "b": str(b.path),
        "kind": a.kind,
        "n_common": len(ids_a & ids_b),
        "only_a": len(ids_a - ids_b),
        "only_b": len(ids_b - ids_a),
        "resamples": resamples,
        "seed": seed,
        "confidence": confidence,
        "systems": [
            compare_system(a, b, sa, sb, task, resamples, seed, confidence) for sa, sb in _paired_systems(a, b)
        ],
    }


def _fmt(value: float | None) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.4g}"


def _table(metrics: Mapping[str, dict], confidence: float) -> list[str]:
    level = f"{round(confidence * 100)}%"
    lines = [f"| metric | A | B | B - A | {level} interval | test | p |", "|---|---|---|---|---|---|---|"]
    for key, m in metrics.items():
        lines.append(
            f"| {key} | {_fmt(m['a'])} | {_fmt(m['b'])} | {_fmt(m['diff'])} | [{_fmt(m['low'])}, {_fmt(m['high'])}] "
            f"| {m['test']} | {_fmt(m['p'])} |"
        )
    return lines


def render_comparison(result: Mapping) -> str:
    """The comparison as Markdown: one table per system (and per group), then the changed verdicts."""
    lines = [
        f"# {result['b']} - {result['a']} ({result['kind']})",
        "",
        f"{result['n_common']} examples in both runs (only in A: {result['only_a']}, only in B: {result['only_b']}); "
        f"paired bootstrap of {result['resamples']} resamples, seed {result['seed']}.",
    ]
    for s in result["systems"]:
        name = s["a"] if s["a"] == s["b"] else f"{s['a']} (A) vs {s['b']} (B)"
        lines += ["", f"## {name}: {s['n']} examples", "", *_table(s["metrics"], result["confidence"])]
        for value, group in (s["groups"].get("values") or {}).items() if s["groups"] else ():
            lines += ["", f"### {s['groups']['by']} {value}: {group['n']} examples", ""]
            lines += _table(group["metrics"], result["confidence"])
        lines += ["", f"Verdicts that changed: {len(s['changed'])}"]
        for c in s["changed"][:20]:
            a = ", ".join(f"{chosen(r)} ({_right(r['correct'])})" for r in c["a"])
            b = ", ".join(f"{chosen(r)} ({_right(r['correct'])})" for r in c["b"])
            lines.append(f"- {c['example_id']}: {a} -> {b}")
        if len(s["changed"]) > 20:
            lines.append(f"- ... and {len(s['changed']) - 20} more (--json lists them all)")
    return "\n".join(lines)


def _right(correct: bool | None) -> str:
    return "right" if correct else "wrong" if correct is False else "no gold"
