"""``persetrain evaluate``: run judges and baselines on a prepared dataset and write a run directory.

A run directory describes itself: ``config.json`` (what was asked), ``environment.json`` (versions,
device, git commit), ``judgments/<system>.jsonl`` (every judgment with its rationale and cost),
``metrics.json`` and ``report.md`` (+ ``scatter.png`` for scalar tasks). Judgments of a system
are written once it finishes and the engine cache holds every finished call, so a re-run after a
crash only computes what is missing.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

from persetrain.console import console
from persetrain.evaluators.baselines import matrix_factorization, reviewer_average, reviewer_majority
from persetrain.evaluators.perse import PerSEScalarConfig, judge_pairwise, judge_scalar
from persetrain.io import InputError, write_json, write_jsonl
from persetrain.metrics import correlations, pairwise_accuracy, similarity_summary
from persetrain.metrics.calibration import apply_calibration, fit_quantile_calibration, linear_calibration
from persetrain.prompts.perse import SCORE_MAX, SCORE_MIN
from persetrain.report import (
    explanation_samples,
    pairwise_table,
    scalar_table,
    scatter_plot,
    write_markdown,
)
from persetrain.schema import Judgment, PairwiseExample, ScalarExample, reviewer_of

BASELINES = ("reviewer-avg", "mf")


@dataclass
class SystemSpec:
    """One system to evaluate: a PerSE judge on a model, or a baseline that needs no model."""

    name: str
    evaluator: str  # "perse" or one of BASELINES
    model: str | None = None

    @classmethod
    def parse(cls, text: str) -> SystemSpec:
        """``reviewer-avg`` | ``mf`` | ``perse:SPEC`` | ``NAME=perse:SPEC``."""
        name, _, rest = text.rpartition("=") if "=" in text.split(":")[0] else ("", "", text)
        if rest in BASELINES:
            return cls(name or rest, rest)
        evaluator, _, model = rest.partition(":")
        if evaluator != "perse" or not model:
            raise ValueError(f"unknown system {text!r}: use reviewer-avg, mf, perse:MODEL or NAME=perse:MODEL")
        return cls(name or model, "perse", model)


@dataclass
class EvaluationConfig:
    data: str
    out: str
    systems: list[SystemSpec]
    split: str = "test"
    #: At most this many queries per held-out reviewer (chosen by a hash of the example id). A
    #: pooled correlation over few reviewers mostly measures who is harsh; for a fixed judging
    #: budget, more reviewers with fewer queries each is the better sample.
    max_per_reviewer: int | None = None
    max_examples: int | None = None
    backend: str = "hf"
    base_url: str | None = None
    perse: PerSEScalarConfig = field(default_factory=PerSEScalarConfig)
    text_metrics: bool = True
    #: How a judge's 1-10 scores are put on a dataset with another scale (Amazon: 1-5 stars):
    #: ``linear`` needs no labels; ``quantile`` is fit by 2-fold cross-fitting so that no example's
    #: own label shapes its calibrated score.
    calibration: Literal["linear", "quantile"] = "linear"


def _load_split(data: Path, split: str):
    from datasets import load_from_disk

    try:
        dataset = load_from_disk(str(data))
    except FileNotFoundError as err:
        raise InputError(data, f"not a dataset saved with save_to_disk ({err})") from None
    if split not in dataset:
        raise InputError(data, f"has no split {split!r}; it has {sorted(dataset)}")
    return dataset


def load_examples(data: Path, split: str) -> tuple[list, str]:
    """Typed examples of one split and their kind ("scalar" or "pairwise")."""
    dataset = _load_split(data, split)
    columns = set(dataset[split].column_names)
    model = ScalarExample if "query_plot" in columns else PairwiseExample
    fields = set(model.model_fields)
    examples = []
    for i, row in enumerate(dataset[split]):
        try:
            examples.append(model.model_validate({k: v for k, v in row.items() if k in fields}))
        except ValueError as err:
            raise InputError(data / split, str(err).splitlines()[0], record=i) from None
    return examples, "scalar" if model is ScalarExample else "pairwise"


def per_reviewer_sample(examples: Sequence, limit: int) -> list:
    """The first ``limit`` examples of each reviewer by a hash of their ids, in the original order."""
    ranked: dict[str, list] = {}
    for ex in sorted(examples, key=lambda e: hashlib.sha256(e.id.encode()).hexdigest()):
        ranked.setdefault(reviewer_of(ex), []).append(ex.id)
    keep = {i for ids in ranked.values() for i in ids[:limit]}
    return [ex for ex in examples if ex.id in keep]


def built_profile_words(data: Path) -> int | None:
    """The ``profile_words`` a prepared dataset's prompts were cut to (its build_info.json), if known."""
    info = data / "build_info.json"
    if not info.exists():
        return None
    return json.loads(info.read_text(encoding="utf-8")).get("params", {}).get("profile_words")


