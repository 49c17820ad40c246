"""``persetrain evaluate``, ``meta-eval``, ``evaluators`` and ``demo``: judging data with registered evaluators."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from persetrain.cli.common import BaseUrlOpt, ModelOpt, app
from persetrain.models import DEFAULT_MODEL

OverwriteOpt = Annotated[
    bool,
    typer.Option(help="Replace another run that --out holds (refused without it; a rerun of the same config resumes)."),
]


TaskOpt = Annotated[
    str | None,
    typer.Option(
        help="Task kind of rows without a card (a .jsonl / .csv / .parquet file, a saved datasets folder, a Hub id): "
        "pairwise for preference rows (prompt, chosen, rejected, person). See docs/formats.md."
    ),
]
PersonColumnOpt = Annotated[
    str | None,
    typer.Option(help="Column of a preference row holding the person (default: 'person' when there is one)."),
]


def _options(pairs: list[str] | None) -> dict[str, str]:
    options = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set {pair!r}: use --set FIELD=VALUE")
        options[key.strip()] = value
    return options


@app.command()
def evaluate(
    data: Annotated[
        Path | None,
        typer.Option(
            help="A dataset: a folder `persetrain prepare` wrote, JSONL with a dataset.json card, or a PrefEval folder."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Run directory for judgments, metrics and the report.")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML evaluation config with a systems: list.")] = None,
    system: Annotated[
        list[str] | None, typer.Option(help="NAME=EVALUATOR:MODEL, EVALUATOR:MODEL or EVALUATOR (repeatable).")
    ] = None,
    evaluator: Annotated[str | None, typer.Option(help="Evaluator for every --model.")] = None,
    model: Annotated[
        list[str] | None, typer.Option("--model", "-m", help="Model spec for --evaluator (repeatable).")
    ] = None,
    baseline: Annotated[
        list[str] | None, typer.Option(help="An evaluator that needs no model, e.g. reviewer-avg, mf (repeatable).")
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="FIELD=VALUE for every system whose evaluator has that option (repeatable)."),
    ] = None,
    split: Annotated[str | None, typer.Option(help="Split to judge (default test).")] = None,
    task: TaskOpt = None,
    person_column: PersonColumnOpt = None,
    max_per_reviewer: Annotated[int | None, typer.Option(min=1, help="At most N examples per reviewer.")] = None,
    max_examples: Annotated[int | None, typer.Option(min=1, help="A seeded random sample of N examples.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the sample (default 0).")] = None,
    backend: Annotated[str | None, typer.Option(help="Engine backend: hf (local) or openai (a server).")] = None,
    base_url: BaseUrlOpt = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """Judge a dataset with registered evaluators (`persetrain evaluators` lists them); write metrics and a report."""
    from persetrain.evaluation import EvaluationConfig, apply_options
    from persetrain.evaluation import evaluate as run_evaluation
    from persetrain.evaluators.registry import SystemSpec

    systems = [SystemSpec.parse(s) for s in system or []]
    if evaluator is not None:
        systems += [SystemSpec(m, evaluator, m) for m in model or []] or [SystemSpec.parse(evaluator)]
    elif model:
        raise ValueError("--model needs --evaluator (or use --system NAME=EVALUATOR:MODEL)")
    systems += [SystemSpec.parse(b) for b in baseline or []]
    flags = {
        "data": str(data) if data else None,
        "out": str(out) if out else None,
        "split": split,
        "task": task,
        "person_column": person_column,
        "max_per_reviewer": max_per_reviewer,
        "max_examples": max_examples,
        "seed": seed,
        "backend": backend,
        "base_url": base_url,
        "systems": systems,
    }
    if config is not None:
        run = EvaluationConfig.from_yaml(config, **flags)
    else:
        if data is None or out is None:
            raise ValueError("give --data and --out (or --config FILE)")
        run = EvaluationConfig(**{k: v for k, v in flags.items() if v is not None})
    apply_options(run.systems, _options(set_))
    run_evaluation(run, overwrite=overwrite)


@app.command("meta-eval")
def meta_eval(
    data: Annotated[Path, typer.Option(help="A labelled dataset (any layout `evaluate` reads).")],
    out: Annotated[Path, typer.Option(help="Run directory for judgments, metrics, plots and the report.")],
    system: Annotated[
        list[str], typer.Option(help="NAME=EVALUATOR:MODEL, EVALUATOR:MODEL or EVALUATOR (repeatable; at least one).")
    ],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="FIELD=VALUE for every system whose evaluator has that option (repeatable)."),
    ] = None,
    probe: Annotated[
        list[str] | None,
        typer.Option(
            help="Probe: flip, manipulation, blind (person removed), swap "
            "(someone else's person); repeatable; default all."
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="Split to judge.")] = "test",
    task: TaskOpt = None,
    person_column: PersonColumnOpt = None,
    max_examples: Annotated[int | None, typer.Option(min=1, help="A seeded random sample of N examples.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the sample.")] = 0,
    backend: Annotated[str, typer.Option(help="Engine backend: hf (local) or openai (a server).")] = "hf",
    base_url: BaseUrlOpt = None,
    overwrite: OverwriteOpt = False,
) -> None:
    """Several evaluators on the same labelled data, side by side: agreement, cost, flip rate, manipulation, and
    accuracy with the person removed (blind) or swapped."""
    from persetrain.evaluation import apply_options
    from persetrain.evaluators.registry import SystemSpec
    from persetrain.meta_eval import PROBES, MetaEvalConfig, meta_evaluate

    systems = [SystemSpec.parse(s) for s in system]
    apply_options(systems, _options(set_))
    meta_evaluate(
        MetaEvalConfig(
            data=str(data),
            out=str(out),
            systems=systems,
            split=split,
            task=task,
            person_column=person_column,
            max_examples=max_examples,
            seed=seed,
            backend=backend,
            base_url=base_url,
            probes=list(probe or PROBES),
        ),
        overwrite=overwrite,
    )


@app.command("evaluators")
def evaluators_cmd(
    name: Annotated[
        str | None, typer.Argument(help="An evaluator: what its options mean, the records it reads, two examples.")
    ] = None,
) -> None:
    """List the registered evaluators, the task kinds each judges and its options; with NAME, describe one."""
    import dataclasses

    from persetrain.evaluators.registry import registered

    if name is not None:
        from persetrain.evaluators.describe import describe

        typer.echo(describe(name))
        return
    for name, cls in registered().items():
        options = ", ".join(
            f"{f.name}={f.default!r}" for f in dataclasses.fields(cls.Config) if f.default is not dataclasses.MISSING
        )
        model = "model" if cls.needs_model else "no model"
        typer.echo(f"{name}  [{', '.join(cls.tasks)}; {model}]  {options}")


demo_app = typer.Typer(help="End-to-end demos on the embedded model, on a CPU.")
app.add_typer(demo_app, name="demo")


@demo_app.callback(invoke_without_command=True)
def demo(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/demo"),
    model: ModelOpt = DEFAULT_MODEL,
) -> None:
    """PerSE end to end (`persetrain demo`); `persetrain demo parl` runs PARL's loop."""
    if ctx.invoked_subcommand is not None:
        return
    from persetrain.demos.perse import run_demo

    run_demo(out, model=model)


