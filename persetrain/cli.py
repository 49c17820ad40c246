"""The ``persetrain`` command. Each command parses its options and calls library code; no logic lives here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from typer.core import TyperGroup

from persetrain.console import console, set_quiet
from persetrain.io import InputError
from persetrain.models import DEFAULT_MODEL, ModelSpecError


class _ErrorsAsOneLine(TyperGroup):
    """Every command's expected failures - bad input, an unknown model, a model server that does not
    answer - end as one ``error:`` line and exit code 2, never a traceback."""

    def invoke(self, ctx):
        from persetrain.engine import EngineError

        try:
            return super().invoke(ctx)
        except (InputError, ModelSpecError, EngineError, ValueError) as err:
            _fail(err)


app = typer.Typer(
    help="Train and run learned evaluators of personalized text.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    cls=_ErrorsAsOneLine,
)
models_app = typer.Typer(help="Resolve, convert and inspect model specs.", no_args_is_help=True)
app.add_typer(models_app, name="models")

ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="Model spec: embedded:NAME, a directory, a .gguf file or a Hub id.")
]
BackendOpt = Annotated[str, typer.Option(help="Engine backend: hf (local) or openai (a server).")]
BaseUrlOpt = Annotated[
    str | None, typer.Option(help="Server URL for the openai backend, e.g. http://127.0.0.1:8000/v1")
]
CacheOpt = Annotated[Path | None, typer.Option(help="SQLite request cache; a re-run skips finished calls.")]


@app.callback()
def main(quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False) -> None:
    set_quiet(quiet)


def _fail(err: Exception) -> None:
    console.print("[red]error:[/red]", escape(str(err)))
    raise typer.Exit(code=2)


def _engine(model: str, backend: str, base_url: str | None, cache: Path | None, **options):
    from persetrain.engine import load_engine

    return load_engine(model, backend=backend, cache_path=cache, base_url=base_url, **options)


@models_app.command("fetch")
def models_fetch(
    spec: Annotated[str, typer.Argument(help="Model spec to make available locally.")] = DEFAULT_MODEL,
) -> None:
    """Download (Hub ids) or convert (GGUF, embedded) a model so later loads are fast and offline."""
    from persetrain.models import local_weights_dir, resolve

    resolved = resolve(spec)
    if resolved.kind == "hub":
        from huggingface_hub import snapshot_download

        try:
            path = snapshot_download(resolved.location)
        except Exception as err:  # the hub client raises many transport-specific types
            raise ModelSpecError(
                f"could not download {spec!r} from the Hugging Face Hub: {err.__class__.__name__}. "
                "Check the network and HF_TOKEN (gated models such as LLaMA-2 need an accepted "
                "licence), or copy an HF cache that holds it into $HF_HOME."
            ) from err
    else:
        path = local_weights_dir(spec)
    console.print(f"{spec} -> {path}")


@models_app.command("info")
def models_info(spec: Annotated[str, typer.Argument(help="Model spec.")] = DEFAULT_MODEL) -> None:
    """Show where a spec points, its architecture and the device/dtype it would run with."""
    from persetrain.models import describe

    info = describe(spec)
    typer.echo(json.dumps(info, indent=2))


@app.command()
def generate(
    input: Annotated[Path, typer.Option("--input", "-i", help="JSONL of requests: {id, messages, assistant_prefix}.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="JSONL of results, written atomically.")],
    model: ModelOpt = DEFAULT_MODEL,
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    cache: CacheOpt = None,
    choices: Annotated[
        str | None, typer.Option(help="Comma-separated closed answer set: write choice probabilities instead of text.")
    ] = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")] = None,
    json_schema: Annotated[Path | None, typer.Option(help="JSON schema file the output must follow.")] = None,
    regex: Annotated[str | None, typer.Option(help="Regex the output must match.")] = None,
) -> None:
    """Run requests from a JSONL file through the engine and write one result per line."""
    from persetrain.engine import ChatRequest, GenerationParams
    from persetrain.io import read_jsonl, write_jsonl

    requests = read_jsonl(input, ChatRequest)
    schema = None
    if json_schema is not None:
        try:
            schema = json.loads(json_schema.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise InputError(json_schema, f"not a readable JSON schema ({err})") from None
    engine = _engine(model, backend, base_url, cache)
    if choices:
        results = engine.choice_probs(requests, [c for c in choices.split(",")])
    else:
        params = GenerationParams(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop=tuple(stop or ()),
            json_schema=schema,
            regex=regex,
        )
        results = engine.generate(requests, params)
    write_jsonl(output, results)
    console.print(
        f"wrote {len(results)} results to {output}; cost: {engine.cost.model_dump()}, cache hits: {engine.cache_hits}"
    )


@app.command()
def serve(
    model: ModelOpt = DEFAULT_MODEL,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients use; default: the spec.")] = None,
) -> None:
    """Serve a model (e.g. a trained judge) over an OpenAI-compatible HTTP API with logprobs."""
    from persetrain.engine.server import serve as run_server

    run_server(model, host=host, port=port, served_model_name=served_model_name)


prepare_app = typer.Typer(help="Turn raw data into instruction datasets.", no_args_is_help=True)
app.add_typer(prepare_app, name="prepare")


@prepare_app.command("sample")
def prepare_sample(
    out: Annotated[Path, typer.Option(help="Folder for the raw files.")],
    seed: int = 0,
) -> None:
    """Write SYNTHETIC raw MPST / DOC / Amazon files with planted reviewer preferences, and PARL users
    with planted writing signatures (``OUT/parl``)."""
    from data_prep.parl_synthetic import write_parl_sample
    from data_prep.synthetic import write_sample_data

    write_sample_data(out, seed=seed)
    write_parl_sample(out / "parl", seed=seed)
    console.print(f"wrote synthetic raw data to {out}")


@prepare_app.command("perse")
def prepare_perse_cmd(
    raw: Annotated[Path, typer.Option(help="Raw data folder (see data_prep/README.md).")],
    out: Annotated[Path, typer.Option(help="Output folder for the datasets.")],
    model: ModelOpt = DEFAULT_MODEL,
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    no_llm: Annotated[bool, typer.Option(help="Skip anonymization/summarization (raw synopses).")] = False,
    k: Annotated[list[int] | None, typer.Option(help="Profile size K (repeatable); default 3.")] = None,
    seed: int = 0,
    probe: Annotated[bool, typer.Option(help="Run the title contamination probe.")] = True,
) -> None:
    """Anonymize + summarize plots with an LLM, probe contamination, build Per-MPST / Per-DOC / Amazon."""
    from data_prep.prepare import prepare_perse

    engine = None if no_llm else _engine(model, backend, base_url, out / "engine-cache.sqlite")
    prepare_perse(raw, out, engine=engine, ks=tuple(k or (3,)), seed=seed, probe=probe)


@prepare_app.command("parl")
def prepare_parl_cmd(
    raw: Annotated[Path, typer.Option(help="Folder with amazon/, reddit/, news/ in the PARL layouts.")],
    out: Annotated[Path, typer.Option(help="Output folder: one dataset per task, parl_<task>/.")],
    task: Annotated[list[str] | None, typer.Option(help="amazon, reddit or news (repeatable); default all.")] = None,
    baselines: Annotated[
        list[Path] | None,
        typer.Option(help="Negatives file from generate-baselines (repeatable); default RAW/<task>/baselines.jsonl."),
    ] = None,
    min_history: Annotated[int, typer.Option(help="Users with fewer earlier items are an error.")] = 1,
    seed: int = 0,
) -> None:
    """Build PARL rubric-induction datasets (GRPO prompts + reward columns) and verl parquet files."""
    from data_prep.parl import prepare_parl

    written = prepare_parl(
        raw,
        out,
        tasks=tuple(task or ("amazon", "reddit", "news")),
        baselines=tuple(baselines or ()),
        seed=seed,
        min_history=min_history,
    )
    for name, sizes in written.items():
        console.print(f"[green]wrote[/green] parl_{name} -> {out / f'parl_{name}'} {sizes}")


@prepare_app.command("reference")
def prepare_reference_cmd(
    raw: Annotated[Path, typer.Option(help="A task folder in its PARL layout (e.g. RAW/parl/amazon).")],
    task: Annotated[str, typer.Option(help="amazon, reddit or news.")],
    baselines: Annotated[
        list[Path],
        typer.Option(
            help="Outputs of other generators: a generate-baselines file (repeatable) or the sample's baselines.jsonl."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Folder for test.jsonl + dataset.json (task kind reference).")],
    min_history: int = 1,
    synthetic: Annotated[bool, typer.Option(help="Mark the card as synthetic data.")] = False,
) -> None:
    """Build a reference-task dataset (ExPerT, AuPEL): the user's own text as reference and system 'gold',
    earlier texts as writing samples, and every generator's output."""
    from data_prep.reference import build_reference

    build_reference(raw, task, baselines, out, min_history=min_history, synthetic=synthetic)
    console.print(f"[green]wrote[/green] reference dataset -> {out}")


