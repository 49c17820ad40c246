"""Argument dataclasses of persetrain's trainers: TRL's own, with persetrain's additions and defaults.

As in alignment-handbook's ``configs.py``, each class subclasses TRL's and only adds or re-defaults
fields, so every TRL / transformers argument stays available under its own name, in a recipe and on
the command line.

Precision is the one default that must not come from a library: TRL defaults to ``bf16=True``, which
on a CPU without native bf16 makes a step >10x slower than fp32. :class:`HardwarePrecision` leaves
``bf16`` / ``fp16`` unset until the config is built, then takes them from the machine
(``persetrain.models.best_dtype``); a recipe or flag that sets them still wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import trl

from persetrain.models import DEFAULT_MODEL, best_device, best_dtype
from persetrain.rewards.registry import rewards_help, unknown_rewards


@dataclass
class HardwarePrecision:
    """Mixin for a ``TrainingArguments`` subclass: unset ``bf16`` / ``fp16`` follow the hardware.

    bf16 where the device computes in it natively (Ampere and later), fp16 on older GPUs, neither on
    a CPU. Host memory is pinned only when there is a GPU to copy to. Without a GPU, ``use_cpu`` is
    set: accelerate makes the ranks of ``torchrun --nproc_per_node N`` one gloo DDP group only when
    told it runs on the CPU (otherwise each rank trains alone on its own copy of the data). As the first
    base of a dataclass, its fields replace the ``TrainingArguments`` fields of the same name.
    """

    bf16: bool | None = field(
        default=None,
        metadata={
            "help": "bf16 mixed precision. Default: on where the hardware computes in bf16 natively "
            "(Ampere and later), off elsewhere (a CPU runs bf16 >10x slower than fp32)."
        },
    )
    fp16: bool | None = field(
        default=None, metadata={"help": "fp16 mixed precision. Default: on for GPUs without bf16, off elsewhere."}
    )
    dataloader_pin_memory: bool | None = field(
        default=None, metadata={"help": "Pin host memory for host-to-GPU copies. Default: on when there is a GPU."}
    )

    def __post_init__(self):
        device = best_device()
        dtype = best_dtype(device)
        if device.type == "cpu":
            self.use_cpu = True
        if self.bf16 is None:
            self.bf16 = dtype == torch.bfloat16 and not self.fp16
        if self.fp16 is None:
            self.fp16 = dtype == torch.float16 and not self.bf16
        if self.dataloader_pin_memory is None:
            self.dataloader_pin_memory = torch.cuda.is_available()
        super().__post_init__()


def resolve_dtype(name: str) -> torch.dtype:
    """A model config's ``dtype``: ``auto`` is bf16 where the hardware computes in it, else fp32.

    fp16 hardware gets fp32 weights: fp16 training keeps fp32 master weights and autocasts, and the
    Trainer refuses to unscale fp16 gradients.
    """
    if name == "auto":
        return torch.bfloat16 if best_dtype(best_device()) == torch.bfloat16 else torch.float32
    return getattr(torch, name)


@dataclass
class ScriptArguments(trl.ScriptArguments):
    """The dataset of a run: TRL's script arguments (``dataset_name`` a Hub id, ``dataset_config``, the split
    names) plus ``dataset_path``, the person column and row limits.

    ``dataset_path`` (or ``dataset_name``) is a folder ``persetrain prepare`` wrote, read as it is, or a user's
    rows in TRL's layouts (``persetrain.rows``, ``persetrain.train.user_rows``; docs/formats.md).
    """

    dataset_path: str | None = field(
        default=None,
        metadata={
            "help": "A folder written by `persetrain prepare` (e.g. data/perse/per_mpst_k3), a saved datasets folder, "
            "a .jsonl / .csv / .parquet file (the split 'train') or a folder of <split>.jsonl / .csv / .parquet "
            "files, with rows in TRL's layouts (docs/formats.md)."
        },
    )
    person_column: str | None = field(
        default=None,
        metadata={
            "help": "Column of a user's rows holding the person (a persona, a stated preference, or a list of earlier "
            "items); default: 'person' when there is one, else the rows train a plain, person-blind model."
        },
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str = field(default="test", metadata={"help": "Split to evaluate on (when eval is on)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use a seeded random N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use a seeded random N eval rows."})


@dataclass
class ModelConfig(trl.ModelConfig):
    """TRL's model arguments (model, dtype, attention, LoRA/QLoRA), re-defaulted for persetrain.

    Full fine-tuning is the paper's setting; LoRA is on with ``use_peft``, on every linear layer
    unless ``lora_target_modules`` says otherwise.
    """

    model_name_or_path: str = field(
        default=DEFAULT_MODEL,
        metadata={
            "help": "A persetrain model spec: 'embedded:<name>', a local model directory, a .gguf file "
            "or a Hub id such as 'meta-llama/Llama-2-7b-chat-hf'."
        },
    )
    dtype: str = field(
        default="auto",
        metadata={
            "help": "Dtype of the loaded weights. 'auto' follows the hardware (not the checkpoint): bfloat16 "
            "where it computes natively (Ampere and later), float32 elsewhere (CPUs; fp16 GPUs "
            "train in fp32 with fp16 autocast).",
            "choices": ["auto", "float32", "bfloat16", "float16"],
        },
    )
    attn_implementation: str = field(
        default="sdpa",
        metadata={
            "help": "Attention kernel ('sdpa', 'eager', 'flash_attention_2', ...). sdpa is "
            "exact for packed, padding-free batches: transformers builds the block-diagonal mask "
            "from the position ids."
        },
    )
    lora_target_modules: list[str] | None = field(
        default_factory=lambda: ["all-linear"],
        metadata={"help": "Modules that get LoRA adapters; 'all-linear' is every linear layer but the LM head."},
    )


@dataclass
class RunSwitches:
    """Mixin of every persetrain trainer config: how a run resumes and what it leaves after LoRA.

    Read by ``persetrain.train.runner``; as a base of a config dataclass, its fields join the config's.
    """

    auto_resume: bool = field(
        default=True,
        metadata={
            "help": "Resume from the newest complete checkpoint-N in output_dir when there is one, so "
            "rerunning an interrupted command continues it. `resume_from_checkpoint` takes "
            "precedence."
        },
    )
    merge_adapter: bool = field(
        default=True,
        metadata={
            "help": "After LoRA training on an unquantised base, also write the merged full model to "
            "<output_dir>/merged, which persetrain.models.load_model can load."
        },
    )


@dataclass
class SFTConfig(HardwarePrecision, RunSwitches, trl.SFTConfig):
    """TRL's ``SFTConfig`` (all of ``TrainingArguments``) plus persetrain's switches.

    Re-defaulted: ``bf16`` / ``fp16`` / ``dataloader_pin_memory`` follow the hardware (see
    :class:`HardwarePrecision`).
    """

    completion_logits_only: bool = field(
        default=True,
        metadata={
            "help": "Project onto the vocabulary only the positions whose next token carries a label "
            "(see persetrain.train.sft.CompletionOnlySFTTrainer). Off: TRL's own loss."
        },
    )
    shared_prefix_packing: bool = field(
        default=False,
        metadata={
            "help": "Pack each batch as a prefix trie: rows whose prompts share a head compute it once "
            "(persetrain.prefix_pack). For data that asks many short questions of one long prompt, "
            "such as the rule verifier's; per_device_train_batch_size still counts rows."
        },
    )

    def __post_init__(self):
        if self.shared_prefix_packing and (self.packing or self.padding_free):
            raise ValueError("shared_prefix_packing packs the batch itself: set packing and padding_free to false")
        super().__post_init__()


@dataclass
class RewardArguments:
    """The rewards of a GRPO run and the reward judge: the engine that scores the PARL and PerSE rewards.

    Apart from the training config, as TRL's scripts keep their script and model arguments apart: these keys say
    what scores a rollout, not how the policy trains (``reward_weights``, which weighs the rewards in the loss, is
    TRL's). The names are ``persetrain.rewards.registry``'s. The reward judge is PARL's rule checker (or a PerSE
    judge); a verdict judge's run, where the policy is the judge, reads none of its keys.
    """

    reward_funcs: list[str] = field(default_factory=lambda: ["parl-a"], metadata={"help": rewards_help()})
    reward_judge_model: str = field(
        default=DEFAULT_MODEL,
        metadata={"help": "Engine model spec of the reward judge (for the openai backend: the served model name)."},
    )
    reward_judge_backend: str = field(
        default="hf", metadata={"help": "Reward judge engine backend.", "choices": ["hf", "openai"]}
    )
    reward_judge_base_url: str | None = field(
        default=None,
        metadata={"help": "Server URL for reward_judge_backend openai, e.g. http://127.0.0.1:8000/v1."},
    )
    reward_judge_cache: str | None = field(
        default=None,
        metadata={
            "help": "SQLite request cache of the reward judge; default <output_dir>/judge-cache.sqlite, so that a "
            "resumed run re-scores nothing it already scored. With several processes, one file each: NAME.rankK.sqlite."
        },
    )

    def __post_init__(self):
        problem = unknown_rewards(self.reward_funcs)
        if problem:
            raise ValueError(problem)


#: The reward judge's keys before they were named for the reward (a verdict judge's run has a judge of its own).
RENAMED_REWARD_KEYS = {
    "judge_model": "reward_judge_model",
    "judge_backend": "reward_judge_backend",
    "judge_base_url": "reward_judge_base_url",
    "judge_cache": "reward_judge_cache",
}
