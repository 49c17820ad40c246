"""SFT training speed on this machine, as ratios measured within one run.

1. The machine's fp32 matmul rate at the shapes a training step of the model runs: the ceiling.
2. Full fine-tuning throughput in trained tokens/s: every token of a batch that goes through forward
   and backward (padding excluded), on synthetic rows with Per-MPST's shape (a 300-850-token prompt
   skewed towards the short end, a 40-150-token completion), 1,024-token rows, fp32:
   - ``packed``: what persetrain runs — bfd packing + padding-free batches, per-sequence attention
     (``packed_sdpa``), logits only at completion positions, no activation checkpointing;
   - ``padded``: the same trainer on padded batches of 4, the baseline packing is measured against;
   - ``trl-default``: TRL's SFTTrainer as it comes (packing, activation checkpointing, its own loss,
     ``sdpa``), fp32 — what the speedups are measured against.
   FLOP utilization = tokens/s x 6 x params / matmul rate: the share of the ceiling the step reaches,
   counting 6·params FLOPs per trained token as is customary (attention FLOPs not counted, the LM head
   counted on every position whether or not it runs there).

The last line printed is one JSON object with the figures. On a machine shared with other jobs the
figures move with their load (with 2 threads on 2 cores, a competing process can slow every op
several-fold), so the 1-minute load average around each run is reported next to it.

    python benchmarks/sft.py [--model SPEC] [--steps 4] [--threads N] [--no-trl-default]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from datasets import Dataset, DatasetDict
from transformers import TrainerCallback

from persetrain.models import DEFAULT_MODEL, load_tokenizer, local_weights_dir
from persetrain.train.sft import build_sft_trainer, make_parser

WORDS = [
    "the", "story", "plot", "film", "man", "woman", "city", "night", "war", "love", "family", "friend",
    "house", "king", "queen", "father", "mother", "son", "daughter", "world", "time", "life", "death",
    "dark", "light", "old", "young", "home", "secret", "power", "journey", "review", "scene", "end",
    "good", "bad", "great", "long", "short", "best", "first", "last", "new", "little", "big",
]
ROW_TOKENS = 1024


def measure_matmul_flops(hidden: int = 576, intermediate: int = 1536, kv: int = 192, tokens: int = ROW_TOKENS,
                         repeats: int = 7) -> float:
    """fp32 ``torch.mm`` rate in FLOP/s at the shapes of one training step of the model.

    The shapes are a 1,024-token row through the attention and MLP projections (forward), plus the
    weight-gradient products of the backward pass. Each shape is warmed up, timed ``repeats`` times
    and its median kept; the rate is the shapes' total FLOPs over their total median time, i.e. the
    rate a step made only of these matmuls would reach.
    """
    shapes = [
        (tokens, hidden, hidden), (tokens, hidden, kv), (tokens, hidden, intermediate),
        (tokens, intermediate, hidden), (hidden, tokens, intermediate), (intermediate, tokens, hidden),
    ]
    flops = seconds = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(2):
            torch.mm(a, b)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        flops += 2 * m * k * n
        seconds += statistics.median(times)
    return flops / seconds


def synthetic_prompt_completion(tokenizer, rows: int, seed: int = 0) -> Dataset:
    """Prompt-completion chat rows shaped like Per-MPST's, in single-token words.

    Prompt lengths follow a triangular distribution on [300, 850] with its mode at 420 tokens (most
    profiles are short, a few long), completions are uniform on [40, 150]: the skew is what makes
    padded batches waste compute. Rows stay under 1,024 tokens with the chat template, so packing
    never truncates a completion.
    """
    words = [w for w in WORDS if len(tokenizer.encode(" " + w, add_special_tokens=False)) == 1]
    rng = random.Random(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    return Dataset.from_list([
        {"prompt": [{"role": "user", "content": text(int(rng.triangular(300, 850, 420)))}],
         "completion": [{"role": "assistant", "content": text(rng.randint(40, 150))}]}
        for _ in range(rows)
    ])


@dataclass
class _StepTimer(TrainerCallback):
    """Wall time of each optimizer step, and the tokens it trained (from TRL's ``num_tokens`` log)."""

    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    _start: float = 0.0
    _seen: int = 0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self._start)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "num_tokens" in logs:
            self.tokens.append(int(logs["num_tokens"]) - self._seen)
            self._seen = int(logs["num_tokens"])


@dataclass
class Throughput:
    name: str
    tokens_per_s: float
    params: int
    step_seconds: list[float]
    step_tokens: list[int]


