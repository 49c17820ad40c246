"""Supervised fine-tuning of a PerSE judge with TRL's ``SFTTrainer``, in TRL's script pattern.

One parser and one ``main`` serve every way of starting a run::

    persetrain sft --config recipes/perse/<recipe>.yaml [--key value ...]
    python -m persetrain.train.sft --config recipes/perse/<recipe>.yaml [--key value ...]
    accelerate launch --config_file accelerate_configs/<config>.yaml -m persetrain.train.sft --config ...
    torchrun --nproc_per_node 2 -m persetrain.train.sft --config ...

The dataset is TRL's conversational prompt-completion format (``prompt`` = chat messages, ``completion``
= one assistant message), so TRL masks the prompt and the loss covers the judge's answer only
(``[Review] ... [Score] n``, or ``Plot A``/``Plot B``). Full fine-tuning is the paper's setting; LoRA
and QLoRA go through PEFT with TRL's ``ModelConfig`` keys.

What this module adds to TRL, and why:

- **Precision from the hardware** (``persetrain.train.configs``), never TRL's ``bf16=True`` on a CPU.
- **Logits only where there is a label** (:class:`CompletionOnlySFTTrainer`): 1.46x TRL 1.16's own
  path on the same packed rows in ``benchmarks/sft.py`` (TRL's fused ``nll`` head scores every position
  on a CPU). Packed rows need no attention of ours: ``sdpa`` is exact with the position ids TRL's
  padding-free collator writes (a per-sequence SDPA measured 0.95x there, and was removed).
- **A self-describing, resumable output directory**: the resolved configuration, a JSONL log of every
  logged record, resumption from the newest *complete* checkpoint (``persetrain.train.checkpoints``), a
  checkpoint-and-stop on SIGTERM / SIGUSR1 (``persetrain.train.signals``), and a final model + tokenizer
  that ``persetrain.models.load_model(output_dir)`` loads (for LoRA: a merged copy under ``merged/``).
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from datasets import Dataset, load_from_disk
from transformers import TrainerCallback
from trl import SFTTrainer, get_peft_config, get_quantization_config

from persetrain.io import InputError, trim_step_log, write_json
from persetrain.models import best_device, load_tokenizer, local_weights_dir
from persetrain.train.checkpoints import last_complete_checkpoint
from persetrain.train.configs import ModelConfig, ScriptArguments, SFTConfig, resolve_dtype
from persetrain.train.recipe import RecipeError, RecipeParser
from persetrain.train.signals import CheckpointOnSignal, exit_code

METRICS_FILE = "metrics.jsonl"
RESOLVED_CONFIG_FILE = "resolved_config.json"
MERGED_DIR = "merged"


class CompletionOnlySFTTrainer(SFTTrainer):
    """``SFTTrainer`` whose loss projects only the labelled positions onto the vocabulary.

    Why: a PerSE prompt (profile of K reviews + the query plot) is 300-900 tokens and the completion
    (review + score) a few dozen to ~150, so most positions carry no label. Every position still pays
    the LM head: a ``vocab x hidden`` matmul in forward and two in backward, plus softmax passes over a
    ``tokens x vocab`` logits tensor. For SmolLM2-135M (49152 x 576, tied) that is 21% of the model's
    training FLOPs and a 200 MB logits tensor per 1k tokens. TRL 1.x's fused LM head skips unlabelled
    positions only on Triton devices (CUDA/XPU); elsewhere it scores every position, and its backward
    recomputes the projection once more. Measured (``benchmarks/sft.py``, SmolLM2-135M, fp32, 2 CPU
    threads, packed 1,024-token rows): 149.2 trained tokens/s against TRL's 102.4, 1.46x.

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
    TensorBoard it needs nothing to read: one JSON object per line. A resumed run first trims this log and
    the ``step_logs`` (other per-step JSONL files, such as GRPO's reward parts) back to the checkpoint's
    step, so that the steps the killed run computed after it are not there twice.
    """

    def __init__(self, path: str | os.PathLike, step_logs: Sequence[str | os.PathLike] = ()):
        self.path = Path(path)
        self.step_logs = [Path(p) for p in step_logs]

    def _append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=str) + "\n")
            f.flush()

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            for log in (self.path, *self.step_logs):
                trim_step_log(log, state.global_step)
            self._append(
                {
                    "event": "train_begin",
                    "step": state.global_step,
                    "max_steps": state.max_steps,
                    "world_size": args.world_size,
                    "time": time.time(),
                }
            )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self._append({"event": "log", "step": state.global_step, "epoch": state.epoch, "time": time.time(), **logs})


@dataclass
class SFTResult:
    """Where a run put its outputs, and how it ended."""

    output_dir: Path
    model_dir: Path  # what persetrain.models.load_model should be given
    resumed_from: str | None
    global_step: int
    metrics: dict[str, float]
    stopped_by_signal: int | None = None  # the signal that made it checkpoint and stop early

    @property
    def exit_code(self) -> int:
        """0 for a finished run; 128 + signal for one stopped by a signal, as the shell would report it."""
        return 0 if self.stopped_by_signal is None else exit_code(self.stopped_by_signal)


def make_parser(prog: str | None = None) -> RecipeParser:
    """The parser of every SFT entry point (TRL's ``make_parser`` pattern)."""
    return RecipeParser((ScriptArguments, SFTConfig, ModelConfig), prog=prog or "persetrain sft")


def _prepare_command(dataset_path: Path) -> str:
    """The `persetrain prepare` command that writes ``dataset_path``, for the message when it is missing."""
    out = dataset_path.parent.as_posix() or "."
    match = re.fullmatch(r"per_mpst_k(\d+)", dataset_path.name)
    if match or dataset_path.name in {"per_doc", "amazon_books"}:
        k = f" --k {match.group(1)}" if match and match.group(1) != "3" else ""
        return (
            f"persetrain prepare perse --raw RAW --out {out}{k}  (synthetic RAW: persetrain prepare sample --out RAW)"
        )
    return f"persetrain prepare perse --raw RAW --out {out}  (it writes per_mpst_k3, per_doc, amazon_books)"


def _load_splits(script_args: ScriptArguments, want_eval: bool, seed: int) -> tuple[Dataset, Dataset | None]:
    """The train (and, when evaluating, test) split as prompt-completion datasets.

    A row limit takes a seeded random subset, not the first rows: prepared splits are grouped by
    reviewer, and the first N rows would hold only a few reviewers' tastes.
    """
    if script_args.dataset_path is None:
        raise RecipeError("dataset_path is not set: put it in the recipe or pass --dataset_path DIR")
    path = Path(script_args.dataset_path)
    if not path.is_dir():
        raise InputError(
            path,
            f"no such dataset directory (recipe key / flag 'dataset_path'); write it with: {_prepare_command(path)}",
        )
    loaded = load_from_disk(str(path))
    splits = {"train": loaded} if isinstance(loaded, Dataset) else dict(loaded)

    def pick(split: str, limit: int | None) -> Dataset:
        if split not in splits:
            raise InputError(path, f"no split '{split}' (has: {', '.join(splits)})")
        ds = splits[split]
        missing = {"prompt", "completion"} - set(ds.column_names)
        if missing:
            raise InputError(
                path,
                f"split '{split}' lacks column(s) {sorted(missing)}: SFT needs TRL's "
                f"prompt-completion format (has: {', '.join(ds.column_names)})",
            )
        ds = ds.select_columns(["prompt", "completion"])
        if limit is None or limit >= len(ds):
            return ds
        return ds.shuffle(seed=seed).select(range(limit))

    train = pick(script_args.dataset_train_split, script_args.max_train_samples)
    evaluation = pick(script_args.dataset_test_split, script_args.max_eval_samples) if want_eval else None
    return train, evaluation


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


def checkpoint_to_resume(training_args: SFTConfig) -> str | None:
    """``resume_from_checkpoint`` when set, else the newest complete checkpoint when ``auto_resume``."""
    if training_args.resume_from_checkpoint:
        return training_args.resume_from_checkpoint
    if training_args.auto_resume:
        return last_complete_checkpoint(training_args.output_dir)
    return None


def prepare_model_init(training_args, model_args: ModelConfig) -> None:
    """What every trainer settles before TRL loads the model: logging, dtype and ``model_init_kwargs``.

    wandb logs offline unless configured (a training node is often offline; ``wandb sync`` uploads
    later). The dtype follows the hardware. TRL loads the model from a path, so that its DeepSpeed /
    device-map handling applies; the user's own ``model_init_kwargs`` win over the derived ones.
    """
    if "wandb" in (training_args.report_to or []):
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_DIR", str(training_args.output_dir))
    model_args.dtype = str(resolve_dtype(model_args.dtype)).removeprefix("torch.")
    if (model_args.load_in_4bit or model_args.load_in_8bit) and not model_args.use_peft:
        raise RecipeError("load_in_4bit/load_in_8bit need use_peft: a quantised base can only train adapters")
    training_args.model_init_kwargs = {
        "dtype": getattr(torch, model_args.dtype),
        "attn_implementation": model_args.attn_implementation,
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        **(training_args.model_init_kwargs or {}),
    }


def build_sft_trainer(
    script_args: ScriptArguments,
    training_args: SFTConfig,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
) -> CompletionOnlySFTTrainer:
    """The trainer a run uses (data loaded, model and tokenizer resolved).

    Split from :func:`main` so that benchmarks time exactly what a recipe runs.
    """
    train_dataset, eval_dataset = _load_splits(
        script_args, want_eval=training_args.eval_strategy != "no", seed=training_args.seed
    )
    prepare_model_init(training_args, model_args)
    return CompletionOnlySFTTrainer(
        model=str(local_weights_dir(model_args.model_name_or_path)),
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=load_tokenizer(model_args.model_name_or_path),
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        callbacks=list(callbacks),
        completion_logits_only=training_args.completion_logits_only,
    )


def main(
    script_args: ScriptArguments,
    training_args: SFTConfig,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
) -> SFTResult:
    """Train, save the final model and tokenizer, and return where they are."""
    return run_trainer(build_sft_trainer, script_args, training_args, model_args, callbacks)


def run_trainer(
    build: Callable[..., Any],
    script_args: ScriptArguments,
    training_args,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
    step_logs: Sequence[str] = (),
) -> SFTResult:
    """What every persetrain trainer (SFT, GRPO) does around ``build(...)``'s trainer, so they run alike.

    The run resumes from its newest complete checkpoint and records its resolved configuration; the
    ``step_logs`` (file names in the output directory) are trimmed with ``metrics.jsonl`` on resume. A run
    stopped by SIGTERM / SIGUSR1 saves a checkpoint and returns without the final save, so that the
    output directory never looks finished when it is not; rerunning the command resumes it.
    """
    output_dir = Path(training_args.output_dir)
    stop = CheckpointOnSignal()
    resume = checkpoint_to_resume(training_args)
    trainer = build(
        script_args,
        training_args,
        model_args,
        [JsonlMetricsCallback(output_dir / METRICS_FILE, [output_dir / name for name in step_logs]), stop, *callbacks],
    )
    if trainer.is_world_process_zero():
        write_json(
            output_dir / RESOLVED_CONFIG_FILE,
            {
                "script": asdict(script_args),
                "model": asdict(model_args),
                "training": trainer.args.to_dict(),
                "resume_from_checkpoint": resume,
                "environment": _environment(getattr(torch, model_args.dtype)),
            },
        )
    result = trainer.train(resume_from_checkpoint=resume)
    return _finish(trainer, result, output_dir, resume, model_args, training_args, stop.received)


def _finish(
    trainer, result, output_dir: Path, resume: str | None, model_args, training_args, stopped_by_signal: int | None
) -> SFTResult:
    """A run stopped by a signal keeps only its checkpoint (rerunning resumes it). A finished run saves the
    model (or adapter) and tokenizer, metrics and state; a LoRA run also writes a merged copy under
    ``merged/`` - not for quantised weights, and not under DeepSpeed, whose ZeRO-3 shards the weights
    merging needs whole in one process.
    """
    if stopped_by_signal is not None:
        trainer.end()
        return SFTResult(
            output_dir=output_dir,
            model_dir=output_dir,
            resumed_from=resume,
            global_step=trainer.state.global_step,
            metrics=dict(result.metrics),
            stopped_by_signal=stopped_by_signal,
        )
    trainer.save_model(str(output_dir))  # model (or adapter) + tokenizer
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()

    model_dir = output_dir
    quantized = model_args.load_in_4bit or model_args.load_in_8bit
    if (
        model_args.use_peft
        and training_args.merge_adapter
        and not quantized
        and not trainer.is_deepspeed_enabled
        and trainer.is_world_process_zero()
    ):
        model_dir = output_dir / MERGED_DIR
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(str(model_dir))
        trainer.processing_class.save_pretrained(str(model_dir))
    trainer.end()
    return SFTResult(
        output_dir=output_dir,
        model_dir=model_dir,
        resumed_from=resume,
        global_step=trainer.state.global_step,
        metrics=dict(result.metrics),
    )


def run_sft(argv: Sequence[str] | None = None) -> SFTResult:
    """Parse ``[--config recipe.yaml] [--key value ...]`` (``sys.argv[1:]`` when None) and train."""
    return main(*make_parser().parse_args_and_config(argv))


if __name__ == "__main__":
    try:
        sys.exit(run_sft().exit_code)
    except (RecipeError, InputError) as err:
        sys.exit(f"error: {err}")