@prepare_app.command("preference")
def prepare_preference_cmd(
    out: Annotated[Path, typer.Option(help="Folder for the datasets listwise/, pairs/ and verifier/.")],
    prefeval: Annotated[
        list[Path] | None, typer.Option(help="A PrefEval folder (mcq_options/*.json) (repeatable).")
    ] = None,
    holdout_topics: Annotated[
        str,
        typer.Option(
            help="Comma-separated PrefEval topics for the validation split; default none (every topic in train)."
        ),
    ] = "",
    perse: Annotated[
        list[Path] | None,
        typer.Option(help="A scalar dataset `prepare perse` wrote, e.g. OUT/per_mpst_k3 (repeatable)."),
    ] = None,
    reference: Annotated[
        list[Path] | None, typer.Option(help="A dataset `prepare reference` or `prepare parl` wrote (repeatable).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seeds the option order and the PerSE profiles.")] = 0,
    profile_items: Annotated[int, typer.Option(help="Earlier items that show a PerSE reviewer or a user.")] = 3,
    profile_words: Annotated[int, typer.Option(help="Words kept of each profile item.")] = 40,
    max_pairs_per_person: Annotated[
        int | None, typer.Option(help="At most N pairs per PerSE reviewer (seeded); default all.")
    ] = None,
) -> None:
    """Preference data for reward models and yes/no verifiers: listwise (mcq), pairs (TRL RewardTrainer) and
    verifier (SFT) datasets, train / validation, from PrefEval, PerSE and reference data."""
    from data_prep.preference import prepare_preference

    topics = [t.strip() for t in holdout_topics.split(",") if t.strip()]
    prepare_preference(
        out,
        prefeval=prefeval or (),
        perse=perse or (),
        reference=reference or (),
        holdout_topics=topics,
        seed=seed,
        profile_items=profile_items,
        profile_words=profile_words,
        max_pairs_per_person=max_pairs_per_person,
    )


