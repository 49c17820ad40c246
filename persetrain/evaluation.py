"""``persetrain evaluate``: run registered evaluators on a dataset and write a self-describing run directory.

The runner knows no method by name. It loads the dataset as examples of the task kind the dataset
declares (``persetrain.data``), builds every system's evaluator from the registry
(``persetrain.evaluators.registry``), gives it an engine when it needs a model, groups the judgments it
returns into systems, and hands each system to its evaluator's metrics (the task's metric functions
plus anything the method adds). A run directory holds ``config.json`` (what was asked),
``environment.json`` (versions, device, git commit), ``judgments/<system>.jsonl`` (every judgment
with its rationale and cost), ``metrics.json`` and ``report.md`` (+ the task's and methods' plots).
Nothing of a run is written until every system has judged, so a run that fails on its data or its
evaluators leaves the folder as the previous run left it, never one run's config beside another's
results; the engine cache (``engine-cache.sqlite``) holds every finished call, so a re-run after a
crash or a failure only computes what is missing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from persetrain.config_files import read_yaml_mapping
from persetrain.console import console
from persetrain.data import read_split
from persetrain.environment import environment
from persetrain.evaluators.base import Evaluator, JudgeContext, check_fields, config_fields
from persetrain.evaluators.registry import SystemSpec, evaluators_for
from persetrain.io import InputError, atomic_dir, first_error, write_json, write_jsonl
from persetrain.models import check_causal_lm
from persetrain.records import attach_probes, file_names, record_of, system_spec
from persetrain.report import BROWSE, metrics_table, write_markdown, wrong_examples
from persetrain.schema import Judgment, reviewer_of
from persetrain.tasks import TaskKind


@dataclass
class EvaluationConfig:
    """One evaluation: a dataset, a run directory and the systems to judge it with."""

    data: str
    out: str
    systems: list[SystemSpec]
    split: str = "test"
    #: At most this many examples per reviewer (chosen by a hash of the example id). A pooled
    #: correlation over few reviewers mostly measures who is harsh; for a fixed judging budget, more
    #: reviewers with fewer examples each is the better sample.
    max_per_reviewer: Annotated[int, Field(ge=1)] | None = None
    #: A random sample of this many examples (seeded by ``seed``), kept in the dataset's order.
    max_examples: Annotated[int, Field(ge=1)] | None = None
    seed: int = 0
    backend: str = "hf"
    base_url: str | None = None
    #: The task kind of rows without a card (a JSON-lines, CSV or Parquet file, a saved ``datasets`` folder, a Hub
    #: id): ``pairwise`` for preference rows. A dataset with a card or ``build_info.json`` declares its own.
    task: str | None = None
    #: The column of a preference row that holds the person (default: ``person`` when there is one).
    person_column: str | None = None

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> EvaluationConfig:
        """An evaluation config file: the fields above plus a ``systems:`` list of
        ``{name, evaluator, model, <option>: <value>, ...}``; ``overrides`` (the command line) win."""
        path = Path(path)
        raw = read_yaml_mapping(path, "evaluation config")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InputError(path, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        entries = raw.pop("systems", None) or []
        if not isinstance(entries, list):
            raise InputError(path, "must be a list of {name, evaluator, model, <option>: <value>}", field="systems")
        systems = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or "evaluator" not in entry:
                raise InputError(
                    path, "each system needs at least an evaluator", record=f"systems[{i}]", field="evaluator"
                )
            entry = dict(entry)
            name, evaluator, model = entry.pop("name", None) or "", entry.pop("evaluator"), entry.pop("model", None)
            systems.append({"name": name, "evaluator": evaluator, "model": model, "options": entry})
        values = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
        values["systems"] = systems + list(overrides.get("systems") or [])
        for key in ("data", "out"):
            if not values.get(key):
                raise InputError(path, f"no {key}: give it in the file or with --{key}", field=key)
        try:  # the fields' types, checked here once: a wrong one would otherwise fail deep in the run
            config = TypeAdapter(cls).validate_python(values)
        except ValidationError as err:
            field, message = first_error(err)
            raise InputError(path, message, field=field) from None
        for spec in config.systems:  # named after the check, so a wrong evaluator or model is reported as itself
            spec.name = spec.name or spec.model or spec.evaluator
        return config


def apply_options(systems: Sequence[SystemSpec], options: Mapping[str, Any]) -> None:
    """Give each ``--set FIELD=VALUE`` to every system whose evaluator's config has that field."""
    for key, value in options.items():
        takers = [s for s in systems if key in config_fields(s.build().Config)]
        if not takers:
            raise ValueError(
                f"--set {key}: no system's evaluator has an option {key!r} "
                f"(systems: {', '.join(f'{s.name} ({s.evaluator})' for s in systems)})"
            )
        for system in takers:
            system.options.setdefault(key, value)


