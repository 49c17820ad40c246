"""Supervised fine-tuning of a PerSE judge with TRL's ``SFTTrainer``, in TRL's script pattern.

One parser and one ``main`` serve every way of starting a run::

    persetrain sft --config recipes/perse/<recipe>.yaml [--key value ...]
    python -m persetrain.train.sft --config recipes/perse/<recipe>.yaml [--key value ...]
    accelerate launch --config_file accelerate_configs/<config>.yaml -m persetrain.train.sft --config ...
    torchrun --nproc_per_node 2 -m persetrain.train.sft --config ...

The dataset is TRL's conversational prompt-completion format (``prompt`` = chat messages, ``completion``
= one assistant message), so TRL masks the prompt and the loss covers the judge's answer only
(``[Review] ... [Score] n``, or ``Plot A``/``Plot B``). A user's preference rows in TRL's layout become the
yes / no verifier's rows (``persetrain.train.user_rows``); prompt-completion rows are trained as they are. Full
fine-tuning is the paper's setting; LoRA
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

import re
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import TrainerCallback
from trl import SFTTrainer, get_peft_config, get_quantization_config

from persetrain.models import load_tokenizer, local_weights_dir
from persetrain.prefix_pack import PrefixGroupedSampler, SharedPrefixCollator, attention_mask
from persetrain.train.configs import ModelConfig, ScriptArguments, SFTConfig
from persetrain.train.recipe import RecipeParser
from persetrain.train.runner import RunResult, load_splits, prepare_model_init, run_as_script, run_trainer
from persetrain.train.user_rows import verifier_view


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
        if kwargs["args"].shared_prefix_packing and kwargs.get("data_collator") is None:
            kwargs["data_collator"] = SharedPrefixCollator()
        super().__init__(*args, **kwargs)
        self.completion_logits_only = completion_logits_only

    def _get_train_sampler(self, train_dataset=None):
        if not self.args.shared_prefix_packing:
            return super()._get_train_sampler(train_dataset)
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        return PrefixGroupedSampler(dataset["input_ids"], self.args.per_device_train_batch_size, self.args.seed)

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
        if "tree_mask" in inputs:
            return self._trie_loss(model, inputs, num_items_in_batch)
        if return_outputs or not self._slices_logits():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        labels = inputs["labels"]
        # Position t is scored on the token at t + 1; the last position predicts nothing.
        targets = F.pad(labels[:, 1:], (0, 1), value=-100)
        keep = targets != -100
        forward_inputs = {k: v for k, v in inputs.items() if k != "labels"}
        # use_cache=False also lets transformers see packed sequences in position_ids and build their
        # block-diagonal mask (it skips that detection when a cache exists).
        outputs = model(**forward_inputs, use_cache=False, logits_to_keep=keep)
        logits = self._checked(model, outputs.logits, keep)
        return self._nll(logits, targets[keep], inputs, num_items_in_batch)

    def _trie_loss(self, model, inputs, num_items_in_batch):
        """The loss of a :func:`persetrain.prefix_pack.prefix_trie` batch: one forward over the trie, each
        (row, completion token) read from the logits of the position that predicts it."""
        ids, positions = inputs["input_ids"], inputs["label_positions"]
        keep = torch.zeros_like(ids, dtype=torch.bool)
        keep[0, positions] = True
        unwrapped, depths = self.accelerator.unwrap_model(model), inputs["position_ids"]
        outputs = model(
            input_ids=ids,
            position_ids=depths,
            attention_mask=attention_mask(inputs["tree_mask"], depths, depths, unwrapped.config, unwrapped.dtype),
            use_cache=False,
            logits_to_keep=keep,
        )
        # Kept positions come back in position order; a position that predicts several labels is read for each.
        logits = self._checked(model, outputs.logits, keep)[keep[0].cumsum(0)[positions] - 1]
        return self._nll(logits, inputs["labels"][0], inputs, num_items_in_batch)

    def _checked(self, model, logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``logits`` as ``[kept positions, vocab]``, or one line naming the model that ignored the mask."""
        n_kept = int(keep.sum())
        if logits.dim() != 2 or logits.size(0) != n_kept:
            raise RuntimeError(
                f"{type(self.accelerator.unwrap_model(model)).__name__} ignored the boolean `logits_to_keep` mask "
                f"(logits {tuple(logits.shape)} for {n_kept} labelled positions); "
                "set completion_logits_only: false for this model."
            )
        return logits

    def _nll(self, logits, targets, inputs, num_items_in_batch):
        """Summed token NLL of ``targets`` under ``logits`` ``[n, vocab]``, normalised as TRL normalises it, and
        TRL's token metrics."""
        mode = "train" if self.model.training else "eval"
        log_probs = logits.float().log_softmax(-1)
        nll = F.nll_loss(log_probs, targets, reduction="sum")
        denominator = targets.numel() if num_items_in_batch is None else num_items_in_batch
        # Clamped so that a batch without labelled tokens gives a finite zero, as in TRL.
        loss = nll / torch.as_tensor(denominator, device=nll.device).clamp(min=1)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # num_items_in_batch counts every rank's tokens while DDP averages gradients over ranks.
            loss = loss * self.accelerator.num_processes
        self._log_token_metrics(mode, inputs, log_probs.detach(), targets)
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


def make_parser(prog: str | None = None) -> RecipeParser:
    """The parser of every SFT entry point (TRL's ``make_parser`` pattern)."""
    return RecipeParser(
        (ScriptArguments, SFTConfig, ModelConfig),
        prog=prog or "persetrain sft",
        description="Fine-tune a judge with TRL's SFTTrainer (the loss on the completion only).",
        key_notes={
            "dataset_path": "SFT reads TRL's prompt-completion columns `prompt` and `completion` (persetrain prepare "
            "perse, verifier or judge); a user's preference rows become the yes / no verifier's rows."
        },
    )


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


def build_sft_trainer(
    script_args: ScriptArguments,
    training_args: SFTConfig,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
) -> CompletionOnlySFTTrainer:
    """The trainer a run uses (data loaded, model and tokenizer resolved).

    Split from :func:`main` so that benchmarks time exactly what a recipe runs.
    """
    train_dataset, eval_dataset = load_splits(
        script_args,
        {"TRL's prompt-completion format": ("prompt", "completion")},
        want_eval=training_args.eval_strategy != "no",
        seed=training_args.seed,
        write_with=_prepare_command(Path(script_args.dataset_path or ".")),
        convert=verifier_view,
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
) -> RunResult:
    """Train, save the final model and tokenizer, and return where they are."""
    return run_trainer(build_sft_trainer, script_args, training_args, model_args, callbacks)


def run_sft(argv: Sequence[str] | None = None) -> RunResult:
    """Parse ``[--config recipe.yaml] [--key value ...]`` (``sys.argv[1:]`` when None) and train."""
    return main(*make_parser().parse_args_and_config(argv))


if __name__ == "__main__":
    run_as_script(run_sft)
