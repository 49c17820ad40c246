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

from persetrain.launch.plan import LaunchPlan


@dataclass
class LaunchCommand:
    """A command line plus the environment variables it adds, and what was adjusted to build it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

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
    argv = ["accelerate", "launch", "--config_file", str(plan.accelerate_config_path)]
    if plan.num_processes != int(plan.accelerate_config.get("num_processes") or 1):
        argv += ["--num_processes", str(plan.num_processes)]
    return LaunchCommand([*argv, "-m", plan.module, *plan.trainer_args], {}, list(plan.notes))


def run(command: LaunchCommand) -> int:
    """Run ``command`` with this interpreter's scripts first on PATH; forward SIGTERM/SIGINT/SIGUSR1 to it.

    Forwarding lets a scheduler's preemption signal reach the trainer, which saves a checkpoint on SIGUSR1.
    """
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, **command.env, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}
    proc = subprocess.Popen(command.argv, env=env)
    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    previous = {sig: signal.signal(sig, lambda s, _f: proc.send_signal(s)) for sig in forwarded}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
