"""The shipped recipes at a glance (``persetrain recipes``): what each trains, on which model, at what scale.

Everything shown is read from the recipe and the accelerate config it names, so the list cannot drift from the
files: the method is the recipe's folder (``perse``, ``parl``, ``rm``, ``verifier``, ``judge``), the trainer is the
one ``persetrain launch`` would run, the scale is the hardware, sharding and global batch it was tuned for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from persetrain import resources
from persetrain.launch.inputs import recipe_value, resolve_relative
from persetrain.launch.plan import (
    DEFAULT_GRADIENT_ACCUMULATION,
    DEFAULT_PER_DEVICE_BATCH,
    LaunchPlan,
    plan_launch,
)


@dataclass(frozen=True)
class RecipeSummary:
    """One shipped recipe: the name it is launched by and what it trains."""

    name: str  # perse/llama2-7b-chat_per-mpst-k3
    method: str  # the recipe's folder
    trainer: str  # sft, grpo or rm
    model: str
    scale: str  # e.g. "8 GPUs, DeepSpeed ZeRO-3, global batch 32, full weights"


def shipped_recipes() -> list[RecipeSummary]:
    """Every shipped recipe, by name."""
    return [summarize(name) for name in resources.shipped_names(resources.RECIPES)]


def summarize(name: str) -> RecipeSummary:
    plan = plan_launch(name, cpu=False, detect_gpu=False, check_data=False)
    return RecipeSummary(
        name=name,
        method=name.split("/", 1)[0],
        trainer=plan.trainer,
        model=str(plan.recipe.get("model_name_or_path", "")),
        scale=_scale(plan),
    )


def _scale(plan: LaunchPlan) -> str:
    config = plan.accelerate_config
    processes = int(config.get("num_processes") or 1)
    if config.get("use_cpu"):
        hardware = f"CPU, {processes} process{'es' if processes > 1 else ''}"
    else:
        hardware = f"{processes} GPU{'s' if processes > 1 else ''}"
    sharding = {"MULTI_GPU": "DDP", "FSDP": "FSDP", "DEEPSPEED": _deepspeed(plan)}.get(
        str(config.get("distributed_type", "NO"))
    )
    per_device = int(recipe_value(plan.recipe, plan.overrides, "per_device_train_batch_size", DEFAULT_PER_DEVICE_BATCH))
    accumulation = int(
        recipe_value(plan.recipe, plan.overrides, "gradient_accumulation_steps", DEFAULT_GRADIENT_ACCUMULATION)
    )
    lora_rank = plan.recipe.get("lora_r", 16)  # TRL's ModelConfig default
    weights = f"LoRA r {lora_rank}" if plan.recipe.get("use_peft") else "full weights"
    if plan.recipe.get("load_in_4bit"):
        weights = f"Q{weights}"
    parts = [hardware, sharding, f"global batch {per_device * accumulation * processes}", weights]
    return ", ".join(part for part in parts if part)


def _deepspeed(plan: LaunchPlan) -> str:
    """``DeepSpeed ZeRO-N`` (``+ offload``) from the accelerate config's section or the JSON it names."""
    section: dict[str, Any] = plan.accelerate_config.get("deepspeed_config") or {}
    stage, offload = section.get("zero_stage"), section.get("offload_optimizer_device", "none") != "none"
    if section.get("deepspeed_config_file"):
        named = resolve_relative(section["deepspeed_config_file"], plan.accelerate_config_path)
        zero = json.loads(named.read_text(encoding="utf-8")).get("zero_optimization") or {}
        stage = zero.get("stage", stage)
        offload = any(
            (zero.get(part) or {}).get("device", "none") != "none" for part in ("offload_optimizer", "offload_param")
        )
    return f"DeepSpeed ZeRO-{stage}{' + offload' if offload else ''}"