@app.command("generate-baselines")
def generate_baselines_cmd(
    raw: Annotated[Path, typer.Option(help="A task folder in its PARL layout (e.g. RAW/parl/amazon).")],
    task: Annotated[str, typer.Option(help="amazon, reddit or news.")],
    generator: Annotated[list[str], typer.Option(help="NAME=KIND:MODEL or KIND:MODEL, KIND non or rag (repeatable).")],
    out: Annotated[Path, typer.Option(help="Folder for <NAME>.jsonl per generator (resumable).")],
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Default: per task (160 / 200 / 32).")] = None,
    min_history: int = 1,
    seed: int = 0,
) -> None:
    """Write competitive generators' outputs for every PARL task input: the negatives of `prepare parl`."""
    from data_prep.parl import read_task
    from data_prep.parl_baselines import GeneratorSpec, generate_baselines

    specs = [GeneratorSpec.parse(g) for g in generator]
    examples = read_task(raw, task, min_history=min_history)
    written = generate_baselines(
        examples,
        specs,
        out,
        lambda spec: _engine(spec, backend, base_url, out / "engine-cache.sqlite"),
        seed=seed,
        max_new_tokens=max_new_tokens,
    )
    for name, path in written.items():
        console.print(f"[green]wrote[/green] {name} -> {path}")


