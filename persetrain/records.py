"""Judgment records: what a run's ``judgments/*.jsonl`` hold, written for error analysis.

A :class:`~persetrain.schema.Judgment` is what an evaluator returns; a record is that judgment placed in
its run, so that a reader needs nothing but the file to see where a judge went wrong:

* ``system`` (the name the run gave it) and ``evaluator`` (the registered method) are two fields, and
  ``spec`` keeps the whole system spec (evaluator, model, options): the file's name is only a slug of
  the system's name (``embedded-smollm2-135m-instruct.jsonl``), safe on any filesystem;
* ``gold`` and ``correct`` wherever the task has a gold (multiple choice, pairwise; a scalar task has a
  gold score but no right or wrong), ``correct`` decided as the task's accuracy decides it, so the mean of
  ``correct`` is the run's accuracy;
* one option numbering for every evaluator: ``choice`` and ``gold`` are 0-based indices into the
  example's candidates, ``choice_label`` and ``gold_label`` the candidates' names as the judge was shown
  them ("C" for a letter judge, "3" for PREF's numbered list, none for a judge that saw each alone);
* ``probe`` names the probe a record belongs to (``flip``, ``blind``, ...; None for the plain run) and a
  plain record of a meta-eval holds ``probes``: its verdict under each probe, in the original order of the
  candidates, and whether it changed.

Runs written before records existed hold bare judgments (``evaluator`` was the system's name, ``choice``
a string); :func:`read_records` reads those too, given the run's examples.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from persetrain.io import InputError, finite, iter_jsonl
from persetrain.metrics.mcq import is_correct
from persetrain.schema import Judgment

#: The layout version a record carries; records without one are the bare judgments of earlier runs.
RECORD_FORMAT = 2
#: How an evaluator shows candidates by name (``Evaluator.option_labels``).
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def slug(name: str) -> str:
    """A system's name as a file name any filesystem and shell take: runs of other characters become '-'."""
    return re.sub(r"[^A-Za-z0-9._]+", "-", name).strip("-.") or "system"


def file_names(systems: Iterable[str]) -> dict[str, str]:
    """Each system's file name (``<slug>.jsonl``); two systems whose slugs collide are numbered apart."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for system in systems:
        base = slug(system)
        stem, n = base, 2
        while stem.lower() in taken:  # case-insensitive filesystems would merge "A" and "a"
            stem, n = f"{base}-{n}", n + 1
        taken.add(stem.lower())
        names[system] = f"{stem}.jsonl"
    return names


# ----------------------------------------------------------------------------- candidates and gold
def candidate_keys(example: BaseModel) -> list[str] | None:
    """How judgments of this example name its candidates (``Judgment.choice``); None when it has none to pick.

    Multiple choice names an option by its index ("0", "1", ...), a pair by its side ("A", "B").
    """
    options = getattr(example, "options", None)
    if isinstance(options, list):
        return [str(k) for k in range(len(options))]
    if getattr(example, "preferred", None) in ("A", "B"):  # Per-DOC's plots, preference rows' responses
        return ["A", "B"]
    return None


def candidate_label(example: BaseModel, index: int, labels: str | None) -> str | None:
    """The name the judge saw a candidate under: the data's own (a pair's "A"/"B") or the evaluator's scheme."""
    keys = candidate_keys(example)
    if keys is not None and keys[0] == "A":
        return keys[index]
    if labels == "letters":
        return LETTERS[index] if index < len(LETTERS) else str(index + 1)
    if labels == "numbers":
        return str(index + 1)
    return None


def chosen(record: Mapping) -> str:
    """What a record's judge chose, as a reader is told it: the candidate's label, else its index (a judge that saw
    each candidate alone, ``verifier`` or ``rm``, was shown no labels), else "no choice (a tie)", or "unreadable"."""
    if not record.get("parsed", True):
        return "unreadable"
    choice = record.get("choice_label") if record.get("choice_label") is not None else record.get("choice")
    return "no choice (a tie)" if choice is None else str(choice)


