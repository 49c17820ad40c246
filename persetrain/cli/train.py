"""``persetrain rubrics``, ``sft``, ``rm`` and ``grpo``: PARL rubric data and the trainers, which parse their own
arguments (every recipe key and TRL argument passes through, and ``--help`` lists them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from persetrain.cli.common import BackendOpt, BaseUrlOpt, ModelOpt, app, make_engine, renamed_command
from persetrain.console import console
from persetrain.models import DEFAULT_MODEL

if TYPE_CHECKING:
    from persetrain.train.recipe import RecipeParser

rubrics_app = typer.Typer(help="PARL rubrics: induce, validate and score.", no_args_is_help=True)
app.add_typer(rubrics_app, name="rubrics")


def _rubric_examples(data: Path, split: str, max_examples: int | None, command: str) -> list:
    """The first ``max_examples`` users of a split of a dataset `prepare parl` wrote; any other kind is refused."""
    from persetrain.data import read_split

    task, examples = read_split(data, split)
    if task.name != "rubric":
        raise ValueError(f"{data} is a {task.name!r} dataset; {command} needs one `prepare parl` wrote")
    return examples[:max_examples] if max_examples else examples


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
    from persetrain.evaluators.parl import PARLConfig, induce_to_file

    examples = _rubric_examples(data, split, max_examples, "rubrics induce")
    config = PARLConfig(runs=runs, temperature=temperature, max_new_tokens=max_new_tokens, judge_model=judge_model)
    engine = make_engine(model, backend, base_url, out.with_name(out.name + ".cache.sqlite"))
    written = induce_to_file(engine, examples, config, out, seed=seed)
    console.print(f"[green]wrote[/green] rubrics of {len(examples)} users x {runs} run(s) -> {written}")


@rubrics_app.command("warmstart-data")
def rubrics_warmstart_data(
    data: Annotated[Path, typer.Option(help="A dataset `persetrain prepare parl` wrote (parl_<task>).")],
    out: Annotated[Path, typer.Option(help="Output: an SFT dataset (prompt / completion) for `persetrain sft`.")],
    source: Annotated[
        str,
        typer.Option(
            help="induced: the model's own structured-output sets that pass validation; truth: the SYNTHETIC "
            "users' true rules (signatures all their history has), in the judge's training wordings."
        ),
    ] = "induced",
    model: ModelOpt = DEFAULT_MODEL,
    judge_model: Annotated[str | None, typer.Option(help="Judge model spec; default: --model.")] = None,
    split: str = "train",
    runs: Annotated[int, typer.Option(help="Induction runs (induced) or copies per user (truth).")] = 1,
    temperature: float = 0.6,
    max_new_tokens: int = 384,
    max_examples: int | None = None,
    extra_data: Annotated[
        list[Path] | None,
        typer.Option(
            help="truth only: another synthetic dataset `prepare parl` wrote (another sample seed), every user of "
            "which joins (repeatable); never the held-out users."
        ),
    ] = None,
    seed: int = 0,
) -> None:
    """SFT data for GRPO's warm start: rubric sets that pass validation, induced by the model or known true."""
    from persetrain.evaluators.parl import PARLConfig
    from persetrain.train.warmstart import SOURCES, write_warmstart_data

    if source not in SOURCES:
        raise ValueError(f"--source is 'induced' or 'truth', not {source!r}")
    if extra_data and source != "truth":
        raise ValueError("--extra-data needs --source truth: only synthetic users' true rules are known")
    if source == "truth":
        from data_prep.parl.rubrics import write_true_warmstart_data

        counts = write_true_warmstart_data(
            data, split, out, seed=seed, copies=runs, max_examples=max_examples, extra=extra_data or ()
        )
        console.print(f"[green]wrote[/green] {counts['rows']} true rubric sets of {counts['valid']} users -> {out}")
        return
    examples = _rubric_examples(data, split, max_examples, "warmstart-data")
    config = PARLConfig(runs=runs, temperature=temperature, max_new_tokens=max_new_tokens, judge_model=judge_model)
    engine = make_engine(model, "hf", None, out.with_name(out.name + ".cache.sqlite"))
    counts = write_warmstart_data(engine, examples, out, config, seed=seed)
    console.print(
        f"[green]wrote[/green] {counts['valid']} rubric sets -> {out} (valid share "
        f"{counts['valid_share']:.2f} of {counts['sets']} induced under structured output)"
    )