rubrics_app = typer.Typer(help="PARL rubrics: induce, validate and score.", no_args_is_help=True)
app.add_typer(rubrics_app, name="rubrics")


@rubrics_app.command("induce")
def rubrics_induce(
    data: Annotated[Path, typer.Option(help="A dataset `persetrain prepare parl` wrote (parl_<task>).")],
    out: Annotated[Path, typer.Option(help="JSON lines: one record per user and run.")],
    model: ModelOpt = DEFAULT_MODEL,
    judge_model: Annotated[str | None, typer.Option(help="Judge model spec; default: --model.")] = None,
    split: str = "test",
    runs: Annotated[int, typer.Option(help="Induction runs with seeds seed, seed+1, ...")] = 1,
    temperature: float = 0.6,
    max_new_tokens: int = 768,
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    max_examples: int | None = None,
    seed: int = 0,
) -> None:
    """Induce each user's rubric set, keep the rules the history satisfies, score the user's text and negatives."""
    from persetrain.data import load_dataset
    from persetrain.evaluators.parl import PARLConfig, induce_to_file

    task, examples = load_dataset(data, split)
    if task.name != "rubric":
        raise ValueError(f"{data} is a {task.name!r} dataset; rubrics induce needs one `prepare parl` wrote")
    examples = examples[:max_examples] if max_examples else examples
    config = PARLConfig(runs=runs, temperature=temperature, max_new_tokens=max_new_tokens, judge_model=judge_model)
    engine = _engine(model, backend, base_url, out.with_name(out.name + ".cache.sqlite"))
    written = induce_to_file(engine, examples, config, out, seed=seed)
    console.print(f"[green]wrote[/green] rubrics of {len(examples)} users x {runs} run(s) -> {written}")


