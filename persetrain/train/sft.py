"""Supervised fine-tuning of a PerSE judge with TRL's ``SFTTrainer``.

``persetrain sft --config recipes/perse/<recipe>.yaml [--key value ...]`` delegates to :func:`run_sft`.
The dataset is TRL's conversational prompt-completion format (``prompt`` = chat messages, ``completion``
= one assistant message), so TRL masks the prompt and the loss covers the judge's answer only
(``[Review] ... [Score] n``, or ``Plot A``/``Plot B``). Full fine-tuning is the paper's setting; LoRA
and QLoRA go through PEFT with the same recipe keys as TRL's scripts.

What this module adds to TRL, and why:

- **Precision from the hardware.** TRL defaults to ``bf16=True``; on a CPU without native bf16 that makes
  a step >10x slower than fp32. The hardware's choice (``persetrain.models.best_dtype``) becomes the
  default that a recipe or flag can still override.
- **Logits only where there is a label** (:class:`CompletionOnlySFTTrainer`): the largest single cost of
  a small model's step outside the transformer blocks.
- **Per-sequence attention for packed rows** (``attn_implementation: packed_sdpa``,
  :func:`packed_sdpa_attention`): exact like ``sdpa``, without computing the masked-out blocks.
- **A self-describing, resumable output directory**: the resolved configuration, a JSONL log of every
  logged record, automatic resumption from the newest checkpoint, and a final model + tokenizer that
  ``persetrain.models.load_model(output_dir)`` loads (for LoRA: a merged copy under ``merged/``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import json
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from datasets import Dataset, load_from_disk
from transformers import AttentionInterface, TrainerCallback
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from trl import SFTConfig, SFTTrainer

from persetrain.io import InputError, write_json
from persetrain.models import best_device, best_dtype, load_tokenizer, local_weights_dir
from persetrain.train.recipe import DataArguments, ModelArguments, PeftArguments, RecipeError, parse_recipe

METRICS_FILE = "metrics.jsonl"
RESOLVED_CONFIG_FILE = "resolved_config.json"
MERGED_DIR = "merged"
PACKED_SDPA = "packed_sdpa"


def packed_sdpa_attention(module, query, key, value, attention_mask, **kwargs):
    """SDPA run once per packed sequence: variable-length attention without flash-attn.

    Why: a padding-free batch is one row holding several sequences. Plain ``sdpa`` stays exact by
    giving the kernel a block-diagonal ``L x L`` mask, but with an explicit mask the kernel computes
    every block of the square, and it repeats the key/value heads for GQA. Attending within each
    sequence instead, with ``is_causal=True``, does the causal half of each diagonal block only: on
    a CPU, 2x less attention time for a 1,024-token row of two sequences. This is what
    ``flash_attention_2`` does with the collator's ``cu_seq_lens_q`` on a GPU; here the boundaries come
    from the same keyword. Batches without them (padded batches, generation) take the plain path.
    """
    cu_seq_lens = kwargs.get("cu_seq_lens_q")
    if cu_seq_lens is None or query.shape[0] != 1 or query.shape[2] != key.shape[2]:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    bounds = cu_seq_lens.tolist()
    kwargs["is_causal"] = True
    pieces = [
        sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, **kwargs)[0]
        for s, e in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return torch.cat(pieces, dim=1), None


AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(PACKED_SDPA, sdpa_mask)


@dataclass
class SFTScriptArguments:
    """Switches of a ``persetrain sft`` run that belong to neither TRL, the model nor the data."""

    auto_resume: bool = field(
        default=True,
        metadata={"help": "Resume from the newest checkpoint-N in output_dir when there is one, so rerunning "
                          "an interrupted command continues it. `resume_from_checkpoint` takes precedence."},
    )
    completion_logits_only: bool = field(
        default=True,
        metadata={"help": "Project onto the vocabulary only the positions whose next token carries a label "
                          "(see CompletionOnlySFTTrainer). Off: TRL's own loss."},
    )
    merge_adapter: bool = field(
        default=True,
        metadata={"help": "After LoRA training on an unquantised base, also write the merged full model to "
                          "<output_dir>/merged, which persetrain.models.load_model can load."},
    )
    num_threads: int | None = field(
        default=None,
        metadata={"help": "torch.set_num_threads for CPU training; default: torch's choice (physical cores). "
                          "On a machine other jobs share, fewer threads than cores avoid stalls at every op."},
    )
    retain_freed_memory: bool = field(
        default=True,
        metadata={"help": "CPU training under glibc: keep freed memory in the process (see "
                          "retain_freed_memory()) so that each step reuses the last step's pages."},
    )


SFT_ARGUMENT_TYPES = (ModelArguments, DataArguments, PeftArguments, SFTScriptArguments, SFTConfig)


@dataclass
class SFTArguments:
    """Everything one SFT run is made of, as parsed from a recipe plus command-line overrides."""

    model: ModelArguments
    data: DataArguments
    peft: PeftArguments
    script: SFTScriptArguments
    training: SFTConfig


@dataclass
class SFTResult:
    """Where a finished run put its outputs, and how it went."""

    output_dir: Path
    model_dir: Path  # what persetrain.models.load_model should be given
    resumed_from: str | None
    global_step: int
    metrics: dict[str, float]


def sft_defaults() -> dict[str, Any]:
    """Defaults that depend on the machine and replace TRL's before the recipe is applied.

    bf16/fp16 follow ``best_dtype``; pinned memory only helps host-to-GPU copies; wandb reports when it is
    installed (offline unless ``WANDB_MODE`` says otherwise, see :func:`build_sft_trainer`).
    """
    device = best_device()
    dtype = best_dtype(device)
    return {
        "bf16": dtype == torch.bfloat16,
        "fp16": dtype == torch.float16,
        "dataloader_pin_memory": device.type == "cuda",
        "report_to": ["wandb"] if importlib.util.find_spec("wandb") is not None else ["none"],
    }


def parse_sft_args(argv: Sequence[str] | None = None) -> SFTArguments:
    """Parse ``[--config recipe.yaml] [--key value ...]`` (``sys.argv[1:]`` when ``argv`` is None)."""
    model, data, peft, script, training = parse_recipe(
        SFT_ARGUMENT_TYPES, argv, defaults=sft_defaults(), prog="persetrain sft"
    )
    return SFTArguments(model=model, data=data, peft=peft, script=script, training=training)


def run_sft(argv: Sequence[str] | None = None) -> SFTResult:
    """The ``persetrain sft`` entry point: parse a recipe and flags, then train."""
    return train_sft(parse_sft_args(argv))


class CompletionOnlySFTTrainer(SFTTrainer):
    """``SFTTrainer`` whose loss projects only the labelled positions onto the vocabulary.

    Why: a PerSE prompt (profile of K reviews + the query plot) is 300-900 tokens and the completion
    (review + score) a few dozen to ~150, so most positions carry no label. Every position still pays
    the LM head: a ``vocab x hidden`` matmul in forward and two in backward, plus softmax passes over a
    ``tokens x vocab`` logits tensor. For SmolLM2-135M (49152 x 576, tied) that is 21% of the model's
    training FLOPs and a 200 MB logits tensor per 1k tokens. TRL 1.x's fused LM head skips unlabelled
    positions only on Triton devices (CUDA/XPU); elsewhere it scores every position, and its backward
    recomputes the projection once more.

    How: the labelled next-token positions become a boolean ``logits_to_keep`` mask, which every
    transformers causal LM applies to the hidden states *before* its LM head. Going through the model's
    own forward (rather than calling the backbone and head separately) keeps PEFT, DDP and DeepSpeed
    wrappers, whose hooks run in ``forward``, working unchanged. The loss is the same token-level
    negative log-likelihood as TRL's, normalised by ``num_items_in_batch`` like TRL's, and the logged
    ``entropy``/``mean_token_accuracy``/``num_tokens`` keep TRL's meaning.

    Anything this path does not cover (DFT loss, label smoothing, MoE auxiliary loss, a
    ``compute_loss_func``, tensor/context/sequence parallelism, callers that want the outputs) falls
    back to TRL's ``compute_loss``.
    """

    def __init__(self, *args, completion_logits_only: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.completion_logits_only = completion_logits_only

    def _slices_logits(self) -> bool:
        return (
            self.completion_logits_only
            and self.args.loss_type == "nll"
            and self.label_smoother is None
            and self.compute_loss_func is None
            and not self.aux_loss_enabled
            and self.accelerator.parallelism_config is None
        )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs or not self._slices_logits():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train" if self.model.training else "eval"
        labels = inputs["labels"]
        # Position t is scored on the token at t + 1; the last position predicts nothing.
        targets = F.pad(labels[:, 1:], (0, 1), value=-100)
        keep = targets != -100
        forward_inputs = {k: v for k, v in inputs.items() if k != "labels"}
        # use_cache=False also lets transformers see packed sequences in position_ids and build their
        # block-diagonal mask (it skips that detection when a cache exists).
        outputs = model(**forward_inputs, use_cache=False, logits_to_keep=keep)
        logits = outputs.logits
        n_kept = int(keep.sum())
        if logits.dim() != 2 or logits.size(0) != n_kept:
            raise RuntimeError(
                f"{type(self.accelerator.unwrap_model(model)).__name__} ignored the boolean `logits_to_keep` mask "
                f"(logits {tuple(logits.shape)} for {n_kept} labelled positions); "
                "set completion_logits_only: false for this model."
            )
        log_probs = logits.float().log_softmax(-1)
        kept_targets = targets[keep]
        nll = F.nll_loss(log_probs, kept_targets, reduction="sum")
        denominator = keep.sum() if num_items_in_batch is None else num_items_in_batch
        # Clamped so that a batch without labelled tokens gives a finite zero, as in TRL.
        loss = nll / torch.as_tensor(denominator, device=nll.device).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # num_items_in_batch counts every rank's tokens while DDP averages gradients over ranks.
            loss = loss * self.accelerator.num_processes
        self._log_token_metrics(mode, inputs, log_probs.detach(), kept_targets)
        return loss

    def _log_token_metrics(self, mode: str, inputs: dict, log_probs: torch.Tensor, targets: torch.Tensor) -> None:
        """The per-token metrics TRL logs, from the kept positions only (the others carry no label)."""
        gather = self.accelerator.gather_for_metrics
        n_valid = gather(torch.tensor(targets.numel(), device=targets.device)).sum()
        entropy = gather(-(log_probs.exp() * log_probs).sum()).sum()
        correct = gather((log_probs.argmax(-1) == targets).sum()).sum()
        self._metrics[mode]["entropy"].append((entropy / n_valid).item() if n_valid > 0 else 0.0)
        self._metrics[mode]["mean_token_accuracy"].append((correct / n_valid).item() if n_valid > 0 else 0.0)
        if mode == "train":
            # Every token in the batch went through forward and backward: that is what throughput counts.
            if "attention_mask" in inputs:
                local = inputs["attention_mask"].sum()
            else:
                local = torch.tensor(inputs["position_ids"].size(1), device=inputs["position_ids"].device)
            self._total_train_tokens += int(gather(local).sum())
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]


class JsonlMetricsCallback(TrainerCallback):
    """Append every logged record to ``<output_dir>/metrics.jsonl``, flushed at once.

    The log outlives the process: an interrupted run keeps what it logged, and a resumed run appends
    after it (a ``train_begin`` record marks where, with the step it resumed at). Unlike wandb or
    TensorBoard it needs nothing to read: one JSON object per line.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def _append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self._append({"event": "train_begin", "step": state.global_step, "max_steps": state.max_steps,
                          "time": time.time()})

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self._append({"event": "log", "step": state.global_step, "epoch": state.epoch, "time": time.time(),
                          **logs})


