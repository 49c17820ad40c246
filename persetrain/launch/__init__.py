"""Launch training recipes: on this machine (``accelerate launch`` / ``torchrun``) or as Slurm batch jobs.

``persetrain launch --config RECIPE`` plans the run (:mod:`persetrain.launch.plan`, which reads the recipe's keys
through the trainer's own parser, :mod:`persetrain.launch.inputs`, the files with :mod:`persetrain.config_files`, and
checks them with :mod:`persetrain.launch.checks`) and runs its command
(:mod:`persetrain.launch.accelerate`); ``persetrain launch --slurm ...`` goes through :mod:`persetrain.launch.slurm`.
"""

from persetrain.launch.accelerate import LaunchCommand, local_command, run
from persetrain.launch.inputs import LaunchError
from persetrain.launch.plan import LaunchPlan, plan_launch

__all__ = ["LaunchCommand", "LaunchError", "LaunchPlan", "local_command", "plan_launch", "run"]