@rubrics_app.command("warmstart-data")
def rubrics_warmstart_data(
    data: Annotated[Path, typer.Option(help="A dataset `persetrain prepare parl` wrote (parl_<task>).")],
    out: Annotated[Path, typer.Option(help="Output: an SFT dataset (prompt / completion) for `persetrain sft`.")],
    model: ModelOpt = DEFAULT_MODEL,
    judge_model: Annotated[str | None, typer.Option(help="Judge model spec; default: --model.")] = None,
    split: str = "train",
    runs: Annotated[int, typer.Option(help="Induction runs per user (seeds seed, seed+1, ...).")] = 1,
    temperature: float = 0.6,
    max_new_tokens: int = 384,
    max_examples: int | None = None,
    seed: int = 0,
) -> None:
    """SFT data for GRPO's warm start: the model's own structured-output rubric sets that pass validation."""
    from persetrain.data import load_dataset
    from persetrain.evaluators.parl import PARLConfig
    from persetrain.train.warmstart import write_warmstart_data

    task, examples = load_dataset(data, split)
    if task.name != "rubric":
        raise ValueError(f"{data} is a {task.name!r} dataset; warmstart-data needs one `prepare parl` wrote")
    examples = examples[:max_examples] if max_examples else examples
    config = PARLConfig(runs=runs, temperature=temperature, max_new_tokens=max_new_tokens, judge_model=judge_model)
    engine = _engine(model, "hf", None, out.with_name(out.name + ".cache.sqlite"))
    counts = write_warmstart_data(engine, examples, out, config, seed=seed)
    console.print(
        f"[green]wrote[/green] {counts['valid']} rubric sets -> {out} (valid share "
        f"{counts['valid_share']:.2f} of {counts['sets']} induced under structured output)"
    )


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def sft(ctx: typer.Context) -> None:
    """Fine-tune a judge: ``persetrain sft --config recipes/perse/X.yaml [--any_trl_arg value ...]``.

    Every TRL / transformers training argument and every recipe key can be given on the command line,
    where it overrides the recipe. Same parser and ``main`` as ``python -m persetrain.train.sft``.
    """
    from persetrain.train.sft import run_sft

    result = run_sft(list(ctx.args))
    if result.exit_code:  # stopped by SIGTERM / SIGUSR1 after saving a checkpoint: rerun to resume
        raise typer.Exit(code=result.exit_code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def rm(ctx: typer.Context) -> None:
    """Train a reward model: ``persetrain rm --config recipes/rm/X.yaml [--any_trl_arg value ...]``.

    TRL's ``RewardTrainer`` on pairs, or the listwise one-forward-per-question path on listwise data
    (``persetrain prepare preference``). Same parser and ``main`` as ``python -m persetrain.train.rm``.
    """
    from persetrain.train.rm import run_rm

    result = run_rm(list(ctx.args))
    if result.exit_code:  # stopped by SIGTERM / SIGUSR1 after saving a checkpoint: rerun to resume
        raise typer.Exit(code=result.exit_code)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def grpo(
    ctx: typer.Context,
    backend: Annotated[
        str, typer.Option(help="trl (this process) or verl (write a verl config and print its command).")
    ] = "trl",
    run: Annotated[bool, typer.Option(help="With --backend verl: also run verl.trainer.main_ppo.")] = False,
) -> None:
    """Train a rubric generator with GRPO: ``persetrain grpo --config recipes/parl/X.yaml [--any_trl_arg value ...]``.

    Same parser and ``main`` as ``python -m persetrain.train.grpo``; every recipe key can be overridden here.
    """

    if backend == "verl":
        from persetrain.train.verl import main as write_verl

        write_verl(list(ctx.args), run=run)
        return
    if backend != "trl":
        raise ValueError(f"--backend {backend!r}: expected trl or verl")
    from persetrain.train.grpo import run_grpo

    result = run_grpo(list(ctx.args))
    if result.exit_code:  # stopped by SIGTERM / SIGUSR1 after saving a checkpoint: rerun to resume
        raise typer.Exit(code=result.exit_code)


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
    max_per_reviewer: Annotated[int | None, typer.Option(help="At most N examples per reviewer.")] = None,
    max_examples: Annotated[int | None, typer.Option(help="A seeded random sample of N examples.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the sample (default 0).")] = None,
    backend: Annotated[str | None, typer.Option(help="Engine backend: hf (local) or openai (a server).")] = None,
    base_url: BaseUrlOpt = None,
) -> None:
    """Judge a dataset with registered evaluators (`persetrain evaluators` lists them); write metrics and a report."""
    from persetrain.evaluation import EvaluationConfig, apply_options
    from persetrain.evaluation import evaluate as run_evaluation
    from persetrain.evaluators.base import SystemSpec

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
    run_evaluation(run)


@app.command("meta-eval")
def meta_eval(
    data: Annotated[Path, typer.Option(help="A labelled dataset (any layout `evaluate` reads).")],
    out: Annotated[Path, typer.Option(help="Run directory for judgments, metrics, plots and the report.")],
    system: Annotated[
        list[str] | None, typer.Option(help="NAME=EVALUATOR:MODEL, EVALUATOR:MODEL or EVALUATOR (repeatable).")
    ] = None,
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
    max_examples: Annotated[int | None, typer.Option(help="A seeded random sample of N examples.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the sample.")] = 0,
    backend: Annotated[str, typer.Option(help="Engine backend: hf (local) or openai (a server).")] = "hf",
    base_url: BaseUrlOpt = None,
) -> None:
    """Several evaluators on the same labelled data, side by side: agreement, cost, flip rate, manipulation, and
    accuracy with the person removed (blind) or swapped."""
    from persetrain.evaluation import apply_options
    from persetrain.evaluators.base import SystemSpec
    from persetrain.meta_eval import PROBES, MetaEvalConfig, meta_evaluate

    systems = [SystemSpec.parse(s) for s in system or []]
    apply_options(systems, _options(set_))
    meta_evaluate(
        MetaEvalConfig(
            data=str(data),
            out=str(out),
            systems=systems,
            split=split,
            max_examples=max_examples,
            seed=seed,
            backend=backend,
            base_url=base_url,
            probes=list(probe or PROBES),
        )
    )


