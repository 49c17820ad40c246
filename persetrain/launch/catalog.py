"""The shipped recipes at a glance (``persetrain recipes``): what each trains, on which model, at what scale.

Everything shown is read from the recipe and the accelerate config it names, so the list cannot drift from the
files: the method is the recipe's folder (``perse``, ``parl``, ``rm``, ``verifier``, ``verdict``), the trainer is the
one ``persetrain launch`` would run, the scale is the hardware, sharding and global batch it was tuned for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from persetrain import resources
from persetrain.config_files import deepspeed_offloads, read_deepspeed_json
from persetrain.launch.inputs import KeyReader
from persetrain.launch.plan import LaunchPlan, plan_launch


@dataclass(frozen=True)
class RecipeSummary:
    """One shipped recipe: the name it is launched by and what it trains."""

    name: str  # perse/llama2-7b-chat_per-mpst-k3
    method: str  # the recipe's folder
    trainer: str  # sft, grpo or rm
    model: str
    scale: str  # e.g. "8 GPUs, DeepSpeed ZeRO-3, global batch 32, full weights"


def shipped_recipes(read_keys: KeyReader) -> list[RecipeSummary]:
    """Every shipped recipe, by name; ``read_keys`` reads its keys with its trainer's parser."""
    return [summarize(name, read_keys) for name in resources.shipped_names(resources.RECIPES)]


def summarize(name: str, read_keys: KeyReader) -> RecipeSummary:
    plan = plan_launch(name, read_keys=read_keys, cpu=False, detect_gpu=False, check_data=False)
    return RecipeSummary(
        name=name,
        method=name.split("/", 1)[0],
        trainer=plan.trainer,
        model=str(plan.value("model_name_or_path") or ""),
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
    per_device = int(plan.value("per_device_train_batch_size"))
    accumulation = int(plan.value("gradient_accumulation_steps"))
    weights = f"LoRA r {plan.value('lora_r')}" if plan.value("use_peft") else "full weights"
    if plan.value("load_in_4bit"):
        weights = f"Q{weights}"
    parts = [hardware, sharding, f"global batch {per_device * accumulation * processes}", weights]
    return ", ".join(part for part in parts if part)


def _deepspeed(plan: LaunchPlan) -> str:
    """``DeepSpeed ZeRO-N`` (``+ offload``) from the accelerate config's section or the JSON it names."""
    section: dict[str, Any] = plan.accelerate_config.get("deepspeed_config") or {}
    stage = section.get("zero_stage")
    if section.get("deepspeed_config_file"):
        _, ds = read_deepspeed_json(section["deepspeed_config_file"], plan.accelerate_config_path)
        stage = (ds.get("zero_optimization") or {}).get("stage", stage)
    offload = deepspeed_offloads(plan.accelerate_config_path, plan.accelerate_config)
    return f"DeepSpeed ZeRO-{stage}{' + offload' if offload else ''}"