@demo_app.command("parl", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def demo_parl(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Run directory; a re-run skips the stages summary.json records.")] = Path(
        "runs/demo-parl"
    ),
    full: Annotated[
        bool,
        typer.Option(
            help="The full demo (55-70 minutes on 2 cores: the judge on every rule, 46 GRPO steps, every held-out "
            "user), instead of the short form that ends within 15 minutes."
        ),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            help="A YAML file of research knobs (judge_curriculum, judge_seeds, warmstart_samples, ...) over the "
            "form's; persetrain/demos/parl.yaml holds both forms' values and says what each knob means."
        ),
    ] = None,
    model: ModelOpt = DEFAULT_MODEL,
    judge: Annotated[
        str | None, typer.Option(help="A trained rule verifier, or several joined by commas (skips training).")
    ] = None,
    fresh: Annotated[bool, typer.Option(help="Start from an empty run directory.")] = False,
    seed: int = 0,
) -> None:
    """PARL on SYNTHETIC users: verifier training, warm start, GRPO, Max-Diff of both generators, report.md (the short
    form by default; --full for the measurement)."""
    from persetrain.demos.parl import run_parl_demo
    from persetrain.demos.parl_config import KNOBS, demo_config

    if ctx.args:  # the knobs were options once: say where they went
        given = ctx.args[0].split("=")[0]
        knob = given.removeprefix("--").replace("-", "_")
        where = f"set {knob} in a YAML file given with --config FILE" if knob in KNOBS else "see --help"
        raise ValueError(f"demo parl: no option {given} ({where})")
    run_parl_demo(demo_config(full, config, out=out, model=model, seed=seed, judge=judge, fresh=fresh))
