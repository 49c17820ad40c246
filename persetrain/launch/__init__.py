"""Launch training recipes: on this machine (``accelerate launch`` / ``torchrun``) or as Slurm batch jobs.

``persetrain launch --config RECIPE`` goes through :mod:`persetrain.launch.accelerate`;
``persetrain launch --slurm ...`` through :mod:`persetrain.launch.slurm`.
"""

from persetrain.launch.accelerate import LaunchCommand, LaunchError, LaunchPlan, local_command, plan_launch, run

__all__ = ["LaunchCommand", "LaunchError", "LaunchPlan", "local_command", "plan_launch", "run"]