def measure_sft_throughput(
    data_dir: str | os.PathLike,
    *,
    name: str,
    model: str = DEFAULT_MODEL,
    packing: bool = True,
    batch_size: int = 1,
    persetrain_speedups: bool = True,
    steps: int = 4,
    warmup_steps: int = 2,
    num_threads: int | None = None,
) -> Throughput:
    """Trained tokens/s of full fine-tuning in fp32, through the same code path as a recipe.

    ``persetrain_speedups=False`` gives TRL's SFTTrainer as it comes (activation checkpointing, its own
    loss over every position, ``sdpa``). The first ``warmup_steps`` steps are not timed: they allocate
    the optimizer state and page in the working set, which takes the allocator two steps to settle.
    """
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as out:
        argv = [
            "--model_name_or_path", model, "--dataset_path", str(data_dir), "--output_dir", out,
            "--max_steps", str(warmup_steps + steps), "--per_device_train_batch_size", str(batch_size),
            "--packing", str(packing).lower(), "--max_length", str(ROW_TOKENS), "--learning_rate", "1e-4",
            "--bf16", "false", "--fp16", "false", "--report_to", "none", "--save_strategy", "no",
            "--logging_steps", "1", "--disable_tqdm", "true", "--seed", "0",
        ]
        if persetrain_speedups:
            argv += ["--attn_implementation", "packed_sdpa", "--activation_checkpointing", "false"]
        else:
            argv += ["--attn_implementation", "sdpa", "--activation_checkpointing", "true",
                     "--completion_logits_only", "false"]
        timer = _StepTimer()
        trainer = build_sft_trainer(*make_parser().parse_args_and_config(argv), [timer])
        params = sum(p.numel() for p in trainer.model.parameters())
        trainer.train()
    seconds, tokens = timer.seconds[warmup_steps:], timer.tokens[warmup_steps:]
    return Throughput(name, sum(tokens) / sum(seconds), params, seconds, tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--steps", type=int, default=4, help="timed steps of the packed run (others: half)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-trl-default", action="store_true", help="skip timing TRL's SFTTrainer as it comes")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    began = time.perf_counter()

    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(local_weights_dir(args.model))

    def matmul() -> float:
        return measure_matmul_flops(hidden=config.hidden_size, intermediate=config.intermediate_size,
                                    kv=config.num_key_value_heads * config.head_dim)

    # The ceiling is measured before, between and after the runs and the best kept: load from other
    # jobs during one measurement must not lower the limit (which would inflate the utilization).
    matmul_rates = [matmul()]
    runs, loads = [], []
    plan = [("packed", {"steps": args.steps}),
            ("padded", {"packing": False, "batch_size": 4, "steps": max(1, args.steps // 2)})]
    if not args.no_trl_default:
        plan.append(("trl-default", {"persetrain_speedups": False, "steps": max(1, args.steps // 2)}))
    with tempfile.TemporaryDirectory(prefix="sft-bench-data-") as tmp:
        data_dir = Path(tmp) / "data"
        DatasetDict(train=synthetic_prompt_completion(load_tokenizer(args.model), rows=96)).save_to_disk(data_dir)
        for name, options in plan:
            load_before = os.getloadavg()[0]
            runs.append(measure_sft_throughput(data_dir, name=name, model=args.model, num_threads=args.threads,
                                               **options))
            loads.append((load_before, os.getloadavg()[0]))
            matmul_rates.append(matmul())
    ceiling, params = max(matmul_rates), runs[0].params

    rates = ", ".join(f"{r / 1e9:.0f}" for r in matmul_rates)
    print(f"fp32 matmul (GFLOP/s): {rates}; ceiling {ceiling / 1e9:.0f}. "
          f"{params / 1e6:.1f}M params, {torch.get_num_threads()} threads")
    print(f"{'run':12s} {'tokens/s':>9s} {'utilization':>11s} {'s/step':>7s} {'tokens/step':>11s} "
          f"{'load (1 min)':>13s}")
    for run, (before, after) in zip(runs, loads, strict=True):
        utilization = run.tokens_per_s * 6 * params / ceiling
        print(f"{run.name:12s} {run.tokens_per_s:9.1f} {utilization:11.1%} "
              f"{statistics.median(run.step_seconds):7.2f} {statistics.median(run.step_tokens):11.0f} "
              f"{before:6.2f}->{after:.2f}")
    by_name = {run.name: run for run in runs}
    figures = {
        "sft_tokens_per_s": round(by_name["packed"].tokens_per_s, 2),
        "sft_flop_utilization": round(by_name["packed"].tokens_per_s * 6 * params / ceiling, 4),
        "packing_speedup": round(by_name["packed"].tokens_per_s / by_name["padded"].tokens_per_s, 3),
        "padded_tokens_per_s": round(by_name["padded"].tokens_per_s, 2),
        "matmul_gflops": round(ceiling / 1e9, 1),
        "params": params,
        "threads": torch.get_num_threads(),
        "load_average_1min": [round(x, 2) for pair in loads for x in pair],
        "seconds": round(time.perf_counter() - began, 1),
    }
    if "trl-default" in by_name:
        trl = by_name["trl-default"].tokens_per_s
        figures["trl_default_tokens_per_s"] = round(trl, 2)
        figures["speedup_vs_trl_default"] = round(by_name["packed"].tokens_per_s / trl, 3)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