def environment() -> dict:
    import torch
    import transformers
    import trl

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
            "transformers": transformers.__version__, "trl": trl.__version__,
            "cuda": torch.cuda.is_available(), "threads": torch.get_num_threads(), "git_commit": commit}


def _judge(system: SystemSpec, kind: str, examples: Sequence, config: EvaluationConfig,
           cache_path: Path) -> dict[str, list[Judgment]]:
    if system.evaluator == "reviewer-avg":
        return {system.name: reviewer_average(examples) if kind == "scalar" else reviewer_majority(examples)}
    if system.evaluator == "mf":
        if kind != "scalar":
            raise ValueError("matrix factorization is a scalar baseline")
        train, _ = load_examples(Path(config.data), "train")
        return {system.name: matrix_factorization(train, examples)}
    from persetrain.engine import load_engine

    options = {"base_url": config.base_url} if config.backend == "openai" else {}
    engine = load_engine(system.model, backend=config.backend, cache_path=cache_path, **options)
    try:
        if kind == "scalar":
            return judge_scalar(engine, examples, config.perse, name=system.name)
        return {system.name: judge_pairwise(engine, examples, config.perse.profile_words, name=system.name)}
    finally:
        engine.close()


def evaluate(config: EvaluationConfig) -> dict:
    """Run every system, compute metrics, write the run directory; return the metrics."""
    out = Path(config.out)
    if config.calibration not in ("linear", "quantile"):
        raise ValueError(f"unknown calibration {config.calibration!r}; use linear or quantile")
    examples, kind = load_examples(Path(config.data), config.split)
    if config.max_per_reviewer:
        examples = per_reviewer_sample(examples, config.max_per_reviewer)
    if config.max_examples:
        examples = examples[: config.max_examples]
    if config.perse.profile_words is None:
        config = replace(config, perse=replace(config.perse, profile_words=built_profile_words(Path(config.data))))
    write_json(out / "config.json", asdict(config))
    write_json(out / "environment.json", environment())

    judgments: dict[str, list[Judgment]] = {}
    calibrations: dict[str, dict] = {}
    for system in config.systems:
        for name, found in _judge(system, kind, examples, config, out / "engine-cache.sqlite").items():
            if system.evaluator == "perse" and kind == "scalar":
                found, calibrations[name] = calibrate(found, examples, config.calibration)
            write_jsonl(out / "judgments" / f"{name}.jsonl", found)
            judgments[name] = found
    metrics = score(kind, examples, judgments, config.text_metrics)
    for name, calibration in calibrations.items():
        if calibration:
            metrics["systems"][name]["calibration"] = calibration
    write_json(out / "metrics.json", metrics)
    _report(out, kind, examples, judgments, metrics)
    return metrics