def retain_freed_memory() -> bool:
    """Make glibc keep freed memory in the process instead of handing it back to the OS.

    Why: a CPU training step allocates and frees the same large buffers (activations, logits,
    gradients: GBs) every step. glibc serves big blocks with a fresh ``mmap`` and unmaps them on
    ``free``, so every step page-faults its working set in again and the kernel zeroes it: ~10% of a
    step of the embedded model on 2 cores went to that. Serving all blocks from the heap and never
    trimming it lets each step reuse the pages of the last. The process then holds its peak memory
    until it exits, which a training process reaches every step anyway. Returns whether it applied
    (glibc only; elsewhere the allocator is left alone).
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
    return bool(libc.mallopt(m_mmap_max, 0)) and bool(libc.mallopt(m_trim_threshold, 2**31 - 1))


def _load_splits(data: DataArguments, want_eval: bool, seed: int) -> tuple[Dataset, Dataset | None]:
    """The train (and, when evaluating, test) split as prompt-completion datasets.

    A row limit takes a seeded random subset, not the first rows: prepared splits are grouped by
    reviewer, and the first N rows would hold only a few reviewers' tastes.
    """
    if data.dataset_path is None:
        raise RecipeError("dataset_path is not set: put it in the recipe or pass --dataset_path DIR")
    path = Path(data.dataset_path)
    if not path.is_dir():
        raise InputError(path, "no such dataset directory (write one with `persetrain prepare`)")
    loaded = load_from_disk(str(path))
    splits = {"train": loaded} if isinstance(loaded, Dataset) else dict(loaded)

    def pick(split: str, limit: int | None) -> Dataset:
        if split not in splits:
            raise InputError(path, f"no split '{split}' (has: {', '.join(splits)})")
        ds = splits[split]
        missing = {"prompt", "completion"} - set(ds.column_names)
        if missing:
            raise InputError(path, f"split '{split}' lacks column(s) {sorted(missing)}: SFT needs TRL's "
                                   f"prompt-completion format (has: {', '.join(ds.column_names)})")
        ds = ds.select_columns(["prompt", "completion"])
        if limit is None or limit >= len(ds):
            return ds
        return ds.shuffle(seed=seed).select(range(limit))

    train = pick(data.dataset_train_split, data.max_train_samples)
    evaluation = pick(data.dataset_test_split, data.max_eval_samples) if want_eval else None
    return train, evaluation


def _torch_dtype(name: str) -> torch.dtype:
    """``auto`` → bf16 where the hardware computes in it, else fp32.

    fp16 hardware gets fp32 weights: fp16 training keeps fp32 master weights and autocasts, and the
    Trainer refuses to unscale fp16 gradients.
    """
    if name == "auto":
        return torch.bfloat16 if best_dtype(best_device()) == torch.bfloat16 else torch.float32
    if name not in {"float32", "bfloat16", "float16"}:
        raise RecipeError(f"dtype '{name}': expected auto, float32, bfloat16 or float16")
    return getattr(torch, name)


def _peft_configs(peft: PeftArguments, compute_dtype: torch.dtype):
    """``(LoraConfig | None, BitsAndBytesConfig | None)`` from the recipe's PEFT keys."""
    if not peft.use_peft:
        if peft.load_in_4bit or peft.load_in_8bit:
            raise RecipeError("load_in_4bit/load_in_8bit need use_peft: a quantised base can only train adapters")
        return None, None
    from peft import LoraConfig

    lora = LoraConfig(
        r=peft.lora_r,
        lora_alpha=peft.lora_alpha,
        lora_dropout=peft.lora_dropout,
        target_modules=peft.lora_target_modules or "all-linear",
        modules_to_save=peft.lora_modules_to_save,
        use_rslora=peft.use_rslora,
        use_dora=peft.use_dora,
        task_type="CAUSAL_LM",
    )
    quantization = None
    if peft.load_in_4bit or peft.load_in_8bit:
        from transformers import BitsAndBytesConfig

        quantization = BitsAndBytesConfig(
            load_in_4bit=peft.load_in_4bit,
            load_in_8bit=peft.load_in_8bit,
            bnb_4bit_quant_type=peft.bnb_4bit_quant_type,
            bnb_4bit_use_double_quant=peft.use_bnb_nested_quant,
            bnb_4bit_compute_dtype=compute_dtype,
        )
    return lora, quantization


