"""A launch plan: a recipe checked against its accelerate config, its trainer, world size and batch arithmetic.

A recipe names the accelerate config it was tuned for (key ``accelerate_config``), and that config's
``num_processes`` fixes the world the recipe's global batch was tuned on: ``per_device_train_batch_size x
gradient_accumulation_steps x num_processes``. Launching on another number of processes keeps that global
batch by rescaling ``gradient_accumulation_steps`` (an optimizer step then sees the same number of
examples, so the learning rate and schedule still fit); a world size that does not divide it is an error.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from persetrain.launch.checks import config_problems
from persetrain.launch.inputs import LaunchError, override_value, read_yaml_mapping, recipe_value, resolve_relative

#: trainer name -> the module with its ``make_parser()`` and ``main()``
TRAINERS = {"sft": "persetrain.train.sft", "grpo": "persetrain.train.grpo", "rm": "persetrain.train.rm"}
# Keys only TRL's GRPOConfig has (SFTConfig has none of them). Listed rather than computed from the two
# dataclasses because importing TRL takes seconds, and rendering a command should not.
GRPO_ONLY_KEYS = frozenset(
    {
        "num_generations",
        "reward_funcs",
        "reward_weights",
        "use_vllm",
        "vllm_mode",
        "max_completion_length",
        "beta",
        "num_iterations",
        "generation_batch_size",
    }
)
# Keys only persetrain's RMConfig (TRL's RewardConfig) has.
RM_ONLY_KEYS = frozenset({"loss", "person_contrast", "contrast_persons", "center_rewards_coefficient"})
# transformers.TrainingArguments defaults, for recipes that leave the batch keys out.
DEFAULT_PER_DEVICE_BATCH = 8
DEFAULT_GRADIENT_ACCUMULATION = 1


@dataclass
class LaunchPlan:
    """What a recipe needs to be launched: its files, trainer, world size and batch arithmetic."""

    recipe_path: Path
    recipe: dict[str, Any]
    trainer: str
    accelerate_config_path: Path
    accelerate_config: dict[str, Any]
    num_processes: int
    overrides: list[str]
    cpu: bool
    notes: list[str] = field(default_factory=list)

    @property
    def module(self) -> str:
        return TRAINERS[self.trainer]

    @property
    def trainer_args(self) -> list[str]:
        """``-m``-module arguments: the recipe, then the overrides (which win)."""
        return ["--config", str(self.recipe_path), *self.overrides]

    @property
    def num_machines(self) -> int:
        return int(self.accelerate_config.get("num_machines") or 1)


def infer_trainer(recipe: dict[str, Any]) -> str:
    if GRPO_ONLY_KEYS & recipe.keys():
        return "grpo"
    return "rm" if RM_ONLY_KEYS & recipe.keys() else "sft"


def _gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def plan_launch(
    recipe_path: str | os.PathLike,
    *,
    accelerate_config: str | os.PathLike | None = None,
    num_processes: int | None = None,
    trainer: str | None = None,
    overrides: Sequence[str] = (),
    cpu: bool | None = None,
    detect_gpu: bool = True,
    check_data: bool = True,
) -> LaunchPlan:
    """Read and check a recipe and its accelerate config; decide the trainer and the world size.

    ``cpu`` None means: the accelerate config's ``use_cpu``, or (with ``detect_gpu``) no GPU on this
    machine for more than one process of a DDP config. A batch job is planned without ``detect_gpu``: the machine that
    submits it is not the one it runs on. ``check_data`` False skips the dataset check (a dry run only
    shows the command).
    """
    recipe_path = Path(recipe_path)
    recipe = read_yaml_mapping(recipe_path, "recipe")
    overrides = list(overrides)
    trainer = trainer or infer_trainer(recipe)
    if trainer not in TRAINERS:
        raise LaunchError(f"unknown trainer '{trainer}' (known: {', '.join(TRAINERS)})")
    named = accelerate_config or recipe_value(recipe, overrides, "accelerate_config")
    if not named:
        raise LaunchError(
            f"{recipe_path}: no 'accelerate_config' key naming the accelerate config it was tuned "
            "for; add one or pass --accelerate-config"
        )
    config_path = resolve_relative(named, recipe_path)
    config = read_yaml_mapping(config_path, "accelerate config")
    problems = config_problems(recipe_path, recipe, overrides, config_path, config)
    if problems:
        raise LaunchError("\n".join(problems))

    tuned_world = _tuned_world(recipe_path, recipe, overrides, config)
    world = num_processes or int(config.get("num_processes") or 1)
    if world < 1:
        raise LaunchError(f"--num-processes must be at least 1, not {world}")
    gpu_ids = str(config.get("gpu_ids", "all"))
    if detect_gpu and gpu_ids != "all" and not _gpu_available():
        raise LaunchError(f"{config_path}: gpu_ids {gpu_ids} names CUDA devices, and this machine has none")
    if cpu is None:
        sharded = config.get("distributed_type") in ("DEEPSPEED", "FSDP")  # GPU-only: never rerouted to torchrun
        cpu = bool(config.get("use_cpu")) or (detect_gpu and world > 1 and not sharded and not _gpu_available())
    if check_data:
        _check_dataset(recipe_path, recipe, overrides)
    plan = LaunchPlan(recipe_path, recipe, trainer, config_path, config, world, overrides, cpu)
    _keep_global_batch(plan, tuned_world)
    return plan


def _tuned_world(recipe_path: Path, recipe: dict[str, Any], overrides: Sequence[str], config: dict[str, Any]) -> int:
    """The world size the recipe's batch keys were tuned for: that of the accelerate config the recipe names.

    A recipe launched with another config (``--accelerate-config``) keeps its global batch: the CPU recipe's
    batch of 4 on one process stays 4 on two ZeRO-3 ranks, not the 8-GPU config's 32.
    """
    named = recipe_value(recipe, overrides, "accelerate_config")
    own = resolve_relative(named, recipe_path) if named else None
    if own is None or not own.is_file():
        return int(config.get("num_processes") or 1)
    return int(read_yaml_mapping(own, "accelerate config").get("num_processes") or 1)


def _check_dataset(recipe_path: Path, recipe: dict[str, Any], overrides: Sequence[str]) -> None:
    """Refuse a missing ``dataset_path`` before any process starts (or a batch job waits in the queue for it).

    The trainer makes the same check with the exact `persetrain prepare` command; this one only fails early.
    """
    dataset = recipe_value(recipe, overrides, "dataset_path")
    if dataset and not Path(str(dataset)).exists():
        source = "--dataset_path" if override_value(overrides, "dataset_path") is not None else "recipe key"
        raise LaunchError(
            f"{recipe_path}: {source} 'dataset_path' names {dataset}, which does not exist; write it "
            f"with `persetrain prepare` (e.g. persetrain prepare perse --raw RAW --out "
            f"{Path(str(dataset)).parent.as_posix()}) or pass -- --dataset_path DIR"
        )


def _keep_global_batch(plan: LaunchPlan, tuned_world: int) -> None:
    """Rescale gradient accumulation so that ``plan.num_processes`` ranks see the recipe's global batch."""
    per_device = int(recipe_value(plan.recipe, plan.overrides, "per_device_train_batch_size", DEFAULT_PER_DEVICE_BATCH))
    accumulation = int(
        recipe_value(plan.recipe, plan.overrides, "gradient_accumulation_steps", DEFAULT_GRADIENT_ACCUMULATION)
    )
    global_batch = per_device * accumulation * tuned_world
    if plan.num_processes == tuned_world:
        return
    if override_value(plan.overrides, "gradient_accumulation_steps") is not None:
        plan.notes.append(
            f"gradient_accumulation_steps {accumulation} given on the command line: global batch "
            f"{per_device * accumulation * plan.num_processes} instead of the recipe's {global_batch}"
        )
        return
    if global_batch % (per_device * plan.num_processes):
        raise LaunchError(
            f"{plan.recipe_path}: {plan.num_processes} processes do not divide the global batch {global_batch} "
            f"(per_device_train_batch_size {per_device} x gradient_accumulation_steps {accumulation} x "
            f"{tuned_world} processes it was tuned for); use a number of processes that divides "
            f"{global_batch // per_device}, or choose another global batch with --gradient_accumulation_steps"
        )
    new_accumulation = global_batch // (per_device * plan.num_processes)
    plan.overrides += ["--gradient_accumulation_steps", str(new_accumulation)]
    plan.notes.append(
        f"gradient_accumulation_steps {accumulation} -> {new_accumulation}: {plan.num_processes} "
        f"processes keep the global batch {global_batch} tuned on {tuned_world}"
    )
