"""Launching a recipe on several processes: which trainer runs it, the CPU command, and config checks.

- :func:`trainer_for_recipe`: a recipe does not name its trainer; the trainer is the one whose
  dataclasses know every key of the recipe (``num_generations`` is GRPO's, ``packing`` SFT's).
- :func:`torchrun_command`: ``accelerate launch --cpu`` runs a single process whatever
  ``--num_processes`` says, while ``torchrun --nproc_per_node N -m persetrain.train.<trainer>`` runs N
  gloo DDP ranks of the same entry point on a CPU.
- :func:`check_launch_config`: a recipe names the accelerate config it was tuned for
  (``accelerate_config``); this reports every way the two, and the DeepSpeed JSON the accelerate config
  names, disagree, before any process starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from persetrain.train.recipe import LAUNCH_KEYS, RecipeError, read_recipe

#: trainer name -> module with ``make_parser()`` and ``main()``
TRAINERS = {"sft": "persetrain.train.sft", "grpo": "persetrain.train.grpo"}

#: accelerate config keys that accelerate refuses next to a ``deepspeed_config_file`` (the JSON holds them)
_DEEPSPEED_JSON_KEYS = ("zero_stage", "offload_optimizer_device", "offload_param_device", "gradient_clipping",
                        "gradient_accumulation_steps", "zero3_save_16bit_model", "offload_param_nvme_path",
                        "offload_optimizer_nvme_path")


def available_trainers() -> dict[str, str]:
    """The trainers whose module exists in this installation."""
    return {name: module for name, module in TRAINERS.items() if importlib.util.find_spec(module) is not None}


def trainer_for_recipe(recipe_path: str | os.PathLike) -> str:
    """The name of the trainer (``sft``, ``grpo``) whose arguments cover every key of the recipe."""
    recipe = read_recipe(recipe_path)
    keys = set(recipe) - set(LAUNCH_KEYS)
    fits = []
    for name, module in available_trainers().items():
        known = importlib.import_module(module).make_parser().known_keys()
        if keys <= known:
            fits.append(name)
    if len(fits) != 1:
        what = "no trainer knows all its keys" if not fits else f"its keys fit several trainers ({', '.join(fits)})"
        raise RecipeError(f"{recipe_path}: cannot tell which trainer runs this recipe: {what}")
    return fits[0]


def torchrun_command(recipe: str | os.PathLike, num_processes: int, *, trainer: str | None = None,
                     extra_args: list[str] | None = None, master_port: int | None = None) -> list[str]:
    """The command that runs ``recipe`` as ``num_processes`` DDP ranks on one machine (gloo on a CPU).

    torchrun is taken from the running interpreter's environment, so the ranks use the same packages.
    ``master_port`` None lets torchrun pick a free port (``--standalone``).
    """
    trainer = trainer or trainer_for_recipe(recipe)
    local = Path(sys.executable).with_name("torchrun")
    torchrun = str(local) if local.exists() else (shutil.which("torchrun") or "torchrun")
    rendezvous = ["--standalone"] if master_port is None else ["--master_addr", "127.0.0.1",
                                                                "--master_port", str(master_port)]
    return [torchrun, *rendezvous, "--nnodes", "1", "--nproc_per_node", str(num_processes),
            "-m", TRAINERS[trainer], "--config", str(recipe), *(extra_args or [])]


def read_accelerate_config(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: accelerate config not found")
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise RecipeError(f"{path}: an accelerate config must be a YAML mapping")
    return config


def read_deepspeed_config(accelerate_config: dict[str, Any], root: Path) -> tuple[Path, dict[str, Any]] | None:
    """The DeepSpeed JSON an accelerate config names (path relative to the launch directory ``root``)."""
    file = (accelerate_config.get("deepspeed_config") or {}).get("deepspeed_config_file")
    if not file:
        return None
    path = root / file
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise RecipeError(f"{path}: cannot read the DeepSpeed config ({err})") from None


def _enabled(value: Any) -> bool | None:
    """A DeepSpeed ``enabled`` value: True/False, or None for "auto" (the recipe decides)."""
    return None if value == "auto" else bool(value)


def check_launch_config(recipe_path: str | os.PathLike, root: str | os.PathLike = ".") -> list[str]:
    """Every disagreement between a recipe, its accelerate config and that config's DeepSpeed JSON.

    Paths in recipes and accelerate configs are relative to ``root``, the directory runs are launched
    from (the repository root). An empty list means the recipe can be launched as it says.
    """
    root = Path(root)
    recipe = read_recipe(recipe_path)
    name = recipe.get("accelerate_config")
    if not name:
        return [f"{recipe_path}: no 'accelerate_config' key naming the accelerate config it was tuned for"]
    config_path = root / name
    if not config_path.is_file():
        return [f"{recipe_path}: accelerate_config '{name}' does not exist"]
    config = read_accelerate_config(config_path)
    problems = []
    where = f"{recipe_path} with {name}"
    kind = config.get("distributed_type", "NO")
    bf16, fp16 = bool(recipe.get("bf16")), bool(recipe.get("fp16"))
    if config.get("use_cpu"):
        if bf16 or fp16:
            problems.append(f"{where}: the recipe asks for {'bf16' if bf16 else 'fp16'} on a CPU config")
    elif kind != "DEEPSPEED":
        precision = config.get("mixed_precision") or "no"
        wanted = "bf16" if bf16 else "fp16" if fp16 else "no"
        if precision != wanted:
            problems.append(f"{where}: mixed_precision '{precision}' but the recipe trains in '{wanted}'")
    if kind == "FSDP" and recipe.get("activation_checkpointing") and \
            (config.get("fsdp_config") or {}).get("fsdp_activation_checkpointing"):
        problems.append(f"{where}: activation checkpointing is on in both the recipe and fsdp_config")
    if kind == "DEEPSPEED":
        problems += _check_deepspeed(recipe, name, config, root, where)
    return problems


def _check_deepspeed(recipe: dict, name: str, config: dict, root: Path, where: str) -> list[str]:
    section = config.get("deepspeed_config") or {}
    found = read_deepspeed_config(config, root)
    if found is None:
        return [f"{where}: a DeepSpeed accelerate config without deepspeed_config_file"]
    json_path, ds = found
    problems = [f"{where}: '{key}' is set in the accelerate config, which accelerate refuses next to "
                f"{json_path.name} (set it there)" for key in _DEEPSPEED_JSON_KEYS if key in section]
    if config.get("mixed_precision") not in (None, "no"):
        problems.append(f"{where}: mixed_precision is set in the accelerate config; {json_path.name}'s bf16/fp16 "
                        "decide it (accelerate refuses both)")
    zero = ds.get("zero_optimization") or {}
    stage = zero.get("stage", 0)
    if bool(section.get("zero3_init_flag")) != (stage == 3):
        problems.append(f"{where}: zero3_init_flag {section.get('zero3_init_flag')} does not fit ZeRO stage {stage} "
                        f"of {json_path.name} (it shards weights at load time, for stage 3 only)")
    # The config's file name states what it is for (deepspeed_zero3_offload.yaml): the JSON must do that.
    named = re.search(r"zero(\d)(_offload)?", Path(name).stem)
    if named and int(named.group(1)) != stage:
        problems.append(f"{where}: named for ZeRO-{named.group(1)} but {json_path.name} sets stage {stage}")
    offloads = [part for part in ("offload_optimizer", "offload_param")
                if (zero.get(part) or {}).get("device", "none") != "none"]
    if named and bool(named.group(2)) != bool(offloads):
        problems.append(f"{where}: {'named' if named.group(2) else 'not named'} for offload but {json_path.name} "
                        f"offloads {', '.join(offloads) or 'nothing'}")
    for key, precision in (("bf16", recipe.get("bf16")), ("fp16", recipe.get("fp16"))):
        enabled = _enabled((ds.get(key) or {}).get("enabled", False))
        if enabled is not None and enabled != bool(precision):
            problems.append(f"{where}: {json_path.name} sets {key}.enabled {enabled}, the recipe {key} {precision}")
    for ds_key, recipe_key in (("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
                               ("gradient_accumulation_steps", "gradient_accumulation_steps"),
                               ("gradient_clipping", "max_grad_norm")):
        value = ds.get(ds_key, "auto")
        if value != "auto" and recipe_key in recipe and value != recipe[recipe_key]:
            problems.append(f"{where}: {json_path.name} sets {ds_key} {value}, the recipe {recipe_key} "
                            f"{recipe[recipe_key]}")
    return problems