def per_reviewer_sample(examples: Sequence, limit: int) -> list:
    """The first ``limit`` examples of each reviewer by a hash of their ids, in the original order."""
    ranked: dict[str, list] = {}
    for ex in sorted(examples, key=lambda e: hashlib.sha256(e.id.encode()).hexdigest()):
        ranked.setdefault(reviewer_of(ex), []).append(ex.id)
    keep = {i for ids in ranked.values() for i in ids[:limit]}
    return [ex for ex in examples if ex.id in keep]


def random_sample(examples: Sequence, n: int, seed: int) -> list:
    """``n`` examples drawn uniformly with ``seed`` from the whole dataset, kept in the dataset's order."""
    if n >= len(examples):
        return list(examples)
    keep = set(random.Random(seed).sample(range(len(examples)), n))
    return [ex for i, ex in enumerate(examples) if i in keep]


def load_examples(config: EvaluationConfig) -> tuple[TaskKind, list]:
    """The dataset's task kind and the examples this evaluation judges."""
    task, examples = read_split(
        config.data, config.split, seed=config.seed, task=config.task, person_column=config.person_column
    )
    if config.max_per_reviewer:
        try:
            examples = per_reviewer_sample(examples, config.max_per_reviewer)
        except ValueError as err:  # reviewer_of: these examples belong to no one
            raise ValueError(
                f"max_per_reviewer (--max-per-reviewer): {err}, so {config.data} cannot be sampled per reviewer; "
                "use max_examples (--max-examples)"
            ) from None
    if config.max_examples:
        examples = random_sample(examples, config.max_examples, config.seed)
    return task, examples


def examples_of_config(recorded: Mapping[str, Any]) -> list:
    """The examples a run's ``config.json`` judged, loaded again from its dataset (the same seeded sample): how a
    run written before runs kept their ``examples.jsonl`` is read."""
    known = {k: v for k, v in recorded.items() if k in {f.name for f in dataclasses.fields(EvaluationConfig)}}
    return load_examples(EvaluationConfig(**{**known, "systems": []}))[1]


@dataclass
class SystemRun:
    """What one system produced: its judgments, the evaluator that made them, the seconds it took and the spec it
    was built from (kept in its judgment records)."""

    judgments: list[Judgment]
    evaluator: Evaluator
    seconds: float
    spec: SystemSpec | None = None


def build_evaluators(
    systems: Sequence[SystemSpec], task: TaskKind, backend: str = "hf"
) -> list[tuple[SystemSpec, Evaluator]]:
    """Every system's evaluator, checked before any model is loaded: names unique, task supported, model of
    a kind the evaluator reads (a local engine reads a causal LM; a server's model is the server's to check)."""
    names = [s.name for s in systems]
    if not systems:
        raise ValueError(
            "nothing to evaluate: give --evaluator E --model M, --system NAME=EVALUATOR:MODEL or --baseline NAME"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"system names must be unique, got {names}; name them with NAME=EVALUATOR:MODEL")
    built = []
    for spec in systems:
        evaluator = spec.build()
        if task.name not in evaluator.tasks:
            raise ValueError(
                f"evaluator {spec.evaluator!r} cannot judge {task.name} tasks; evaluators that can: "
                f"{', '.join(evaluators_for(task.name))}"
            )
        if spec.model:
            if evaluator.uses_engine and backend == "hf":  # several models joined by commas judge as one ensemble
                for model in spec.model.split(","):
                    check_causal_lm(model.strip(), f"system {spec.name!r} ({spec.evaluator})")
            evaluator.check_model(spec.model)
        built.append((spec, evaluator))
    return built


#: What a run writes into its directory besides the engine cache; ``--overwrite`` removes these of another run.
RUN_FILES = (
    "config.json",
    "environment.json",
    "examples.jsonl",
    "metrics.json",
    "report.md",
    "view.html",
    "judgments",
    "plots",
    "*.png",
)


def run_record(config: EvaluationConfig) -> dict:
    """The run's ``config.json`` as it reads back: what says whether a run directory holds this run or another."""
    return json.loads(json.dumps(asdict(config), default=str))


