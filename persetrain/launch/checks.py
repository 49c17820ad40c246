"""Every way a recipe and the accelerate config it is launched with disagree, found before any process starts."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from persetrain.config_files import OFFLOAD_PARTS, read_deepspeed_json

#: accelerate config keys that accelerate refuses next to a ``deepspeed_config_file`` (the JSON holds them)
_DEEPSPEED_JSON_KEYS = (
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "gradient_clipping",
    "gradient_accumulation_steps",
    "zero3_save_16bit_model",
    "offload_param_nvme_path",
    "offload_optimizer_nvme_path",
)


def _enabled(value: Any) -> bool | None:
    """A DeepSpeed ``enabled`` value: True/False, or None for "auto" (the recipe decides)."""
    return None if value == "auto" else bool(value)


def config_problems(
    recipe_path: Path, recipe_values: Mapping[str, Any], config_path: Path, config: dict[str, Any]
) -> list[str]:
    """Every way a recipe (its keys as the trainer reads them, command-line overrides included) and its accelerate
    config disagree.

    Launched together, a mismatch either fails deep inside accelerate or DeepSpeed after the processes
    started, or silently trains with one of the two settings; so all of them are reported at once, each
    naming the files, before anything starts. An unreadable DeepSpeed JSON is an :class:`InputError`.
    """

    def value(key: str) -> Any:
        return recipe_values.get(key)

    where = f"{recipe_path} with {config_path}"
    distributed = str(config.get("distributed_type", "NO"))
    ds_section = config.get("deepspeed_config") or {}
    recipe_json = value("deepspeed")
    bf16, fp16 = bool(value("bf16")), bool(value("fp16"))
    problems = []
    if config.get("use_cpu"):
        if bf16 or fp16:
            problems.append(
                f"{where}: the recipe trains in {'bf16' if bf16 else 'fp16'}, which a CPU config "
                "cannot honour (pass --bf16 false --fp16 false)"
            )
    elif distributed != "DEEPSPEED" and (value("bf16") is not None or value("fp16") is not None):
        # A recipe that leaves precision unset trains in the hardware's (the launch passes it to accelerate).
        precision = config.get("mixed_precision") or "no"
        wanted = "bf16" if bf16 else "fp16" if fp16 else "no"
        if precision != wanted:
            problems.append(f"{where}: mixed_precision '{precision}' but the recipe trains in '{wanted}'")
    if (
        distributed == "FSDP"
        and value("activation_checkpointing")
        and (config.get("fsdp_config") or {}).get("fsdp_activation_checkpointing")
    ):
        problems.append(f"{where}: activation checkpointing is on in both the recipe and fsdp_config")
    if distributed != "DEEPSPEED":
        if ds_section:
            problems.append(
                f"{config_path}: has a deepspeed_config section but distributed_type is "
                f"{distributed}; set distributed_type: DEEPSPEED or remove the section"
            )
        if recipe_json:
            problems.append(
                f"{recipe_path}: 'deepspeed' names a DeepSpeed config ({recipe_json}) but the "
                f"accelerate config {config_path} runs distributed_type {distributed}; launch with "
                "a DeepSpeed accelerate config (accelerate_configs/deepspeed_zero*.yaml)"
            )
        return problems
    return problems + _deepspeed_problems(recipe_path, value, config_path, config, where)


def _deepspeed_problems(
    recipe_path: Path, value: Callable[[str], Any], config_path: Path, config: dict[str, Any], where: str
) -> list[str]:
    """The DeepSpeed part of :func:`config_problems`; ``value(key)`` is a recipe key with its overrides."""
    section = config.get("deepspeed_config") or {}
    stages: dict[str, int] = {}
    if "zero_stage" in section:
        stages[f"{config_path} (zero_stage)"] = int(section["zero_stage"])
    jsons = []
    if section.get("deepspeed_config_file"):
        jsons.append(read_deepspeed_json(section["deepspeed_config_file"], config_path))
    recipe_json = value("deepspeed")
    if isinstance(recipe_json, str):
        jsons.append(read_deepspeed_json(recipe_json, recipe_path))
    elif isinstance(recipe_json, dict):
        jsons.append((recipe_path, recipe_json))
    if not jsons and not stages:
        return [f"{where}: a DeepSpeed accelerate config with neither zero_stage nor deepspeed_config_file"]
    problems = []
    if section.get("deepspeed_config_file"):
        json_name = jsons[0][0].name
        problems += [
            f"{where}: '{key}' is set in the accelerate config, which accelerate refuses next to "
            f"{json_name} (set it there)"
            for key in _DEEPSPEED_JSON_KEYS
            if key in section
        ]
        if config.get("mixed_precision") not in (None, "no"):
            problems.append(
                f"{where}: mixed_precision is set in the accelerate config; {json_name}'s bf16/fp16 "
                "decide it (accelerate refuses both)"
            )
    for path, ds in jsons:
        zero = ds.get("zero_optimization") or {}
        if isinstance(zero.get("stage"), int):
            stages[str(path)] = zero["stage"]
        if zero.get("stage", 0) not in (0, 1, 2, 3):
            problems.append(f"{path}: zero_optimization.stage {zero['stage']!r}: DeepSpeed's ZeRO stages are 0-3")
        for part in OFFLOAD_PARTS:
            device = (zero.get(part) or {}).get("device", "none")
            if device not in ("none", "cpu", "nvme"):
                problems.append(
                    f"{path}: zero_optimization.{part}.device {device!r}: DeepSpeed offloads to cpu or nvme"
                )
        for key in ("bf16", "fp16"):
            enabled = _enabled((ds.get(key) or {}).get("enabled", False))
            if enabled is not None and enabled != bool(value(key)):
                problems.append(f"{where}: {path.name} sets {key}.enabled {enabled}, the recipe {key} {value(key)}")
        for ds_key, recipe_key in (
            ("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
            ("gradient_accumulation_steps", "gradient_accumulation_steps"),
            ("gradient_clipping", "max_grad_norm"),
        ):
            given, wanted = ds.get(ds_key, "auto"), value(recipe_key)
            if given != "auto" and wanted is not None and given != wanted:
                problems.append(f"{where}: {path.name} sets {ds_key} {given}, the recipe {recipe_key} {wanted}")
    if len(set(stages.values())) > 1:
        listed = ", ".join(f"{name}: stage {stage}" for name, stage in stages.items())
        return [f"DeepSpeed ZeRO stages disagree: {listed}", *problems]
    stage = next(iter(stages.values()), 0)
    if "zero3_init_flag" in section and bool(section["zero3_init_flag"]) != (stage == 3):
        problems.append(
            f"{where}: zero3_init_flag {section['zero3_init_flag']} does not fit ZeRO stage {stage} "
            "(it shards weights at load time, for stage 3 only)"
        )
    # A config's file name states what it is for (deepspeed_zero3_offload.yaml): its settings must do that.
    named = re.search(r"zero(\d)(_offload)?", config_path.stem)
    if named and int(named.group(1)) != stage:
        problems.append(f"{where}: named for ZeRO-{named.group(1)} but sets stage {stage}")
    offloads = sorted(
        {
            part
            for _, ds in jsons
            for part in OFFLOAD_PARTS
            if ((ds.get("zero_optimization") or {}).get(part) or {}).get("device", "none") != "none"
        }
        | {part for part in OFFLOAD_PARTS if section.get(f"{part}_device", "none") != "none"}
    )
    if named and bool(named.group(2)) != bool(offloads):
        problems.append(
            f"{where}: {'named' if named.group(2) else 'not named'} for offload but offloads "
            f"{', '.join(offloads) or 'nothing'}"
        )
    return problems