@app.command("evaluators")
def evaluators_cmd() -> None:
    """List the registered evaluators, the task kinds each judges and its options."""
    import dataclasses

    from persetrain.evaluators.base import registered

    for name, cls in registered().items():
        options = ", ".join(
            f"{f.name}={f.default!r}" for f in dataclasses.fields(cls.Config) if f.default is not dataclasses.MISSING
        )
        model = "model" if cls.needs_model else "no model"
        typer.echo(f"{name}  [{', '.join(cls.tasks)}; {model}]  {options}")


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/demo"),
    model: ModelOpt = DEFAULT_MODEL,
) -> None:
    """Run the main job end to end on the embedded model and write its results to the run directory."""
    from persetrain.demo import run_demo

    run_demo(out, model=model)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(help="Training recipe (recipes/**/*.yaml).")] = None,
    accelerate_config: Annotated[Path | None, typer.Option(help="Instead of the recipe's accelerate_config.")] = None,
    num_processes: Annotated[int | None, typer.Option(help="World size (the global batch stays the recipe's).")] = None,
    trainer: Annotated[str | None, typer.Option(help="sft, grpo or rm; default: from the recipe's keys.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Print the command (--slurm: write the script), run nothing.")] = False,
    slurm: Annotated[bool, typer.Option(help="Submit a Slurm batch job instead of running here.")] = False,
    partition: Annotated[str | None, typer.Option(help="Slurm partition; default: the cluster's.")] = None,
    nodes: Annotated[int, typer.Option(help="Slurm nodes (GRPO with a vLLM server: one of them serves).")] = 1,
    gpus_per_node: Annotated[int | None, typer.Option(help="Default: the accelerate config's processes.")] = None,
    cpus_per_task: Annotated[int | None, typer.Option(help="CPUs of the one task per node.")] = None,
    mem: Annotated[str | None, typer.Option(help="Memory per node, e.g. 200G (0: all).")] = None,
    time: Annotated[str | None, typer.Option(help="Time limit, e.g. 1-00:00:00.")] = None,
    job_name: Annotated[str | None, typer.Option(help="Default: the recipe's file name.")] = None,
    log_dir: Annotated[Path, typer.Option(help="Where the script and the job's log go.")] = Path("runs/slurm"),
    env_activate: Annotated[
        str | None,
        typer.Option(help="Shell line that activates the environment; default: source this venv's bin/activate."),
    ] = None,
    signal_seconds: Annotated[
        int, typer.Option(help="USR1 this long before the time limit: checkpoint, requeue.")
    ] = 300,
    template: Annotated[Path | None, typer.Option(help="Own sbatch Jinja template (see launch/).")] = None,
    sbatch_arg: Annotated[
        list[str] | None, typer.Option(help="Extra #SBATCH line, e.g. --account=nlp or --qos=high (repeatable).")
    ] = None,
    status: Annotated[str | None, typer.Option(help="Show a Slurm job's state and exit.")] = None,
    logs: Annotated[str | None, typer.Option(help="Print a Slurm job's log and exit.")] = None,
) -> None:
    """Run a recipe with ``accelerate launch`` (``torchrun`` for several CPU processes) or as a Slurm job.

    Arguments after ``--`` override recipe keys: ``persetrain launch --config R -- --max_steps 10``.
    """
    from persetrain.launch import LaunchError, local_command, plan_launch, run
    from persetrain.launch import slurm as slurm_jobs

    if status or logs:
        if status:
            for key, value in slurm_jobs.status(status).items():
                typer.echo(f"{key}: {value}")
        if logs:
            typer.echo(slurm_jobs.read_log(logs), nl=False)
        return
    if config is None:
        raise LaunchError("--config RECIPE is required (or --status JOB / --logs JOB)")
    if slurm:
        options = slurm_jobs.SlurmOptions(
            job_name=job_name,
            partition=partition,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            cpus_per_task=cpus_per_task,
            mem=mem,
            time=time,
            log_dir=log_dir,
            env_activate=env_activate,
            signal_seconds=signal_seconds,
            template=template,
            extra_sbatch=list(sbatch_arg or []),
        )
        plan = slurm_jobs.plan_slurm(
            config,
            options,
            accelerate_config=accelerate_config,
            num_processes=num_processes,
            trainer=trainer,
            overrides=ctx.args,
            check_data=not dry_run,
        )
        for note in plan.notes:
            typer.echo(f"note: {note}")
        script = slurm_jobs.write_script(
            slurm_jobs.render_sbatch(plan, options), options, options.job_name or plan.recipe_path.stem
        )
        if dry_run:
            typer.echo(f"wrote {script} (not submitted)")
            return
        job = slurm_jobs.submit(script, partition)
        typer.echo(
            f"submitted job {job} (script {script}); follow it with `persetrain launch --status {job}` "
            f"and `persetrain launch --logs {job}`"
        )
        return
    plan = plan_launch(
        config,
        accelerate_config=accelerate_config,
        num_processes=num_processes,
        trainer=trainer,
        overrides=ctx.args,
        check_data=not dry_run,
    )
    command = local_command(plan)
    for note in command.notes:
        typer.echo(f"note: {note}")
    typer.echo(command.shell())
    if not dry_run:
        raise typer.Exit(code=run(command))


