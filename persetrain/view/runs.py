"""A run directory read back for ``persetrain view`` and ``compare``: its examples, records, metrics and plots.

``evaluate`` and ``meta-eval`` write ``examples.jsonl`` beside ``judgments/``, so a run is read without its
dataset. A run written before that (bare judgments, no examples file) is read by loading its examples again
from the dataset its ``config.json`` names, the same seeded sample; when that dataset is gone the error says so
in one line, with the command that writes the run again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ValidationError

from persetrain.io import InputError, iter_jsonl, read_json
from persetrain.records import read_records, system_spec
from persetrain.schema import (
    McqExample,
    PairwiseExample,
    PreferencePairExample,
    ReferenceExample,
    RubricExample,
    ScalarExample,
)

#: Every example type a run's ``examples.jsonl`` may hold, tried in this order when the task kind's own fails.
EXAMPLE_TYPES: tuple[type[BaseModel], ...] = (
    McqExample,
    PairwiseExample,
    PreferencePairExample,
    ScalarExample,
    ReferenceExample,
    RubricExample,
)


@dataclass
class Run:
    """One run directory: examples in the order judged, plain records per system, probe records per probe."""

    path: Path
    name: str
    kind: str
    metrics: dict
    examples: list[BaseModel]
    #: system -> its plain records (a meta-eval's hold their ``probes`` outcomes).
    records: dict[str, list[dict]]
    #: probe -> system -> records.
    probes: dict[str, dict[str, list[dict]]] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    title: str = ""

    @property
    def systems(self) -> list[str]:
        return list(self.records)


def _example(raw: dict, kind: str, path: Path, line: int) -> BaseModel:
    from persetrain.tasks import get_task

    try:
        preferred = get_task(kind).example
    except ValueError:
        preferred = None
    last: ValidationError | None = None
    for model in ([preferred] if preferred else []) + [m for m in EXAMPLE_TYPES if m is not preferred]:
        try:
            return model.model_validate(raw)
        except ValidationError as err:
            last = last or err
    message = str(last).splitlines()[0] if last else "unknown record"
    raise InputError(path, f"not an example of a known task kind ({message})", record=line)


#: Loads the examples a run's ``config.json`` names again (``persetrain.evaluation.examples_of_config``).
ExamplesOf = Callable[[dict], list[BaseModel]]


def _examples_again(path: Path, config: dict, examples_of: ExamplesOf | None) -> list[BaseModel]:
    """The examples of a run written before ``examples.jsonl``: its config's seeded sample, loaded again."""
    rerun = f"persetrain evaluate --data {config.get('data')} --out {path} (or meta-eval) writes it again"
    why = "nothing here loads datasets"
    if examples_of is not None:
        try:
            return examples_of(config)
        except (InputError, ValueError, OSError, TypeError) as err:
            why = str(err)
    message = f"was written by an earlier persetrain (no examples.jsonl) and its dataset cannot be read ({why})"
    raise InputError(path, f"{message}; {rerun}")


def _labels_of(evaluator: str | None) -> str | None:
    from persetrain.evaluators.registry import get_evaluator

    try:
        return get_evaluator(evaluator).option_labels if evaluator else None
    except ValueError:
        return None


def _is_record_file(path: Path) -> bool:
    """Whether a judgments file is in the record layout (its first line says so; an empty file has nothing old)."""
    with path.open(encoding="utf-8") as f:
        first = f.readline()
    try:
        return not first.strip() or "format" in json.loads(first)
    except json.JSONDecodeError:
        return True  # read_records names the line


def _plots(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for pattern in ("*.png", "plots/*.png") for p in path.glob(pattern))


def load_run(path: str | Path, name: str | None = None, examples_of: ExamplesOf | None = None) -> Run:
    """Read a run directory that ``persetrain evaluate`` or ``meta-eval`` wrote (either layout); ``examples_of``
    loads an earlier run's examples from its dataset."""
    path = Path(path)
    if not (path / "judgments").is_dir():
        raise InputError(path, "is not a run directory: it has no judgments/ (persetrain evaluate writes one)")
    metrics = read_json(path / "metrics.json") if (path / "metrics.json").is_file() else {}
    config = read_json(path / "config.json") if (path / "config.json").is_file() else {}
    kind = metrics.get("kind", "")
    examples_file = path / "examples.jsonl"
    if examples_file.is_file():
        examples = [_example(raw, kind, examples_file, line) for line, raw in iter_jsonl(examples_file)]
    else:
        examples = _examples_again(path, config, examples_of)
    by_id = {ex.id: ex for ex in examples}
    files = sorted((path / "judgments").rglob("*.jsonl"))
    specs = {}
    for spec in config.get("systems") or []:
        entry = system_spec(spec)
        specs[entry["name"]] = entry
    if not all(_is_record_file(file) for file in files):  # bare judgments name no labels: their evaluators do
        specs = {name: {**s, "option_labels": _labels_of(s["evaluator"])} for name, s in specs.items()}
    records: dict[str, list[dict]] = {}
    probes: dict[str, dict[str, list[dict]]] = {}
    for file in files:
        sub = file.parent.relative_to(path / "judgments").as_posix()
        probe = None if sub == "." else sub
        for record in read_records(file, by_id, specs, probe):
            target = records if probe is None else probes.setdefault(probe, {})
            target.setdefault(record["system"], []).append(record)
    title = ""
    report = path / "report.md"
    if report.is_file():
        first = report.read_text(encoding="utf-8").splitlines()[:1]
        title = first[0].lstrip("# ").strip() if first else ""
    return Run(path, name or path.name, kind, metrics, examples, records, probes, _plots(path), title)


def run_names(paths: list[Path]) -> list[str]:
    """Short distinct names for several runs: the folder names, with their parents where two coincide."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [json.dumps(str(p))[1:-1] for p in paths]
