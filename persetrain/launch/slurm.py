"""Slurm batch jobs for training recipes: render an sbatch script, submit it, report on it.

The scripts come from the Jinja templates in the repository's ``launch/`` folder, which the wheel ships too
(:func:`persetrain.resources.sbatch_templates`): one node, several nodes; the several-node one also holds the
GRPO + vLLM layout. What they do, and why:

- **One ``srun`` task per node runs the launcher** (``accelerate launch``, or ``torchrun`` on CPUs, see
  :mod:`persetrain.launch.accelerate`). Several nodes meet at a static rendezvous on the first node of the
  allocation (``scontrol show hostnames $SLURM_JOB_NODELIST | head -n1``); each node's rank is
  ``\\$SLURM_PROCID``, escaped so that each task's shell expands its own rank (the batch script runs on the
  first node only, where an unescaped ``$SLURM_PROCID`` is 0 for every node).
- **Preemption resumes instead of restarting**: ``--requeue --signal=B:USR1@N`` sends USR1 to the batch
  script N seconds before the time limit (a site's preemption or ``scancel --signal=USR1 --batch JOB`` does
  the same); its handler signals the training step, whose trainers save a checkpoint and exit, and requeues
  the job. The requeued run finds the newest checkpoint in the recipe's ``output_dir`` and resumes there.
- **GRPO with vLLM rollouts in server mode** takes the alignment-handbook's layout: the last node runs
  ``trl vllm-serve``, the others train and reach it through ``--vllm_server_host``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from persetrain.io import InputError
from persetrain.launch.accelerate import deepspeed_file_args
from persetrain.launch.inputs import KeyReader, LaunchError
from persetrain.launch.plan import LaunchPlan, plan_launch
from persetrain.resources import sbatch_templates

DEFAULT_PORT = 29500
VLLM_PORT = 8000


@dataclass
class SlurmOptions:
    """The job's resources and bookkeeping; None leaves a setting to the cluster's defaults."""

    job_name: str | None = None
    partition: str | None = None
    nodes: int = 1
    gpus_per_node: int | None = None  # default: the accelerate config's processes per machine; 0: request none
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    log_dir: Path = Path("runs/slurm")
    env_activate: str | None = None  # default: activate the virtual environment persetrain runs from
    signal_seconds: int = 300
    port: int = DEFAULT_PORT
    template: Path | None = None
    extra_sbatch: list[str] = field(default_factory=list)


class _Raw(str):
    """A piece of the launch command that the batch shell must see as written (a variable reference)."""


def _double_quoted(parts: Sequence[str]) -> str:
    """Join command-line words for the inside of ``bash -c "..."``.

    Static words are shell-quoted for the inner shell, then ``\\ " $ `` and backticks escaped so that the
    outer double quotes pass them through; :class:`_Raw` words are written as they are.
    """
    words = []
    for part in parts:
        if isinstance(part, _Raw):
            words.append(str(part))
        else:
            words.append(re.sub(r'([\\"$`])', r"\\\1", shlex.quote(part)))
    return " ".join(words)


def default_env_activation() -> str | None:
    """``source <venv>/bin/activate`` for the virtual environment this interpreter belongs to."""
    activate = Path(sys.prefix) / "bin" / "activate"
    return f"source {shlex.quote(str(activate))}" if sys.prefix != sys.base_prefix and activate.exists() else None


def _uses_vllm_server(plan: LaunchPlan) -> bool:
    return plan.trainer == "grpo" and bool(plan.value("use_vllm")) and plan.value("vllm_mode") == "server"


def plan_slurm(
    recipe_path: str | os.PathLike,
    options: SlurmOptions,
    *,
    read_keys: KeyReader,
    accelerate_config: str | os.PathLike | None = None,
    num_processes: int | None = None,
    trainer: str | None = None,
    overrides: Sequence[str] = (),
    check_data: bool = True,
) -> LaunchPlan:
    """The launch plan of a batch job: its world size is ``training nodes x processes per node``.

    Processes per node: ``--gpus-per-node``, else the accelerate config's processes per machine. Whether
    the job runs on CPUs comes from the accelerate config alone (``use_cpu``), never from the machine
    that submits it. ``num_processes`` (the whole job's) overrides both.
    """
    first = plan_launch(
        recipe_path,
        read_keys=read_keys,
        accelerate_config=accelerate_config,
        trainer=trainer,
        overrides=overrides,
        detect_gpu=False,
        check_data=check_data,
    )
    if options.nodes < 1:
        raise LaunchError(f"--nodes must be at least 1, not {options.nodes}")
    vllm = _uses_vllm_server(first)
    if vllm and options.nodes < 2:
        raise LaunchError(
            f"{first.recipe_path}: GRPO with vllm_mode: server needs --nodes 2 or more (one node "
            "serves vLLM, the others train); or set vllm_mode: colocate"
        )
    training_nodes = options.nodes - 1 if vllm else options.nodes
    per_node = options.gpus_per_node or max(1, first.num_processes // first.num_machines)
    world = num_processes or per_node * training_nodes
    if world % training_nodes:
        raise LaunchError(f"{world} processes do not split evenly over {training_nodes} training node(s)")
    return plan_launch(
        recipe_path,
        read_keys=read_keys,
        accelerate_config=accelerate_config,
        num_processes=world,
        trainer=trainer,
        overrides=overrides,
        cpu=first.cpu,
        check_data=check_data,
    )


def render_sbatch(plan: LaunchPlan, options: SlurmOptions) -> str:
    """The sbatch script that runs ``plan`` (from :func:`plan_slurm`) on ``options.nodes`` nodes."""
    vllm = _uses_vllm_server(plan)
    training_nodes = options.nodes - 1 if vllm else options.nodes
    per_node = plan.num_processes // training_nodes
    trainer_args = list(plan.trainer_args)
    if vllm:
        trainer_args += ["--vllm_server_host", _Raw("$VLLM_NODE"), "--vllm_server_port", str(VLLM_PORT)]
    env, cpus_per_task = _cpu_settings(plan, options, per_node)
    launch = _double_quoted([*_launcher(plan, options.nodes, per_node), "-m", plan.module, *trainer_args])
    return _template(options).render(
        trainer=plan.trainer,
        recipe=str(plan.recipe_path),
        launch=launch,
        vllm=vllm,
        vllm_model=shlex.quote(str(plan.value("model_name_or_path") or "")),
        vllm_port=VLLM_PORT,
        job_name=options.job_name or plan.recipe_path.stem,
        partition=options.partition,
        nodes=options.nodes,
        gpus_per_node=0 if plan.cpu or options.gpus_per_node == 0 else per_node,
        cpus_per_task=cpus_per_task,
        mem=options.mem,
        time=options.time,
        log_dir=Path(options.log_dir).resolve(),
        workdir=Path.cwd(),
        signal_seconds=options.signal_seconds,
        extra_sbatch=options.extra_sbatch,
        port=options.port,
        processes_per_node=per_node,
        env=env,
        env_activate=options.env_activate if options.env_activate is not None else default_env_activation(),
    )


def _cpu_settings(plan: LaunchPlan, options: SlurmOptions, per_node: int) -> tuple[dict[str, str], int | None]:
    """The job's extra environment and ``--cpus-per-task``: on CPUs, the node's cores shared among its ranks."""
    if not plan.cpu:
        return {}, options.cpus_per_task
    env = {
        "OMP_NUM_THREADS": f"$(( ${{SLURM_CPUS_PER_TASK:-{per_node}}} / {per_node} ))",
        "ACCELERATE_USE_CPU": "true",  # torchrun's CPU ranks join one gloo group only with it
    }
    return env, options.cpus_per_task or os.cpu_count() or 1


def _launcher(plan: LaunchPlan, nodes: int, per_node: int) -> list[str]:
    """The launcher words before ``-m MODULE``: ``torchrun`` for several CPU processes, else ``accelerate launch``;
    on several nodes, each srun task's own rank and the rendezvous on the first node. The rendezvous is static, not
    c10d: c10d lets whichever agent sees the endpoint as its own host serve the store (every node, when the nodes
    share a host, as in the tests), so node 0's launcher can find its port taken, and ignores ``--node_rank``; static
    serves it from node 0 and keeps node i's ranks after node i-1's."""
    multi = nodes > 1
    if plan.cpu and (multi or per_node > 1):
        launcher: list[str] = ["torchrun", "--nproc_per_node", str(per_node)]
        if not multi:
            return [*launcher, "--standalone"]
        return [
            *launcher,
            "--nnodes",
            _Raw("$NNODES"),
            "--node_rank",
            _Raw("\\$SLURM_PROCID"),
            "--rdzv_backend",
            "static",
            "--rdzv_endpoint",
            _Raw("$MAIN_NODE:$MAIN_PORT"),
            "--rdzv_id",
            _Raw("$SLURM_JOB_ID"),
        ]
    launcher = ["accelerate", "launch", "--config_file", str(plan.accelerate_config_path), *deepspeed_file_args(plan)]
    if multi:
        return [
            *launcher,
            "--num_machines",
            _Raw("$NNODES"),
            "--num_processes",
            _Raw("$WORLD_SIZE"),
            "--machine_rank",
            _Raw("\\$SLURM_PROCID"),
            "--main_process_ip",
            _Raw("$MAIN_NODE"),
            "--main_process_port",
            _Raw("$MAIN_PORT"),
            "--rdzv_backend",
            "static",
        ]
    if plan.num_processes != int(plan.accelerate_config.get("num_processes") or 1):
        launcher += ["--num_processes", str(plan.num_processes)]
    return launcher


def _template(options: SlurmOptions) -> jinja2.Template:
    """The user's ``--template`` (which may include the shipped ones), else the shipped one- or several-node one."""
    if options.template is not None:
        if not options.template.is_file():
            raise InputError(options.template, "no such sbatch template")
        loader = jinja2.FileSystemLoader([str(options.template.parent), str(sbatch_templates())])
        name = options.template.name
    else:
        loader = jinja2.FileSystemLoader(str(sbatch_templates()))
        name = "multi_node.sbatch.j2" if options.nodes > 1 else "single_node.sbatch.j2"
    return jinja2.Environment(
        loader=loader, undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    ).get_template(name)


def _slurm_command(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise LaunchError(
            f"`{name}` is not on PATH: run this on a Slurm login node (or install the Slurm client "
            "tools); `persetrain launch --slurm --dry-run` writes the script without submitting it"
        )
    return path


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def check_partition(partition: str) -> None:
    """An unknown partition is refused with the cluster's partitions listed (sbatch's own message lists none)."""
    result = _run([_slurm_command("sinfo"), "-h", "-o", "%R"])
    if result.returncode != 0:
        raise LaunchError(f"sinfo failed: {result.stderr.strip()}")
    known = sorted(set(result.stdout.split()))
    if partition not in known:
        raise LaunchError(f"unknown Slurm partition '{partition}' (this cluster has: {', '.join(known) or 'none'})")


def write_script(script: str, options: SlurmOptions, job_name: str) -> Path:
    """Save the rendered script next to the job logs, where it documents what ran."""
    log_dir = Path(options.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{job_name}.sbatch"
    tmp = path.with_suffix(".sbatch.tmp")
    tmp.write_text(script, encoding="utf-8")
    tmp.replace(path)
    return path


def submit(script_path: Path, partition: str | None = None) -> str:
    """``sbatch`` the script; return the job id."""
    sbatch = _slurm_command("sbatch")
    if partition:
        check_partition(partition)
    result = _run([sbatch, "--parsable", str(script_path)])
    if result.returncode != 0:
        raise LaunchError(f"sbatch {script_path} failed: {result.stderr.strip()}")
    return result.stdout.strip().split(";")[0]


def job_info(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a mapping (it knows running, pending and recently finished jobs)."""
    result = _run([_slurm_command("scontrol"), "show", "job", "--oneliner", str(job_id)])
    if result.returncode != 0:
        raise LaunchError(f"job {job_id}: {result.stderr.strip() or 'unknown to scontrol'}")
    info: dict[str, str] = {}
    for word in result.stdout.split():
        key, _, value = word.partition("=")
        info.setdefault(key, value)
    return info


STATUS_KEYS = (
    "JobId",
    "JobName",
    "JobState",
    "Reason",
    "Restarts",
    "RunTime",
    "TimeLimit",
    "NodeList",
    "Partition",
    "StdOut",
)


def status(job_id: str) -> dict[str, str]:
    info = job_info(job_id)
    return {key: info[key] for key in STATUS_KEYS if key in info}


def log_path(job_id: str) -> Path:
    return Path(job_info(job_id)["StdOut"])


def read_log(job_id: str) -> str:
    path = log_path(job_id)
    if not path.is_file():
        raise InputError(path, f"job {job_id} has not written its log yet (is it still pending?)")
    return path.read_text(encoding="utf-8", errors="replace")
