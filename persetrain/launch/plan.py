"""A launch plan: a recipe checked against its accelerate config, its trainer, world size and batch arithmetic.

A recipe names the accelerate config it was tuned for (key ``accelerate_config``), and that config's
``num_processes`` fixes the world the recipe's global batch was tuned on: ``per_device_train_batch_size x
gradient_accumulation_steps x num_processes``. Launching on another number of processes keeps that global
batch by rescaling ``gradient_accumulation_steps``, and ``per_device_train_batch_size`` where one rank's share of
the batch is smaller than it (an optimizer step then sees the same number of examples, so the learning rate and
schedule still fit); a world size that does not divide the global batch is an error.

A recipe and an accelerate config are a path or a shipped name (:mod:`persetrain.resources`). The recipe's keys are
read by the trainer's own parser (:mod:`persetrain.launch.inputs`), so that the plan and the trainer see one value
of each; a value of the wrong type fails here, before anything starts or is submitted, with the trainer's own line.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from persetrain import resources
from persetrain.config_files import read_accelerate_config, read_yaml_mapping
from persetrain.io import InputError
from persetrain.launch.checks import config_problems
from persetrain.launch.inputs import KeyReader, LaunchError, RecipeKeys

#: trainer name -> the module with its ``make_parser()`` and ``main()``
TRAINERS = {"sft": "persetrain.train.sft", "grpo": "persetrain.train.grpo", "rm": "persetrain.train.rm"}
# Keys only TRL's GRPOConfig has (SFTConfig has none of them): what picks the trainer whose parser then reads the
# recipe. Listed, as the launcher does not import training (its parsers come through a KeyReader).
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


@dataclass
class LaunchPlan:
    """What a recipe needs to be launched: its files, trainer, world size and batch arithmetic."""

    recipe_path: Path
    #: the recipe's keys as the trainer reads them, overrides included (read again when the plan adds some)
    keys: RecipeKeys
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

    def value(self, key: str) -> Any:
        """A recipe key as the trainer will read it."""
        return self.keys.values.get(key)

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
    read_keys: KeyReader,
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
    machine for more than one process of a DDP config. ``read_keys`` reads the recipe's keys with the trainer's parser
    (``persetrain.train.trainers.recipe_keys``). A batch job is planned without ``detect_gpu``: the machine that
    submits it is not the one it runs on. ``check_data`` False skips the dataset check (for tests of the command
    alone; ``persetrain launch --dry-run`` checks the data as a real launch does).
    """
    recipe_path = resources.recipe_file(recipe_path)
    overrides = list(overrides)
    trainer = trainer or infer_trainer(read_yaml_mapping(recipe_path, "recipe"))
    if trainer not in TRAINERS:
        raise LaunchError(f"unknown trainer '{trainer}' (known: {', '.join(TRAINERS)})")
    keys = read_keys(trainer, ["--config", str(recipe_path), *overrides])
    named = accelerate_config or keys.accelerate_config
    if not named:
        raise LaunchError(
            f"{recipe_path}: no 'accelerate_config' key naming the accelerate config it was tuned "
            "for; add one or pass --accelerate-config"
        )
    config_path, config = read_accelerate_config(named, recipe_path)
    problems = config_problems(recipe_path, keys.values, config_path, config)
    if problems:
        raise LaunchError("\n".join(problems))

    tuned_world = _tuned_world(recipe_path, keys, config)
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
        _check_dataset(recipe_path, keys)
    plan = LaunchPlan(recipe_path, keys, trainer, config_path, config, world, overrides, cpu)
    if _keep_global_batch(plan, tuned_world):
        plan.keys = read_keys(trainer, plan.trainer_args)
    return plan


def _tuned_world(recipe_path: Path, keys: RecipeKeys, config: dict[str, Any]) -> int:
    """The world size the recipe's batch keys were tuned for: that of the accelerate config the recipe names.

    A recipe launched with another config (``--accelerate-config``) keeps its global batch: the CPU recipe's
    batch of 4 on one process stays 4 on two ZeRO-3 ranks, not the 8-GPU config's 32.
    """
    try:
        own = read_accelerate_config(keys.accelerate_config, recipe_path)[1] if keys.accelerate_config else config
    except InputError:  # launched with --accelerate-config instead of a config that is not here
        own = config
    return int(own.get("num_processes") or 1)