def gold_of(example: BaseModel) -> int | float | None:
    """The example's gold: the index of the right candidate, a scalar task's true score, or None."""
    if isinstance(getattr(example, "gold", None), int) and not isinstance(example.gold, bool):
        return example.gold
    preferred = getattr(example, "preferred", None)
    keys = candidate_keys(example)
    if isinstance(preferred, str) and keys is not None and preferred in keys:
        return keys.index(preferred)
    score = getattr(example, "score", None)
    if isinstance(score, int | float) and not isinstance(score, bool) and hasattr(example, "query_plot"):
        return score
    return None


def is_right(example: BaseModel, judgment: Judgment, choice: int | None) -> bool | None:
    """Right or wrong as the task's accuracy counts it (unreadable or tied: wrong); None without a gold choice."""
    gold = gold_of(example)
    if candidate_keys(example) is None or not isinstance(gold, int):
        return None
    scores = (judgment.details or {}).get("scores")
    if judgment.parsed and isinstance(scores, list) and hasattr(example, "options"):
        return is_correct(scores, gold) if None not in scores else False
    return judgment.parsed and choice == gold


# ----------------------------------------------------------------------------------- the record
def record_of(
    judgment: Judgment,
    example: BaseModel,
    spec: Mapping[str, Any],
    labels: str | None = None,
    probe: str | None = None,
) -> dict:
    """One judgment as its run writes it (module docstring); ``labels`` is the evaluator's ``option_labels``."""
    keys = candidate_keys(example)
    data = finite(judgment.model_dump(mode="json"))
    system = data.pop("evaluator")
    choice = keys.index(judgment.choice) if keys and judgment.choice in keys else None
    gold = gold_of(example)
    has_candidates = keys is not None
    return {
        "format": RECORD_FORMAT,
        "example_id": judgment.example_id,
        "system": system,
        "evaluator": spec.get("evaluator"),
        "spec": dict(spec),
        "probe": probe,
        "target": judgment.target,
        "choice": choice,
        # A choice that names no candidate (AuPEL's "win" / "tie") is kept as the judge said it.
        "choice_label": candidate_label(example, choice, labels) if choice is not None else judgment.choice,
        "gold": gold,
        "gold_label": candidate_label(example, gold, labels) if has_candidates and isinstance(gold, int) else None,
        "correct": is_right(example, judgment, choice),
        **{k: data[k] for k in ("score", "probs", "explanation", "raw", "parsed", "details", "cost")},
    }


def judgment_of(record: Mapping[str, Any], example: BaseModel | None) -> Judgment:
    """The judgment a record was written from (the inverse of :func:`record_of`), for recomputing metrics."""
    keys = candidate_keys(example) if example is not None else None
    choice = record.get("choice")
    return Judgment(
        example_id=record["example_id"],
        evaluator=record["system"],
        target=record.get("target"),
        score=record.get("score"),
        choice=keys[choice] if keys is not None and choice is not None else record.get("choice_label"),
        probs=record.get("probs"),
        explanation=record.get("explanation") or "",
        raw=record.get("raw") or "",
        parsed=record.get("parsed", True),
        details=record.get("details"),
        cost=record.get("cost") or {},
    )


def record_key(record: Mapping[str, Any], seen: dict) -> tuple:
    """(example, target, n-th such record): the same judged item in a run and in each of its probes."""
    base = (record["example_id"], record.get("target"))
    seen[base] = seen.get(base, -1) + 1
    return (*base, seen[base])