def _environment(model_dtype: torch.dtype) -> dict[str, Any]:
    import accelerate
    import datasets
    import peft
    import transformers
    import trl

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(best_device()),
        "model_dtype": str(model_dtype).removeprefix("torch."),
        "torch_threads": torch.get_num_threads(),
        "versions": {m.__name__: m.__version__ for m in (torch, transformers, trl, peft, accelerate, datasets)},
    }


def _checkpoint_to_resume(args: SFTArguments) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    if args.training.resume_from_checkpoint:
        return args.training.resume_from_checkpoint
    output_dir = Path(args.training.output_dir)
    if args.script.auto_resume and output_dir.is_dir():
        return get_last_checkpoint(str(output_dir))
    return None


def build_sft_trainer(
    args: SFTArguments, callbacks: Sequence[TrainerCallback] = ()
) -> tuple[CompletionOnlySFTTrainer, torch.dtype]:
    """The trainer a run uses (data loaded, model and tokenizer resolved), and the weights' dtype.

    Split from :func:`train_sft` so that benchmarks time exactly what a recipe runs.
    """
    training = args.training
    if args.script.num_threads:
        torch.set_num_threads(args.script.num_threads)
    if args.script.retain_freed_memory and training.device.type == "cpu":
        retain_freed_memory()
    if "wandb" in (training.report_to or []):
        # A training node is often offline; an offline run can be synced later with `wandb sync`.
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_DIR", str(training.output_dir))

    train_dataset, eval_dataset = _load_splits(args.data, want_eval=training.eval_strategy != "no",
                                               seed=training.seed)
    model_dtype = _torch_dtype(args.model.dtype)
    lora, quantization = _peft_configs(args.peft, compute_dtype=best_dtype(best_device()))
    # TRL loads the model from a path (so that its DeepSpeed/device-map handling applies); the user's own
    # model_init_kwargs win over the ones derived from the recipe's model keys.
    training.model_init_kwargs = {
        "dtype": model_dtype,
        "attn_implementation": args.model.attn_implementation,
        "revision": args.model.model_revision,
        **(training.model_init_kwargs or {}),
    }
    trainer = CompletionOnlySFTTrainer(
        model=str(local_weights_dir(args.model.model_name_or_path)),
        args=training,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=load_tokenizer(args.model.model_name_or_path),
        peft_config=lora,
        quantization_config=quantization,
        callbacks=list(callbacks),
        completion_logits_only=args.script.completion_logits_only,
    )
    return trainer, model_dtype


