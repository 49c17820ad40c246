"""``persetrain evaluate``: run judges and baselines on a prepared dataset and write a run directory.

A run directory describes itself: ``config.json`` (what was asked), ``environment.json`` (versions,
device, git commit), ``judgments/<system>.jsonl`` (every judgment with its rationale and cost),
``metrics.json`` and ``report.md`` (+ ``scatter.png`` for scalar tasks). Judgments of a system
are written once it finishes and the engine cache holds every finished call, so a re-run after a
crash only computes what is missing.
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from persetrain.console import console
from persetrain.evaluators.baselines import matrix_factorization, reviewer_average, reviewer_majority
from persetrain.evaluators.perse import PerSEScalarConfig, judge_pairwise, judge_scalar
from persetrain.io import InputError, write_json, write_jsonl
from persetrain.metrics import correlations, pairwise_accuracy, similarity_summary
from persetrain.report import (
    explanation_samples,
    pairwise_table,
    scalar_table,
    scatter_plot,
    write_markdown,
)
from persetrain.schema import Judgment, PairwiseExample, ScalarExample

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
    max_examples: int | None = None
    backend: str = "hf"
    base_url: str | None = None
    perse: PerSEScalarConfig = field(default_factory=PerSEScalarConfig)
    text_metrics: bool = True


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
    examples, kind = load_examples(Path(config.data), config.split)
    if config.max_examples:
        examples = examples[: config.max_examples]
    write_json(out / "config.json", asdict(config))
    write_json(out / "environment.json", environment())

    judgments: dict[str, list[Judgment]] = {}
    for system in config.systems:
        for name, found in _judge(system, kind, examples, config, out / "engine-cache.sqlite").items():
            write_jsonl(out / "judgments" / f"{name}.jsonl", found)
            judgments[name] = found
    metrics = score(kind, examples, judgments, config.text_metrics)
    write_json(out / "metrics.json", metrics)
    _report(out, kind, examples, judgments, metrics)
    return metrics


def score(kind: str, examples: Sequence, judgments: dict[str, list[Judgment]], text_metrics: bool = True) -> dict:
    """Metrics per system; unparsed judgments are counted, never dropped."""
    result: dict = {"kind": kind, "n_examples": len(examples), "systems": {}}
    for name, found in judgments.items():
        by_id = {j.example_id: j for j in found}
        ordered = [by_id.get(ex.id) for ex in examples]
        if kind == "scalar":
            pred = [j.score if j is not None and j.parsed else None for j in ordered]
            metrics = correlations(pred, [ex.score for ex in examples])
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

