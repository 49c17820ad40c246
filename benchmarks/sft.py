"""SFT training speed on this machine: each of persetrain's additions to TRL against TRL's own path.

1. The machine's fp32 matmul rate at the shapes a training step of the model runs: the ceiling.
2. Full fine-tuning throughput in trained tokens/s (every token of a batch that goes through forward
   and backward, padding excluded) on the same synthetic rows shaped like Per-MPST's (a 300-850-token
   prompt skewed towards the short end, a 40-150-token completion), 1,024-token rows, fp32, one run
   per configuration:

   - ``trl-default``: TRL's SFTTrainer as it comes (packing, activation checkpointing, its ``nll`` loss
     through the fused LM head, ``sdpa``);
   - ``trl``: the same without activation checkpointing (a recipe key, not an addition): the
     baseline every addition is measured against;
   - ``persetrain``: what the CPU recipe runs, ``trl`` with
     :class:`~persetrain.train.sft.CompletionOnlySFTTrainer`'s loss (the one addition to TRL's path);
   - ``persetrain+malloc``: ``persetrain`` with glibc told to keep freed memory (``MALLOC_MMAP_MAX_=0``,
     ``MALLOC_TRIM_THRESHOLD_``): process tuning, which belongs to the launch environment;
   - ``padded``: ``persetrain`` on padded batches of 4 instead of packed rows.

   FLOP utilization = tokens/s x 6 x params / matmul rate: the share of the ceiling the step reaches,
   counting 6·params FLOPs per trained token as is customary (attention FLOPs not counted, the LM head
   counted on every position whether or not it runs there).

Each configuration runs in its own process (so that one run's allocator state cannot help or hurt
the next, and so that the allocator settings can differ), times ``--steps`` optimizer steps after two
warm-up steps and keeps its best step; ``--rounds`` repeats the whole set, interleaved, and keeps each
configuration's best. On a machine shared with other jobs the figures move with their load (with 2
threads on 2 cores, a competing process can slow every op several-fold), so the 1-minute load average
is reported; compare the ratios of one run, not figures across runs. The last line printed is one
JSON object with the figures.

    python benchmarks/sft.py [--model SPEC] [--steps 3] [--rounds 1] [--no-trl-default]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import StepTimer, emit, matmul_rate, step_shapes  # beside this script
from datasets import Dataset, DatasetDict

from persetrain.models import DEFAULT_MODEL, load_tokenizer, local_weights_dir
from persetrain.train.sft import build_sft_trainer
from persetrain.train.sft import make_parser as sft_parser

WORDS = [
    "the",
    "story",
    "plot",
    "film",
    "man",
    "woman",
    "city",
    "night",
    "war",
    "love",
    "family",
    "friend",
    "house",
    "king",
    "queen",
    "father",
    "mother",
    "son",
    "daughter",
    "world",
    "time",
    "life",
    "death",
    "dark",
    "light",
    "old",
    "young",
    "home",
    "secret",
    "power",
    "journey",
    "review",
    "scene",
    "end",
    "good",
    "bad",
    "great",
    "long",
    "short",
    "best",
    "first",
    "last",
    "new",
    "little",
    "big",
]
ROW_TOKENS = 1024


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

    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": text(int(rng.triangular(300, 850, 420)))}],
                "completion": [{"role": "assistant", "content": text(rng.randint(40, 150))}],
            }
            for _ in range(rows)
        ]
    )


#: name -> (recipe flags on top of the common ones, extra environment of the process)
CONFIGS: dict[str, tuple[list[str], dict[str, str]]] = {
    "trl-default": (
        ["--attn_implementation", "sdpa", "--activation_checkpointing", "true", "--completion_logits_only", "false"],
        {},
    ),
    "trl": (["--attn_implementation", "sdpa", "--completion_logits_only", "false"], {}),
    "persetrain": (["--attn_implementation", "sdpa", "--completion_logits_only", "true"], {}),
    "persetrain+malloc": (
        ["--attn_implementation", "sdpa", "--completion_logits_only", "true"],
        {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)},
    ),
    "padded": (
        [
            "--attn_implementation",
            "sdpa",
            "--completion_logits_only",
            "true",
            "--packing",
            "false",
            "--per_device_train_batch_size",
            "4",
        ],
        {},
    ),
}


def measure_sft_throughput(data_dir: str, model: str, flags: list[str], steps: int, warmup_steps: int = 2) -> dict:
    """Best trained tokens/s over ``steps`` timed steps of full fine-tuning in fp32, as a recipe runs it.

    The first ``warmup_steps`` steps are not timed: they allocate the optimizer state and page in the
    working set.
    """
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as out:
        argv = [
            "--model_name_or_path",
            model,
            "--dataset_path",
            data_dir,
            "--output_dir",
            out,
            "--max_steps",
            str(warmup_steps + steps),
            "--per_device_train_batch_size",
            "1",
            "--packing",
            "true",
            "--max_length",
            str(ROW_TOKENS),
            "--learning_rate",
            "1e-4",
            "--bf16",
            "false",
            "--fp16",
            "false",
            "--activation_checkpointing",
            "false",
            "--report_to",
            "none",
            "--save_strategy",
            "no",
            "--logging_steps",
            "1",
            "--disable_tqdm",
            "true",
            "--seed",
            "0",
            *flags,
        ]
        timer = StepTimer()
        trainer = build_sft_trainer(*sft_parser().parse_args_and_config(argv), [timer])
        params = sum(p.numel() for p in trainer.model.parameters())
        trainer.train()
    rates = [t / s for t, s in zip(timer.tokens[warmup_steps:], timer.seconds[warmup_steps:], strict=True)]
    return {"tokens_per_s": max(rates), "step_tokens": statistics.median(timer.tokens[warmup_steps:]), "params": params}


def _run_config(name: str, data_dir: Path, args: argparse.Namespace) -> dict:
    """One configuration in a fresh process with its own environment; returns its figures."""
    flags, env = CONFIGS[name]
    command = [
        sys.executable,
        __file__,
        "--worker",
        json.dumps(flags),
        "--data",
        str(data_dir),
        "--model",
        args.model,
        "--steps",
        str(args.steps),
    ]
    load_before = os.getloadavg()[0]
    out = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{name}: the worker failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "load": (load_before, os.getloadavg()[0])}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per configuration (best one kept)")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every configuration, interleaved")
    parser.add_argument(
        "--no-trl-default",
        action="store_true",
        help="time only persetrain and padded (the figures benchmarks/perse.py reads)",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # flags of one configuration, run in this process
    parser.add_argument("--data", help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = make_parser().parse_args()
    if args.worker:
        emit(measure_sft_throughput(args.data, args.model, json.loads(args.worker), args.steps))
        return
    began = time.perf_counter()

    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(local_weights_dir(args.model))

    def matmul() -> float:
        return matmul_rate(step_shapes(config, ROW_TOKENS), repeats=7)

    names = ["persetrain", "padded"] if args.no_trl_default else list(CONFIGS)
    # The ceiling is measured before and after every round and the best kept: load from other jobs
    # during one measurement must not lower the limit (which would inflate the utilization).
    matmul_rates = [matmul()]
    best: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="sft-bench-data-") as tmp:
        data_dir = Path(tmp) / "data"
        DatasetDict(train=synthetic_prompt_completion(load_tokenizer(args.model), rows=96)).save_to_disk(data_dir)
        for _ in range(args.rounds):
            for name in names:
                run = _run_config(name, data_dir, args)
                if name not in best or run["tokens_per_s"] > best[name]["tokens_per_s"]:
                    best[name] = run
            matmul_rates.append(matmul())
    ceiling, params = max(matmul_rates), best["persetrain"]["params"]

    def utilization(name: str) -> float:
        return best[name]["tokens_per_s"] * 6 * params / ceiling

    print(
        f"fp32 matmul (GFLOP/s): {', '.join(f'{r / 1e9:.0f}' for r in matmul_rates)}; ceiling "
        f"{ceiling / 1e9:.0f}. {params / 1e6:.1f}M params, {torch.get_num_threads()} threads"
    )
    base = best.get("trl", best["persetrain"])["tokens_per_s"]
    print(
        f"{'run':22s} {'tokens/s':>9s} {'vs trl':>7s} {'utilization':>11s} {'tokens/step':>11s} {'load (1 min)':>13s}"
    )
    for name, run in best.items():
        before, after = run["load"]
        print(
            f"{name:22s} {run['tokens_per_s']:9.1f} {run['tokens_per_s'] / base:7.3f} {utilization(name):11.1%} "
            f"{run['step_tokens']:11.0f} {before:6.2f}->{after:.2f}"
        )

    def rate(name: str) -> float:
        return best[name]["tokens_per_s"]

    figures = {
        "sft_tokens_per_s": round(rate("persetrain"), 2),
        "sft_flop_utilization": round(utilization("persetrain"), 4),
        "packing_speedup": round(rate("persetrain") / rate("padded"), 3),
        "padded_tokens_per_s": round(rate("padded"), 2),
    }
    if not args.no_trl_default:
        figures.update(
            {
                "trl_default_tokens_per_s": round(rate("trl-default"), 2),
                "trl_tokens_per_s": round(rate("trl"), 2),
                "speedup_vs_trl_default": round(rate("persetrain") / rate("trl-default"), 3),
                "completion_logits_speedup": round(rate("persetrain") / rate("trl"), 3),
                "malloc_env_speedup": round(rate("persetrain+malloc") / rate("persetrain"), 3),
            }
        )
    figures.update(
        {
            "matmul_gflops": round(ceiling / 1e9, 1),
            "params": params,
            "threads": torch.get_num_threads(),
            "load_average_1min": {name: [round(x, 2) for x in run["load"]] for name, run in best.items()},
            "seconds": round(time.perf_counter() - began, 1),
        }
    )
    emit(figures)


if __name__ == "__main__":
    main()
