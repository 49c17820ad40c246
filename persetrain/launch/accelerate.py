"""The command that runs a launch plan on one machine: ``accelerate launch``, or ``torchrun`` on a CPU, and running it.

Two launchers, because of how ``accelerate launch`` treats a CPU: with ``use_cpu`` (or no GPU) it takes
its single-process launcher whatever ``--num_processes`` says, so N > 1 CPU processes go through
``torchrun --standalone --nproc_per_node N``, which starts N gloo DDP ranks. ``ACCELERATE_USE_CPU=true``
(what ``accelerate launch --cpu`` sets) is what makes transformers join them: without it, a CPU-only rank
sees no GPU and no ``use_cpu``, and trains alone on the whole dataset. Each CPU rank gets ``cores / N``
threads (``OMP_NUM_THREADS``) so that the ranks do not oversubscribe the cores; like every process
setting, that belongs to the launch, not to the trainer.

The recipe file is passed on unchanged (``--config RECIPE``): the trainer parses it, and command-line
overrides after it win over its keys exactly as with ``persetrain sft``. The plan itself (world size, batch
rescaling, config checks) is :mod:`persetrain.launch.plan`'s.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from persetrain.config_files import resolve_relative
from persetrain.launch.plan import LaunchPlan
from persetrain.signals import STOP_SIGNALS


@dataclass
class LaunchCommand:
    """A command line plus the environment variables it adds, and what was adjusted to build it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    elastic: bool = True  # started by torch elastic's agent (torchrun; accelerate launch of a distributed config)

    def shell(self) -> str:
        """The command as one shell line, environment assignments first."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return " ".join([*assignments, shlex.join(self.argv)])


def cpu_threads_per_process(num_processes: int) -> int:
    return max(1, (os.cpu_count() or 1) // num_processes)


def local_command(plan: LaunchPlan) -> LaunchCommand:
    """The command that runs ``plan`` on this machine."""
    if plan.cpu and plan.num_processes > 1:
        argv = [
            "torchrun",
            "--standalone",
            "--nproc_per_node",
            str(plan.num_processes),
            "-m",
            plan.module,
            *plan.trainer_args,
        ]
        env = {"ACCELERATE_USE_CPU": "true"}
        if "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(cpu_threads_per_process(plan.num_processes))
        return LaunchCommand(argv, env, list(plan.notes))
    elastic = plan.num_processes > 1 or plan.accelerate_config.get("distributed_type", "NO") != "NO"
    notes: list[str] = []
    argv = ["accelerate", "launch", "--config_file", str(plan.accelerate_config_path)]
    if plan.num_processes != int(plan.accelerate_config.get("num_processes") or 1):
        argv += ["--num_processes", str(plan.num_processes)]
    distributed = plan.accelerate_config.get("distributed_type", "NO")
    if distributed != "DEEPSPEED" and not _recipe_sets_precision(plan):
        configured, hardware = plan.accelerate_config.get("mixed_precision") or "no", hardware_precision()
        if configured != hardware:
            notes = [f"mixed_precision {configured} -> {hardware}: the recipe leaves precision to the hardware"]
            argv += ["--mixed_precision", hardware]
    argv += deepspeed_file_args(plan)
    return LaunchCommand([*argv, "-m", plan.module, *plan.trainer_args], {}, [*plan.notes, *notes], elastic)


def deepspeed_file_args(plan: LaunchPlan) -> list[str]:
    """``--deepspeed_config_file`` with the absolute path of the JSON the accelerate config names, or nothing.

    accelerate reads that path from the working directory, and a launch (or a batch job) may run from anywhere.
    """
    named = (plan.accelerate_config.get("deepspeed_config") or {}).get("deepspeed_config_file")
    if not named:
        return []
    return ["--deepspeed_config_file", str(resolve_relative(named, plan.accelerate_config_path).resolve())]


def _recipe_sets_precision(plan: LaunchPlan) -> bool:
    return any(plan.value(key) is not None for key in ("bf16", "fp16"))


def hardware_precision() -> str:
    """accelerate's ``mixed_precision`` for the dtype this machine trains in (``persetrain.models.best_dtype``).

    Why the launch passes it: an accelerate config's ``mixed_precision`` is written for the GPUs it was tuned on
    (``fsdp.yaml``: bf16); a recipe that leaves precision to the hardware would otherwise autocast to bf16 on a
    CPU, >10x slower than fp32 there.
    """
    import torch

    from persetrain.models import best_device, best_dtype

    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(best_dtype(best_device()), "no")


#: How long a rank may take to save its checkpoint after a stop signal before torch elastic kills it
#: (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``; elastic's own default, 30 s, is too short for a sharded 7B checkpoint).
SHUTDOWN_SECONDS = 300


class LaunchStopped(RuntimeError):
    """Every rank checkpointed and stopped on a signal; ``exit_code`` is 128 + it, as from ``persetrain sft``."""

    def __init__(self, signum: int):
        super().__init__(
            f"every rank stopped on signal {signum} after saving a checkpoint; run the same command to resume"
        )
        self.exit_code = 128 + signum  # as the shell reports a process ended by the signal (signals.exit_code)


class RankFailed(RuntimeError):
    """A rank exited with an error; torch elastic stopped the others. Its own message is in its output above."""

    exit_code = 1


def run(command: LaunchCommand) -> int:
    """Run ``command`` here and return its exit code; a stop signal ends as :class:`LaunchStopped`.

    Several processes (``torchrun``, and ``accelerate launch`` of a DeepSpeed, FSDP or multi-GPU config) are
    started by torch elastic's agent *in this process*, so that this process is the ranks' parent: SIGTERM and
    SIGINT (Ctrl-C) reach every rank through the agent, SIGUSR1 through this process (the agent leaves it to its
    default action, which would kill the launcher alone); each rank saves a checkpoint and stops, and the outcome
    comes back here as an exception read into one line, not as the agent's traceback.
    A rank whose launcher is killed outright dies with it (``persetrain.signals.die_with_parent``).
    One process without a distributed config runs as a child that receives the same signals.
    """
    os.environ.update(command.env)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    if command.argv[:2] == ["accelerate", "launch"] and not command.elastic:
        return _run_child(command.argv, STOP_SIGNALS)
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", str(SHUTDOWN_SECONDS))
    import psutil
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    def to_ranks(signum: int, _frame) -> None:  # the agent passes on TERM and INT itself, not USR1
        for rank in psutil.Process().children():
            rank.send_signal(signum)

    signal.signal(signal.SIGUSR1, to_ranks)
    try:
        if command.argv[0] == "torchrun":
            from torch.distributed.run import parse_args
            from torch.distributed.run import run as torchrun

            torchrun(parse_args(command.argv[1:]))
        else:
            from accelerate.commands.launch import launch_command, launch_command_parser

            launch_command(launch_command_parser().parse_args(command.argv[2:]))
    except SignalException as stop:
        raise LaunchStopped(stop.sigval) from None
    except SystemExit as exited:
        # accelerate's launcher ends an agent stopped by a signal as sys.exit(128 + signal), after the agent has
        # passed the signal on and every rank has checkpointed and exited
        if isinstance(exited.code, int) and exited.code - 128 in STOP_SIGNALS:
            raise LaunchStopped(exited.code - 128) from None
        raise
    except ChildFailedError as failed:
        codes = {rank: failure.exitcode for rank, failure in sorted(failed.failures.items())}
        stops = {code - 128 for code in codes.values()} & set(STOP_SIGNALS)
        # Signalled directly (Slurm's `scancel --signal`, USR1 here): the first rank out made the agent end the
        # others, which may then show its SIGTERM (a negative code) instead of their own stop.
        if stops and all(code - 128 in stops or code < 0 for code in codes.values()):
            raise LaunchStopped(min(stops)) from None
        described = "; ".join(
            f"rank {rank} (pid {failed.failures[rank].pid}) exited with {_exit_status(code)}"
            for rank, code in codes.items()
        )
        raise RankFailed(f"{described}; torch elastic stopped the other ranks (each rank's error is above)") from None
    return 0


def _exit_status(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"code {code}"


def _run_child(argv: list[str], stop_signals: tuple[int, ...]) -> int:
    """One process: run it as a child and pass it the stop signals, which its trainer acts on."""
    proc = subprocess.Popen(argv)
    previous = {sig: signal.signal(sig, lambda s, _f: proc.send_signal(s)) for sig in stop_signals}
    try:
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if code - 128 in stop_signals:
        raise LaunchStopped(code - 128)
    return code