def check_run_dir(out: Path, config: EvaluationConfig, overwrite: bool = False) -> bool:
    """Refuse a run directory that cannot be this run's before any data loads or any model judges; True when it
    holds another run that ``overwrite`` replaces.

    The folder is written only at the end of a run, which should not end in a file that stands in the way, nor
    silently replace another run's results: the same config resumes (the engine cache keeps its finished calls), a
    different one needs ``overwrite``."""
    blocker = next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None)
    if blocker == out:
        raise InputError(out, "is a file, not a run directory")
    if blocker is not None:
        raise InputError(out, f"cannot be a run directory: {blocker} is a file, not a folder")
    recorded = out / "config.json"
    if not recorded.is_file():
        return False
    try:
        previous = json.loads(recorded.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        previous = None
    wanted = run_record(config)
    # A key an older run's config lacks is a field added since, at its default (null) in that run.
    keys = (
        sorted(k for k in {*previous, *wanted} if previous.get(k) != wanted.get(k))
        if isinstance(previous, dict)
        else ["(unreadable)"]
    )
    if not keys:
        return False
    if overwrite:
        return True
    raise InputError(
        recorded,
        f"holds another run (it differs in {', '.join(keys)}); --overwrite replaces it, or give another --out",
    )


def clear_run(out: Path) -> None:
    """Remove another run's files (``RUN_FILES``) from ``out``, once this run has judged everything: its plots and
    reports must not stay beside this run's. The engine cache stays; it is keyed by model and request."""
    for pattern in RUN_FILES:
        for path in out.glob(pattern):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


def check_data_needs(
    config: EvaluationConfig, evaluators: Sequence[tuple[SystemSpec, Evaluator]], task: TaskKind, examples: Sequence
) -> None:
    """Every system's declared data needs (``Evaluator.needs``: other splits, fields of the judged examples), checked
    before any model loads, so that a baseline that cannot run fails at once and names itself, not after the other
    systems have judged."""
    data = Path(config.data)
    for spec, evaluator in evaluators:
        who = f"system {spec.name!r} ({spec.evaluator})"
        check_fields(evaluator.needs.fields, task.name, examples, who, data)
        for split, why in evaluator.needs.splits.items():
            if split == config.split:
                continue
            try:
                read_split(data, split, seed=config.seed, task=config.task, person_column=config.person_column)
            except InputError as err:
                raise ValueError(f"{err}: {who} {why} ('{split}'), so it cannot judge this dataset") from None


def judge_system(
    spec: SystemSpec, evaluator: Evaluator, examples: Sequence, config: EvaluationConfig, cache_path: Path
) -> dict[str, SystemRun]:
    """Run one system; its judgments grouped into the systems they belong to (``NAME``, ``NAME-suffix``)."""
    context = JudgeContext(
        data=Path(config.data),
        split=config.split,
        system=spec.name,
        out=Path(config.out),
        seed=config.seed,
        model=spec.model,
    )
    engine = None
    if evaluator.needs_model and evaluator.uses_engine:
        from persetrain.engine import load_engine

        engine = load_engine(spec.model, backend=config.backend, cache_path=cache_path, base_url=config.base_url)
    start = time.perf_counter()
    try:
        found = evaluator.judge(examples, engine, context)
    finally:
        if engine is not None:
            engine.close()
    seconds = time.perf_counter() - start
    groups: dict[str, list[Judgment]] = {}
    for judgment in found:
        name = judgment.evaluator
        if name != spec.name and not name.startswith(f"{spec.name}-"):
            raise RuntimeError(
                f"evaluator {spec.evaluator!r} wrote a judgment for system {name!r} while judging as {spec.name!r}"
            )
        groups.setdefault(name, []).append(judgment)
    return {name: SystemRun(group, evaluator, seconds, spec) for name, group in groups.items()}


def judge_all(
    config: EvaluationConfig, evaluators: Sequence[tuple[SystemSpec, Evaluator]], examples: Sequence
) -> dict[str, SystemRun]:
    """Every system's runs on ``examples``, kept in memory: the run directory is written once all are judged."""
    runs: dict[str, SystemRun] = {}
    for spec, evaluator in evaluators:
        runs.update(judge_system(spec, evaluator, examples, config, Path(config.out) / "engine-cache.sqlite"))
    return runs


def judge_sample(
    config: EvaluationConfig, examples: Sequence | None = None
) -> tuple[TaskKind, list, list[tuple[SystemSpec, Evaluator]], dict[str, SystemRun]]:
    """The first pass of an evaluation and of a meta-evaluation: the task kind, the examples judged (``examples``,
    or the configured sample), every system's evaluator (built and its data needs checked before any model loads)
    and every system's runs on those examples."""
    task, sample = load_examples(config)
    examples = list(sample if examples is None else examples)
    evaluators = build_evaluators(config.systems, task, config.backend)
    check_data_needs(config, evaluators, task, examples)
    return task, examples, evaluators, judge_all(config, evaluators, examples)


def judgment_records(
    judged: Mapping[str, Mapping[str, SystemRun]], examples: Mapping[str, Sequence]
) -> dict[str, dict[str, list[dict]]]:
    """Every judgment as its record (``persetrain.records``: gold, correct, one option numbering, system and
    evaluator); the plain records of a run with probes hold each probe's verdict beside their own."""
    records: dict[str, dict[str, list[dict]]] = {}
    for sub, runs in judged.items():
        by_id = {ex.id: ex for ex in examples[sub]}
        records[sub] = {
            name: [
                record_of(j, by_id[j.example_id], system_spec(run.spec), run.evaluator.option_labels, sub or None)
                for j in run.judgments
            ]
            for name, run in runs.items()
        }
    plain = {ex.id: ex for ex in examples[""]}
    for name, rows in records[""].items():
        probes = {sub: found[name] for sub, found in records.items() if sub and name in found}
        attach_probes(rows, probes, plain, judged[""][name].evaluator.option_labels)
    return records


def write_run(
    out: Path,
    config: EvaluationConfig,
    judged: Mapping[str, Mapping[str, SystemRun]],
    examples: Mapping[str, Sequence],
) -> dict[str, dict[str, list[dict]]]:
    """``config.json``, ``environment.json``, ``examples.jsonl`` and ``judgments/`` of a run that has judged
    everything; returns its records, by subfolder and system. ``judged`` maps a subfolder of ``judgments/`` (""
    for the folder itself) to its systems' runs and ``examples`` the same subfolders to the examples they judged.
    The examples are written beside the judgments so that a run can be read (``persetrain view``, ``compare``)
    without its dataset. The judgments folder is replaced whole, so no system of an earlier run into the same
    folder is left beside this run's."""
    write_json(out / "config.json", asdict(config))
    write_json(out / "environment.json", environment())
    write_jsonl(out / "examples.jsonl", examples[""])
    records = judgment_records(judged, examples)
    with atomic_dir(out / "judgments") as folder:
        for sub, by_system in records.items():
            names = file_names(by_system)
            for name, rows in by_system.items():
                write_jsonl(folder / sub / names[name], rows)
    return records


def write_view(out: Path) -> Path:
    """``view.html``: the run's page (``persetrain view --export``), one self-contained file the report links to."""
    from persetrain.view.app import Viewed, export_html

    return export_html(Viewed.load([out]), out / "view.html")


def system_metrics(task: TaskKind, examples: Sequence, run: SystemRun) -> dict:
    """The evaluator's metrics of one system plus what it cost: calls and tokens, and the seconds judging took."""
    metrics = run.evaluator.metrics(task, examples, run.judgments)
    cost = {k: sum(getattr(j.cost, k) for j in run.judgments) for k in ("calls", "prompt_tokens", "completion_tokens")}
    metrics["cost"] = {**cost, "seconds": run.seconds}
    return metrics


def write_report(
    out: Path,
    task: TaskKind,
    examples: Sequence,
    runs: Mapping[str, SystemRun],
    metrics: dict,
    title: str | None = None,
    records: Mapping[str, Sequence[dict]] | None = None,
) -> None:
    """``report.md``: the task's sections (or a plain metrics table), then each method's own sections, a few wrong
    examples per system (from its judgment ``records``) and the link to ``view.html``."""
    judgments = {name: run.judgments for name, run in runs.items()}
    systems = metrics["systems"]
    sections = (task.report(out, examples, judgments, systems) if task.report is not None else {}) or {
        "Metrics": metrics_table(systems)
    }
    owners: dict[int, list[str]] = {}
    for name, run in runs.items():
        owners.setdefault(id(run.evaluator), []).append(name)
    for names in owners.values():
        evaluator = runs[names[0]].evaluator
        sections.update(
            evaluator.report(out, examples, {n: judgments[n] for n in names}, {n: systems[n] for n in names})
        )
    sections.update(wrong_examples(records or {}))
    sections["Browse the examples"] = BROWSE
    write_markdown(out / "report.md", title or f"Evaluation on {len(examples)} {task.name} examples", sections)
    console.print(sections[next(iter(sections))])


def evaluate(config: EvaluationConfig, examples: Sequence | None = None, overwrite: bool = False) -> dict:
    """Run every system, compute metrics, write the run directory; return the metrics.

    ``examples`` (of the dataset's task kind) replaces the configured sample when a caller has already
    chosen which examples to judge. ``overwrite`` lets the run replace another one in ``config.out``.
    """
    out = Path(config.out)
    replaces = check_run_dir(out, config, overwrite)
    task, examples, _, runs = judge_sample(config, examples)
    if replaces:
        clear_run(out)
    metrics = {
        "kind": task.name,
        "n_examples": len(examples),
        "systems": {name: system_metrics(task, examples, run) for name, run in runs.items()},
    }
    records = write_run(out, config, {"": runs}, {"": examples})
    write_json(out / "metrics.json", metrics)
    write_report(out, task, examples, runs, metrics, records=records[""])
    write_view(out)
    return metrics