def calibrate(found: list[Judgment], examples: Sequence[ScalarExample],
              method: str) -> tuple[list[Judgment], dict | None]:
    """Put a judge's 1-10 scores on the examples' own scale (PerSE on Amazon: 1-5 stars).

    Nothing changes on a 1-10 dataset. Elsewhere ``score`` becomes the calibrated value the
    metrics use, while ``raw`` (parsed judgments) and ``probs`` (expected) keep the judge's 1-10 answer.
    """
    scales = {ex.score_max for ex in examples}
    if len(scales) != 1:
        raise ValueError(f"examples mix score scales {sorted(scales)}; evaluate one scale at a time")
    top = scales.pop()
    if top == SCORE_MAX:
        return found, None
    by_id = {j.example_id: j for j in found}
    ordered = [by_id[ex.id] for ex in examples]
    pred = [j.score if j.parsed else None for j in ordered]
    linear = linear_calibration((SCORE_MIN, SCORE_MAX), (1, top))
    if method == "linear":
        mapped, record = apply_calibration(linear, pred), {"method": "linear", "map": linear.to_dict()}
    elif method == "quantile":
        mapped = [None] * len(pred)
        folds = [int(hashlib.sha256(ex.id.encode()).hexdigest(), 16) % 2 for ex in examples]
        record = {"method": "quantile", "folds": 2, "linear_folds": 0}
        for fold in (0, 1):
            fit_on = [i for i, f in enumerate(folds) if f != fold and pred[i] is not None]
            apply_to = [i for i, f in enumerate(folds) if f == fold]
            if fit_on:
                fitted = fit_quantile_calibration([pred[i] for i in fit_on], [examples[i].score for i in fit_on])
            else:  # nothing parsed to fit on: the label-free map, and the record says so
                fitted, record["linear_folds"] = linear, record["linear_folds"] + 1
            for i, value in zip(apply_to, apply_calibration(fitted, [pred[i] for i in apply_to]), strict=True):
                mapped[i] = value
    else:
        raise ValueError(f"unknown calibration {method!r}; use linear or quantile")
    record["scale"] = [1, top]
    updated = [j.model_copy(update={"score": m}) if m is not None else j for j, m in zip(ordered, mapped, strict=True)]
    return updated, record


def score(kind: str, examples: Sequence, judgments: dict[str, list[Judgment]], text_metrics: bool = True) -> dict:
    """Metrics per system; unparsed judgments are counted, never dropped."""
    result: dict = {"kind": kind, "n_examples": len(examples), "systems": {}}
    for name, found in judgments.items():
        by_id = {j.example_id: j for j in found}
        ordered = [by_id.get(ex.id) for ex in examples]
        if kind == "scalar":
            pred = [j.score if j is not None and j.parsed else None for j in ordered]
            top = max(ex.score_max for ex in examples)
            metrics = correlations(pred, [ex.score for ex in examples], scale=(1, top))
            has_text = any(j is not None and j.raw for j in ordered)
            if text_metrics and has_text:
                metrics["explanation"] = similarity_summary([j.explanation if j else "" for j in ordered],
                                                            [ex.review for ex in examples])
        else:
            metrics = pairwise_accuracy([j.choice if j is not None and j.parsed else None for j in ordered],
                                        [ex.preferred for ex in examples], [ex.aspect for ex in examples])
        metrics["cost"] = {k: sum(getattr(j.cost, k) for j in found) for k in ("calls", "prompt_tokens",
                                                                                "completion_tokens")}
        result["systems"][name] = metrics
    return result


def _report(out: Path, kind: str, examples: Sequence, judgments: dict[str, list[Judgment]], metrics: dict) -> None:
    systems = metrics["systems"]
    sections = {}
    if kind == "scalar":
        sections["Correlation with the reviewers' true scores"] = scalar_table(systems)
        by_system = {name: {j.example_id: j for j in found} for name, found in judgments.items()}
        preds = {name: [(by_id[ex.id].score if ex.id in by_id and by_id[ex.id].parsed else None)
                        for ex in examples] for name, by_id in by_system.items()}
        scatter_plot(out / "scatter.png", [ex.score for ex in examples], preds)
        sections["Predicted vs. true scores"] = "![scatter](scatter.png)"
        reviews = {ex.id: ex.review for ex in examples}
        for name, found in judgments.items():
            if any(j.raw for j in found):
                sections[f"Explanations: {name}"] = explanation_samples(found, reviews)
    else:
        sections["Pairwise accuracy per aspect"] = pairwise_table(systems)
    write_markdown(out / "report.md", f"Evaluation on {len(examples)} {kind} examples", sections)
    console.print(sections[next(iter(sections))])