def outcome(
    plain: Mapping[str, Any], probed: Mapping[str, Any], flipped: bool, example: BaseModel | None, labels: str | None
) -> dict:
    """A plain record's verdict under one probe: the choice in the original candidate order, and what changed."""
    keys = candidate_keys(example) if example is not None else None
    choice = probed.get("choice")
    if flipped and choice is not None and keys:
        choice = len(keys) - 1 - choice
    if plain.get("choice") is not None or choice is not None:
        changed = choice != plain.get("choice") or probed.get("parsed") != plain.get("parsed")
    elif plain.get("score") is not None or probed.get("score") is not None:
        changed = probed.get("score") != plain.get("score")
    else:
        changed = probed.get("choice_label") != plain.get("choice_label")
    return {
        "choice": choice,
        "choice_label": candidate_label(example, choice, labels) if keys and choice is not None else None,
        "correct": probed.get("correct"),
        "score": probed.get("score"),
        "parsed": probed.get("parsed"),
        "changed": bool(changed),
    }


def attach_probes(
    plain: list[dict],
    probes: Mapping[str, Sequence[dict]],
    examples: Mapping[str, BaseModel],
    labels: str | None = None,
) -> list[dict]:
    """Each plain record with ``probes``: its verdict when blind, swapped, flipped, manipulated (meta-eval), the
    choice named in the original order of the candidates (``labels``: the evaluator's ``option_labels``)."""
    index: dict[str, dict[tuple, dict]] = {}
    for probe, records in probes.items():
        seen: dict = {}
        index[probe] = {record_key(r, seen): r for r in records}
    seen = {}
    for record in plain:
        key = record_key(record, seen)
        example = examples.get(record["example_id"])
        found = {}
        for probe, by_key in index.items():
            if key in by_key:
                found[probe] = outcome(record, by_key[key], probe == "flip", example, labels)
        record["probes"] = found
    return plain


# ---------------------------------------------------------------------------------- reading runs
def legacy_record(raw: dict, example: BaseModel | None, spec: Mapping[str, Any], probe: str | None) -> dict:
    """A bare judgment of an earlier run (``evaluator`` held the system's name) as a record."""
    try:
        judgment = Judgment.model_validate(raw)
    except ValueError as err:
        raise ValueError(f"not a judgment ({str(err).splitlines()[0]})") from None
    if example is None:
        record = record_of(judgment, _NoExample(), spec, probe=probe)
        record["choice_label"] = judgment.choice
        return record
    return record_of(judgment, example, spec, labels=spec.get("option_labels"), probe=probe)


class _NoExample(BaseModel):
    """Stands in for an example an old run no longer has: no candidates, no gold."""


def read_records(
    path: Path, examples: Mapping[str, BaseModel], specs: Mapping[str, Mapping[str, Any]], probe: str | None = None
) -> list[dict]:
    """A judgments file of any layout as records; ``specs`` (system -> spec) names an old file's evaluators."""
    records = []
    for line, raw in iter_jsonl(path):
        if "format" in raw and "system" in raw:
            records.append(raw)
            continue
        system = raw.get("evaluator")
        if not isinstance(system, str) or "example_id" not in raw:
            raise InputError(path, "neither a judgment record nor a judgment", record=line, field="example_id")
        # A second output of a system (PerSE's ``NAME-expected``) was built from its parent system's spec.
        parent = next((name for name in sorted(specs, key=len, reverse=True) if system.startswith(f"{name}-")), None)
        spec = specs.get(system) or (specs[parent] if parent else {})
        try:
            records.append(legacy_record(raw, examples.get(raw["example_id"]), spec, probe))
        except ValueError as err:
            raise InputError(path, str(err), record=line) from None
    return records


def system_spec(spec: Any) -> dict:
    """A ``SystemSpec`` (or its dict in config.json) as the plain dict a record keeps; {} when there is none."""
    if spec is None:
        return {}
    data = spec if isinstance(spec, Mapping) else {k: getattr(spec, k) for k in ("name", "evaluator", "model")}
    options = data.get("options") if isinstance(spec, Mapping) else getattr(spec, "options", {})
    return {
        "name": data.get("name"),
        "evaluator": data.get("evaluator"),
        "model": data.get("model"),
        "options": json.loads(json.dumps(options or {}, default=str)),
    }
