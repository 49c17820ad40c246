"""``persetrain launch``: a recipe run here (``accelerate launch`` / ``torchrun``) or as a Slurm job (``--slurm``);
``persetrain recipes``: the shipped recipes it can run by name."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from persetrain.cli.common import app

if TYPE_CHECKING:
    from persetrain.launch.slurm import SlurmOptions


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def launch(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option(
            help="Training recipe: a YAML path or a shipped name (perse/llama2-7b-chat_per-mpst-k3; see recipes)."
        ),
    ] = None,
    accelerate_config: Annotated[
        str | None,
        typer.Option(
            help="Instead of the recipe's accelerate_config: a YAML path or a shipped name (deepspeed_zero3)."
        ),
    ] = None,
    num_processes: Annotated[int | None, typer.Option(help="World size (the global batch stays the recipe's).")] = None,
    trainer: Annotated[str | None, typer.Option(help="sft, grpo or rm; default: from the recipe's keys.")] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Check as a launch does, print the command (--slurm: write the script), run nothing.")
    ] = False,
    slurm: Annotated[bool, typer.Option(help="Submit a Slurm batch job instead of running here.")] = False,
    partition: Annotated[str | None, typer.Option(help="Slurm partition; default: the cluster's.")] = None,
    nodes: Annotated[int, typer.Option(help="Slurm nodes (GRPO with a vLLM server: one of them serves).")] = 1,
    gpus_per_node: Annotated[
        int | None, typer.Option(help="Default: the accelerate config's processes; 0: no GPUs (CPU ranks).")
    ] = None,
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

    Arguments after ``--`` override recipe keys: ``persetrain launch --config R -- --max_steps 10``. A dry run
    checks what a launch checks (the files, the batch, the dataset), all but the cluster itself (sbatch, the
    partition), which the machine writing the script may not reach.
    """
    if status or logs:
        _report_job(status, logs)
        return
    if config is None:
        from persetrain.launch import LaunchError

        raise LaunchError("--config RECIPE is required (or --status JOB / --logs JOB)")
    if not slurm:
        _run_here(config, accelerate_config, num_processes, trainer, list(ctx.args), dry_run=dry_run)
        return
    from persetrain.launch.slurm import SlurmOptions

    options = SlurmOptions(
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
    _submit_slurm(config, options, accelerate_config, num_processes, trainer, list(ctx.args), dry_run=dry_run)


def _report_job(status: str | None, logs: str | None) -> None:
    """``--status JOB`` / ``--logs JOB``: what Slurm knows of a submitted job, then its log."""
    from persetrain.launch import slurm as slurm_jobs

    if status:
        for key, value in slurm_jobs.status(status).items():
            typer.echo(f"{key}: {value}")
    if logs:
        typer.echo(slurm_jobs.read_log(logs), nl=False)


def _run_here(
    config: str,
    accelerate_config: str | None,
    num_processes: int | None,
    trainer: str | None,
    overrides: list[str],
    *,
    dry_run: bool,
) -> None:
    """Print the ``accelerate launch`` / ``torchrun`` command of the recipe and, unless ``dry_run``, run it here;
    its exit code becomes ours (a preempted trainer's, too)."""
    from persetrain.launch import local_command, plan_launch, run
    from persetrain.train.trainers import recipe_keys

    plan = plan_launch(
        config,
        read_keys=recipe_keys,
        accelerate_config=accelerate_config,
        num_processes=num_processes,
        trainer=trainer,
        overrides=overrides,
    )
    command = local_command(plan)
    for note in command.notes:
        typer.echo(f"note: {note}")
    typer.echo(command.shell())
    if not dry_run:
        raise typer.Exit(code=run(command))


def _submit_slurm(
    config: str,
    options: SlurmOptions,
    accelerate_config: str | None,
    num_processes: int | None,
    trainer: str | None,
    overrides: list[str],
    *,
    dry_run: bool,
) -> None:
    """Plan the batch job, write its sbatch script next to its logs and, unless ``dry_run``, submit it."""
    from persetrain.launch import slurm as slurm_jobs
    from persetrain.train.trainers import recipe_keys

    plan = slurm_jobs.plan_slurm(
        config,
        options,
        read_keys=recipe_keys,
        accelerate_config=accelerate_config,
        num_processes=num_processes,
        trainer=trainer,
        overrides=overrides,
    )
    for note in plan.notes:
        typer.echo(f"note: {note}")
    script = slurm_jobs.write_script(
        slurm_jobs.render_sbatch(plan, options), options, options.job_name or plan.recipe_path.stem
    )
    if dry_run:
        typer.echo(f"wrote {script} (not submitted)")
        return
    job = slurm_jobs.submit(script, options.partition)
    typer.echo(
        f"submitted job {job} (script {script}); follow it with `persetrain launch --status {job}` "
        f"and `persetrain launch --logs {job}`"
    )


@app.command()
def recipes() -> None:
    """List the shipped recipes: the name launch --config and the trainers take, method and trainer, model, scale."""
    from persetrain.launch.catalog import shipped_recipes
    from persetrain.train.trainers import recipe_keys

    rows = [("recipe", "method", "model", "scale")]
    rows += [(r.name, f"{r.method} / {r.trainer}", r.model, r.scale) for r in shipped_recipes(recipe_keys)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        typer.echo("  ".join([*(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)), row[3]]))