@rubrics_app.command("verifier-accuracy")
def rubrics_verifier_accuracy(
    data: Annotated[Path, typer.Option(help="A dataset `persetrain prepare verifier` wrote.")],
    model: ModelOpt = DEFAULT_MODEL,
    split: str = "validation",
    tau: Annotated[float, typer.Option(help="p(yes) above which a rule counts as satisfied.")] = 0.5,
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    out: Annotated[Path | None, typer.Option(help="Also write the result as JSON here.")] = None,
) -> None:
    """How often PARL's rule verifier (the reward judge) answers labelled (rule, text) checks right: accuracy, yes
    share, per rule."""
    import json

    from persetrain.io import InputError, write_json
    from persetrain.rewards.parl import RubricJudge
    from persetrain.rewards.parl_judge_eval import judge_accuracy
    from persetrain.saved import load_prepared_split

    rows = load_prepared_split(data, split, "persetrain prepare verifier")
    missing = {"task", "rule", "input", "text", "label"} - set(rows.column_names)
    if missing:
        raise InputError(data, f"split '{split}' lacks the columns {sorted(missing)}; write it with prepare verifier")
    result = judge_accuracy(RubricJudge(make_engine(model, backend, base_url, None)), list(rows), tau)
    if out is not None:
        write_json(out, result.as_dict())
    console.print(json.dumps(result.as_dict()))


renamed_command(rubrics_app, "rubrics", "judge-accuracy", "verifier-accuracy")


#: The trainers take every recipe key as a flag and parse their own arguments, ``--help`` included (TRL's parser
#: lists every key with its type, default and help; typer's would list none).
TRAINER_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
HELP_FLAGS = ("-h", "--help")


def _help_if_asked(ctx: typer.Context, make_parser: Callable[[], RecipeParser]) -> None:
    """With ``--help``: the trainer's parser's help and this command's own options, then exit 0.

    The parser's help lists every recipe key by dataclass; with ``--config``, its defaults are the recipe's.
    """
    if not any(flag in ctx.args for flag in HELP_FLAGS):
        return
    parser = make_parser()
    options = [param for param in ctx.command.params if param.param_type_name == "option"]
    if options:
        group = parser.add_argument_group(f"persetrain {ctx.info_name} options", "This command's own, not recipe keys.")
    for option in options:
        flags = [*option.opts, *option.secondary_opts]
        if option.is_flag:
            group.add_argument(*flags, action="store_true", help=option.help)
        else:
            group.add_argument(*flags, metavar=option.name.upper(), default=option.default, help=option.help)
    parser.parse_args_and_config(list(ctx.args))  # prints the help and exits


@app.command(context_settings=TRAINER_CONTEXT)
def sft(ctx: typer.Context) -> None:
    """Fine-tune a judge: persetrain sft --config recipes/perse/X.yaml [--KEY VALUE ...].

    Every recipe key (TRL's SFTConfig and ModelConfig, transformers' TrainingArguments, persetrain's own) is
    also a flag, which overrides the recipe; --help lists them all. Same parser and main as
    python -m persetrain.train.sft.
    """
    from persetrain.train.sft import make_parser, run_sft

    _help_if_asked(ctx, make_parser)
    run_sft(list(ctx.args)).trained_model()  # stopped by a signal: one `stopped:` line, exit 128 + signal


@app.command(context_settings=TRAINER_CONTEXT)
def rm(ctx: typer.Context) -> None:
    """Train a reward model: persetrain rm --config recipes/rm/X.yaml [--KEY VALUE ...].

    TRL's RewardTrainer on pairs, or the listwise one-forward-per-question path on listwise data (persetrain
    prepare preference). Every recipe key is also a flag; --help lists them all. Same parser and main as
    python -m persetrain.train.rm.
    """
    from persetrain.train.rm import make_parser, run_rm

    _help_if_asked(ctx, make_parser)
    run_rm(list(ctx.args)).trained_model()  # stopped by a signal: one `stopped:` line, exit 128 + signal


@app.command(context_settings=TRAINER_CONTEXT)
def grpo(
    ctx: typer.Context,
    backend: Annotated[
        str, typer.Option(help="trl (this process) or verl (write a verl config and print its command).")
    ] = "trl",
    run: Annotated[bool, typer.Option(help="With --backend verl: also run verl.trainer.main_ppo.")] = False,
) -> None:
    """Train a rubric generator with GRPO: persetrain grpo --config recipes/parl/X.yaml [--KEY VALUE ...].

    Every recipe key is also a flag; --help lists them all. Same parser and main as python -m
    persetrain.train.grpo.
    """
    from persetrain.train.grpo import make_parser, run_grpo

    _help_if_asked(ctx, make_parser)
    if backend == "verl":
        from persetrain.train.verl import main as write_verl

        write_verl(list(ctx.args), run=run)
        return
    if backend != "trl":
        raise ValueError(f"--backend {backend!r}: expected trl or verl")
    run_grpo(list(ctx.args)).trained_model()  # stopped by a signal: one `stopped:` line, exit 128 + signal