@app.command()
def push(
    path: Annotated[Path, typer.Argument(help="A checkpoint / run directory, or (--dataset) a prepared dataset.")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repository, e.g. user/perse-7b.")],
    dataset: Annotated[bool, typer.Option(help="PATH is a dataset written by `persetrain prepare`.")] = False,
    merge: Annotated[bool, typer.Option(help="Fold a PEFT adapter into its base and push full weights.")] = False,
    metrics: Annotated[
        Path | None,
        typer.Option(
            help="metrics.json of its evaluation, tabled in the card; default: PATH/metrics.json when present."
        ),
    ] = None,
    recipe: Annotated[Path | None, typer.Option(help="The recipe it was trained with, quoted in the card.")] = None,
    private: Annotated[bool, typer.Option(help="Create the repository private.")] = False,
    revision: Annotated[str | None, typer.Option(help="Branch to push to (created when missing).")] = None,
    license: Annotated[str, typer.Option(help="License in the card.")] = "apache-2.0",
    method: Annotated[
        str | None,
        typer.Option(
            help="Method cited in the card: perse, parl, rm or verifier; default: rm for a reward model, else perse."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Where the upload folder is built; default runs/push/REPO.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Build the exact upload folder and stop.")] = False,
) -> None:
    """Push a checkpoint (full, adapter or --merge) or a prepared dataset to the Hub with a generated card.

    The token comes from HF_TOKEN or `hf auth login` and is never printed; HF_ENDPOINT points elsewhere.
    """
    from persetrain.hub import describe_folder
    from persetrain.hub import push as push_to_hub

    result = push_to_hub(
        path,
        repo_id,
        dataset=dataset,
        merge=merge,
        metrics=metrics,
        recipe=recipe,
        private=private,
        revision=revision,
        license=license,
        method=method,
        out=out,
        dry_run=dry_run,
    )
    for line in describe_folder(result.folder):
        typer.echo(f"  {line}")
    if result.commit_url is None:
        typer.echo(f"dry run: {result.folder} is what {result.repo_type} repo {repo_id} would receive")
    else:
        typer.echo(f"pushed {result.folder} to {result.repo_type} repo {repo_id}: {result.commit_url}")


if __name__ == "__main__":
    sys.exit(app())