def train_sft(args: SFTArguments) -> SFTResult:
    """Train, save the final model and tokenizer, and return where they are."""
    output_dir = Path(args.training.output_dir)
    trainer, model_dtype = build_sft_trainer(args, [JsonlMetricsCallback(output_dir / METRICS_FILE)])
    resume = _checkpoint_to_resume(args)
    if trainer.is_world_process_zero():
        write_json(output_dir / RESOLVED_CONFIG_FILE, {
            "model": asdict(args.model),
            "data": asdict(args.data),
            "peft": asdict(args.peft),
            "script": asdict(args.script),
            "training": trainer.args.to_dict(),
            "resume_from_checkpoint": resume,
            "environment": _environment(model_dtype),
        })

    result = trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(str(output_dir))  # model (or adapter) + tokenizer
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()

    model_dir = output_dir
    quantized = args.peft.load_in_4bit or args.peft.load_in_8bit
    # Merging needs the whole unquantised weights in one process: not under DeepSpeed (ZeRO-3 shards them).
    if (args.peft.use_peft and args.script.merge_adapter and not quantized
            and not trainer.is_deepspeed_enabled and trainer.is_world_process_zero()):
        model_dir = output_dir / MERGED_DIR
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(str(model_dir))
        trainer.processing_class.save_pretrained(str(model_dir))
    trainer.end()
    return SFTResult(output_dir=output_dir, model_dir=model_dir, resumed_from=resume,
                     global_step=trainer.state.global_step, metrics=dict(result.metrics))


if __name__ == "__main__":  # `accelerate launch ... -m persetrain.train.sft --config RECIPE` needs a module to run
    run_sft()