def _check_dataset(recipe_path: Path, keys: RecipeKeys) -> None:
    """Refuse a dataset the trainer would refuse, before any process starts (or a batch job waits in the queue for
    it): a ``dataset_path`` that does not exist, is no dataset ``persetrain.rows`` reads (a saved dataset, a table
    file, a folder of split files), or has no split the recipe trains (or, when it evaluates, tests)
    on. The trainer makes the same checks, and checks the columns, once it runs."""
    from persetrain.rows import local_splits, table_format

    dataset = keys.values.get("dataset_path")
    if not dataset:
        return
    path = Path(str(dataset))
    source = "--dataset_path" if "dataset_path" in keys.given else "recipe key"
    if not path.is_dir() and table_format(path) is None:
        raise LaunchError(
            f"{recipe_path}: {source} 'dataset_path' names {dataset}, which "
            f"{'is not a folder (nor a .jsonl / .csv / .parquet file)' if path.exists() else 'does not exist'}; write "
            f"it with `persetrain prepare` (e.g. persetrain prepare perse --raw RAW --out {path.parent.as_posix()}) or "
            "pass -- --dataset_path PATH"
        )
    splits = local_splits(path)
    wanted = {"dataset_train_split": keys.values.get("dataset_train_split", "train")}
    if keys.values.get("eval_strategy", "no") != "no":
        wanted["dataset_test_split"] = keys.values.get("dataset_test_split", "test")
    for key, split in wanted.items():
        if split not in splits:
            raise LaunchError(
                f"{recipe_path}: {key} '{split}' is not a split of {path} (it has: {', '.join(splits)}); pass "
                f"-- --{key} NAME"
            )


def _keep_global_batch(plan: LaunchPlan, tuned_world: int) -> bool:
    """Rescale the batch keys so that ``plan.num_processes`` ranks see the recipe's global batch; True when the plan's
    overrides changed.

    Gradient accumulation takes the change; where one rank's share of the global batch is smaller than the recipe's
    per-device batch (the 13B recipe's 2 x 1 x 8 = 16 on two 8-GPU nodes: 1 each), the per-device batch shrinks too,
    which needs less memory, never more. A per-device batch given on the command line is kept as given.
    """
    recipe = plan.keys.recipe_values  # the batch the recipe was tuned with, before the command line
    tuned_per_device = int(recipe["per_device_train_batch_size"])
    accumulation = int(recipe["gradient_accumulation_steps"])
    global_batch = tuned_per_device * accumulation * tuned_world
    per_device = int(plan.value("per_device_train_batch_size"))
    if plan.num_processes == tuned_world:
        return False
    if "gradient_accumulation_steps" in plan.keys.given:
        given = int(plan.value("gradient_accumulation_steps"))
        plan.notes.append(
            f"gradient_accumulation_steps {given} given on the command line: global batch "
            f"{per_device * given * plan.num_processes} instead of the recipe's {global_batch}"
        )
        return False
    given_per_device = "per_device_train_batch_size" in plan.keys.given
    share, remainder = divmod(global_batch, plan.num_processes)
    if remainder or (given_per_device and share % per_device):
        divisors = ", ".join(str(n) for n in range(1, global_batch + 1) if global_batch % n == 0)
        held = f" of per_device_train_batch_size {per_device} (given on the command line)" if given_per_device else ""
        raise LaunchError(
            f"{plan.recipe_path}: the global batch {global_batch} (per_device_train_batch_size {tuned_per_device} x "
            f"gradient_accumulation_steps {accumulation} x {tuned_world} processes, those of the accelerate config it "
            f"was tuned for) does not split into equal steps{held} over {plan.num_processes} processes; launch on a "
            f"number of processes that divides {global_batch} ({divisors}), or choose this world's global batch "
            f"with -- --gradient_accumulation_steps N (global batch N x {per_device} x {plan.num_processes})"
        )
    new_per_device = per_device if given_per_device else max(n for n in range(1, per_device + 1) if share % n == 0)
    new_accumulation = share // new_per_device
    changes = []
    if new_per_device != per_device:
        plan.overrides += ["--per_device_train_batch_size", str(new_per_device)]
        changes.append(f"per_device_train_batch_size {per_device} -> {new_per_device}")
    if new_accumulation != accumulation:
        plan.overrides += ["--gradient_accumulation_steps", str(new_accumulation)]
        changes.append(f"gradient_accumulation_steps {accumulation} -> {new_accumulation}")
    if changes:
        plan.notes.append(
            f"{', '.join(changes)}: {plan.num_processes} processes keep the global batch {global_batch} "
            f"tuned on {tuned_world}"
        )
    return bool(changes)
