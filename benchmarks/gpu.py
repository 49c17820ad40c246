"""bf16 model FLOP utilization (MFU) of persetrain's trainers on one GPU, in one run that ends inside its budget.

What a GPU machine is for is throughput, and a throughput means little without the ceiling it is held against.
This script measures both on the machine it runs on:

1. The ceiling: the device's ``torch.mm`` rate on random 8192 x 8192 x 8192 products in the dtype the trainers
   compute in (``persetrain.models.best_dtype``: bf16 on a GPU, fp32 on a CPU), timed with the device
   synchronised. It is also measured at the shapes of each model's training step (its attention and MLP
   projections over the step's tokens, forward and weight gradients, as ``benchmarks/sft.py`` does on the CPU):
   how far a small model's matrices can take the device at best.
2. Each row: a trainer exactly as a recipe builds it (``build_sft_trainer`` / ``build_rm_trainer`` /
   ``build_grpo_trainer``, the precision following the hardware), 2 untimed optimizer steps, then 3 timed
   ones, each timed with the device synchronised at both ends; the best of the 3 is kept.

   - ``sft_full``: full fine-tuning on packed 1,024-token rows of Per-MPST-shaped synthetic prompt-completion
     data (``benchmarks/sft.py``'s), 8 rows a step; trained tokens/s;
   - ``sft_lora``: the same with LoRA (r 16, every linear layer);
   - ``rm``: the listwise reward model (``ListwiseRewardTrainer``), 8 questions of one ~520-token context and 4
     options a step; the tokens it computes per second;
   - ``grpo``: a GRPO step (``SharedPromptGRPOTrainer``) of 2 prompts x 8 rollouts of up to 128 sampled tokens,
     rewarded by :func:`length_reward` (no judge model, so the step's cost is the policy's own); tokens of
     prompts + rollouts (TRL's ``num_tokens``) per second, and the step's seconds, rollouts included;
   - ``zero3``: ``sft_full`` started as a user starts it, ``persetrain launch --accelerate-config
     accelerate_configs/deepspeed_zero3.yaml --num-processes 1``: ZeRO-3's partitioning and gathering with one
     rank, against the plain ``sft_full`` of the same model. Its tokens/s comes from the run's ``metrics.jsonl``
     between the log after the warm-up and the last one (a log is a synchronisation point), as
     ``benchmarks/distributed.py`` reads its launches.

   Each row runs on the embedded SmolLM2-135M (``--model``) and on a random-weight model shaped like
   Llama-3.2-1B (hidden 2048, 16 layers, 32 heads, 8 KV heads, MLP 8192, tied embeddings) with the embedded
   tokenizer's vocabulary; ``zero3`` on the 1B model only. ``--smoke`` runs every row on a 2-layer LLaMA of
   hidden size 64 instead, 1 + 2 steps of small batches and a 1024-cube ceiling: a check that the script
   works on any machine, whose figures mean nothing.

MFU = tokens/s x FLOPs per token / the ceiling. FLOPs per token: 6 x params for full training (forward 2,
backward 4; attention's own FLOPs not counted, the LM head counted on every position, as in
``benchmarks/sft.py``); for LoRA 4 x the frozen params (forward and the input gradients) + 6 x the adapter's;
for GRPO 6 x params over every prompt and rollout token, i.e. the rollouts and log-prob passes are what the
step spends beyond that. Peak memory is ``torch.cuda.max_memory_allocated`` over the row (the trainer built,
trained and released); for ``zero3``, whose rank is another process, the device's used memory above its level
before the launch (CUDA context and allocator cache included).

Rows run in that order while ``--budget-s`` allows: a row that would start with less than 20 s left is
skipped, and a row still running when the budget ends is stopped and reported as timed out, so the script
always ends and prints its figures. It prints a markdown table, writes ``--out/result.json`` and ends with
one JSON line (``device``, ``matmul_tflops``, ``<model>_<row>_mfu`` and the rows' other figures).

    python benchmarks/gpu.py [--budget-s 480] [--out runs/bench-gpu]   # on a GPU, bf16
    python benchmarks/gpu.py --smoke                                   # any machine: every row, tiny model
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import torch
import yaml
from common import StepTimer, emit, matmul_rate, step_shapes
from datasets import Dataset, DatasetDict
from distributed import _descendants  # beside this script
from sft import ROW_TOKENS, synthetic_prompt_completion
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from persetrain.models import DEFAULT_MODEL, best_device, best_dtype, load_tokenizer, local_weights_dir
from persetrain.train.grpo import build_grpo_trainer
from persetrain.train.grpo import make_parser as grpo_parser
from persetrain.train.recipe import RecipeParser
from persetrain.train.rm import build_rm_trainer
from persetrain.train.rm import make_parser as rm_parser
from persetrain.train.sft import build_sft_trainer
from persetrain.train.sft import make_parser as sft_parser

REPO = Path(__file__).resolve().parents[1]
ZERO3_CONFIG = REPO / "accelerate_configs" / "deepspeed_zero3.yaml"
#: Llama-3.2-1B's shape (its vocabulary aside: the embedded tokenizer's is used, so that its chat template works).
LLAMA_1B = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
ROWS = ("sft_full", "sft_lora", "rm", "grpo")
MIN_ROW_S = 20.0  # a row is not started with less budget left than this
END_RESERVE_S = 10.0  # kept from the budget for the report


@dataclass(frozen=True)
class Sizes:
    """A run's batch shapes and step counts."""

    warmup: int
    steps: int
    sft_rows: int  # packed ROW_TOKENS-token rows per SFT step
    rm_questions: int
    rollouts: int  # GRPO rollouts per prompt
    grpo_rollouts: int  # rollouts per GRPO step
    completion_tokens: int
    square: int  # side of the square product that measures the ceiling


GPU = Sizes(
    warmup=2, steps=3, sft_rows=8, rm_questions=8, rollouts=8, grpo_rollouts=16, completion_tokens=128, square=8192
)
SMOKE = Sizes(
    warmup=1, steps=2, sft_rows=1, rm_questions=2, rollouts=2, grpo_rollouts=4, completion_tokens=16, square=1024
)


@dataclass
class Row:
    """One measurement and how it ended (``ok``, ``skipped``, ``timed out`` or ``failed: ...``)."""

    model: str
    what: str
    status: str = "skipped"
    tokens_per_s: float | None = None
    step_s: float | None = None
    flops_per_token: float | None = None
    flops: str = ""  # how the FLOPs per token were counted
    peak_gib: float | None = None
    seconds: float | None = None

    @property
    def key(self) -> str:
        return f"{self.model}_{self.what}"


def model_key(spec: str) -> str:
    """The rows' name for a model spec: the first word of its last part (``embedded:smollm2-135m-instruct``:
    ``smollm2``)."""
    return re.split(r"[^0-9a-z]", re.split(r"[:/]", spec.lower().rstrip("/"))[-1])[0] or "model"


def length_reward(completions: list[list[dict]], **kwargs) -> list[float]:
    """The GRPO rows' reward: a rollout's length in hundreds of characters (it needs no judge model)."""
    return [len(completion[-1]["content"]) / 100 for completion in completions]


# ------------------------------------------------------------------------------------------ models and data
def random_llama(path: Path, tokenizer, shape: dict[str, int], device: torch.device, dtype: torch.dtype) -> str:
    """A LLaMA of ``shape`` with random weights (transformers' initialisation) and ``tokenizer``, saved at ``path``."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=4096,
        rope_theta=500000.0,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        **shape,
    )
    torch.manual_seed(0)
    with torch.device(device):  # drawn on the device, which is faster at it than the host
        model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def count_params(model: str) -> int:
    """Parameters of a causal LM, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(local_weights_dir(model)))
    return sum(p.numel() for p in net.parameters())


def write_datasets(tokenizer, root: Path) -> dict[str, str]:
    """The rows' datasets: prompt-completion rows (SFT), their prompts (GRPO) and listwise questions (reward model),
    each of the latter a row's prompt as the context and 4 rows' completions as the options, the first one gold."""
    rows = synthetic_prompt_completion(tokenizer, rows=192)
    questions = [
        {
            "prompt": rows[i]["prompt"][0]["content"],
            "options": [rows[i + j]["completion"][0]["content"] for j in range(4)],
            "gold": 0,
        }
        for i in range(0, len(rows), 4)
    ]
    paths = {name: str(root / name) for name in ("sft", "grpo", "rm")}
    DatasetDict(train=rows).save_to_disk(paths["sft"])
    DatasetDict(train=rows.select_columns(["prompt"])).save_to_disk(paths["grpo"])
    DatasetDict(train=Dataset.from_list(questions)).save_to_disk(paths["rm"])
    return paths


# ------------------------------------------------------------------------------------------ the rows
def common_args(model: str, data: str, out: Path, sizes: Sizes) -> list[str]:
    return [
        *("--model_name_or_path", model, "--dataset_path", data, "--output_dir", str(out)),
        *("--max_steps", str(sizes.warmup + sizes.steps), "--logging_steps", "1", "--learning_rate", "1e-5"),
        *("--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--seed", "0"),
        *("--activation_checkpointing", "false"),
    ]


def sft_args(model: str, data: dict[str, str], out: Path, sizes: Sizes, lora: bool) -> list[str]:
    return [
        *common_args(model, data["sft"], out, sizes),
        *("--per_device_train_batch_size", str(sizes.sft_rows), "--gradient_accumulation_steps", "1"),
        *("--packing", "true", "--max_length", str(ROW_TOKENS), "--use_peft", str(lora).lower()),
    ]


def timed_train(build: Callable, parser: RecipeParser, argv: list[str], warmup: int) -> dict:
    """Build a trainer as a recipe does, train it, and return its best timed step and its parameter counts."""
    timer = StepTimer()
    trainer = build(*parser.parse_args_and_config(argv), [timer])
    total = sum(p.numel() for p in trainer.model.parameters())
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    trainer.train()
    steps = list(zip(timer.tokens[warmup:], timer.seconds[warmup:], strict=True))
    tokens, seconds = max(steps, key=lambda step: step[0] / step[1])
    return {"tokens_per_s": tokens / seconds, "step_s": seconds, "total": total, "trainable": trainable}


def millions(n: int) -> str:
    return f"{n / 1e6:.1f}M"


def sft_row(model: str, data: dict[str, str], out: Path, sizes: Sizes, lora: bool) -> dict:
    run = timed_train(build_sft_trainer, sft_parser(), sft_args(model, data, out, sizes, lora), sizes.warmup)
    if not lora:
        return {**run, "flops_per_token": 6 * run["total"], "flops": f"6 x {millions(run['total'])}"}
    frozen, adapter = run["total"] - run["trainable"], run["trainable"]
    return {**run, "flops_per_token": 4 * frozen + 6 * adapter, "flops": f"4 x {millions(frozen)} + 6 x {adapter:,}"}


def rm_row(model: str, data: dict[str, str], out: Path, sizes: Sizes) -> dict:
    argv = [*common_args(model, data["rm"], out, sizes), "--per_device_train_batch_size", str(sizes.rm_questions)]
    argv += ["--loss", "listwise", "--max_length", str(ROW_TOKENS), "--dataloader_drop_last", "true"]
    run = timed_train(build_rm_trainer, rm_parser(), argv, sizes.warmup)
    return {**run, "flops_per_token": 6 * run["total"], "flops": f"6 x {millions(run['total'])}"}


def grpo_row(model: str, data: dict[str, str], out: Path, sizes: Sizes) -> dict:
    argv = [*common_args(model, data["grpo"], out, sizes), "--reward_funcs", f"{Path(__file__).stem}.length_reward"]
    argv += ["--num_generations", str(sizes.rollouts), "--per_device_train_batch_size", str(sizes.grpo_rollouts)]
    argv += ["--max_completion_length", str(sizes.completion_tokens)]
    run = timed_train(build_grpo_trainer, grpo_parser(), argv, sizes.warmup)
    return {**run, "flops_per_token": 6 * run["total"], "flops": f"6 x {millions(run['total'])} (prompts + rollouts)"}


def device_memory_used() -> int | None:
    """Bytes in use on the GPU by every process (None without one)."""
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return total - free


def zero3_row(model: str, data: dict[str, str], out: Path, sizes: Sizes) -> dict:
    """``sft_full``'s run through ``persetrain launch`` under ZeRO-3 with one process.

    The launch needs a recipe: one naming the model, every other key given on the command line (where the
    explicit ``gradient_accumulation_steps`` keeps the zero3 config's 8 processes from rescaling the batch).
    The launch is killed with its ranks when the row is stopped.
    """
    recipe = out.with_suffix(".yaml")
    recipe.write_text(yaml.safe_dump({"model_name_or_path": model}))
    command = [sys.executable, "-m", "persetrain.cli", "-q", "launch", "--config", str(recipe)]
    command += ["--accelerate-config", str(ZERO3_CONFIG), "--num-processes", "1", "--"]
    command += sft_args(model, data, out, sizes, lora=False)
    log_path = out.with_suffix(".log")
    before = peak = device_memory_used()
    with log_path.open("w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            while process.poll() is None:
                if peak is not None:
                    peak = max(peak, device_memory_used())
                time.sleep(0.2)
        finally:
            if process.poll() is None:  # stopped by the budget: the rank (in a session of its own) first
                for pid in [*_descendants(process.pid), process.pid]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"the launch exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logs = [r for r in logs if r["event"] == "log" and "num_tokens" in r]
    first, last = logs[sizes.warmup - 1], logs[-1]
    seconds = last["time"] - first["time"]
    params = count_params(model)
    return {
        "tokens_per_s": (last["num_tokens"] - first["num_tokens"]) / seconds,
        "step_s": seconds / (last["step"] - first["step"]),
        "flops_per_token": 6 * params,
        "flops": f"6 x {millions(params)}",
        "peak_bytes": None if peak is None else peak - before,
    }


def measure(what: str, model: str, data: dict[str, str], out: Path, sizes: Sizes) -> dict:
    if what == "zero3":
        return zero3_row(model, data, out, sizes)
    if what == "rm":
        return rm_row(model, data, out, sizes)
    if what == "grpo":
        return grpo_row(model, data, out, sizes)
    return sft_row(model, data, out, sizes, lora=what == "sft_lora")


def seconds_since_start() -> float:
    """Seconds since this process started, its imports included: what ``--budget-s`` counts."""
    return time.time() - psutil.Process().create_time()


class RowTimeout(Exception):
    """The budget ended while a row ran."""


def _timeout(signum, frame):
    raise RowTimeout


def run_row(row: Row, model: str, data: dict[str, str], work: Path, sizes: Sizes, seconds_left: float) -> None:
    """Measure ``row`` on ``model`` and fill it in; SIGALRM stops it when the budget (``seconds_left``) ends."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(max(1, int(seconds_left)))
    try:
        result = measure(row.what, model, data, work / row.key, sizes)
        row.status = "ok"
    except RowTimeout:
        row.status, result = "timed out", {}
    except Exception as err:  # one row's failure must not cost the others their figures
        traceback.print_exc()
        row.status, result = f"failed: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}", {}
    finally:
        signal.alarm(0)
    row.seconds = time.perf_counter() - start
    row.tokens_per_s, row.step_s = result.get("tokens_per_s"), result.get("step_s")
    row.flops_per_token, row.flops = result.get("flops_per_token"), result.get("flops", "")
    peak = result.get("peak_bytes", torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None)
    row.peak_gib = None if peak is None or row.status != "ok" else peak / 2**30
    gc.collect()


# ------------------------------------------------------------------------------------------ report
def mfu(row: Row, ceiling: float | None) -> float | None:
    return None if row.tokens_per_s is None or ceiling is None else row.tokens_per_s * row.flops_per_token / ceiling


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def print_table(rows: list[Row], ceiling: float | None) -> None:
    print("| row | tokens/s | step s | FLOPs per token | TFLOP/s | MFU | peak GiB | s | status |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---|")
    for row in rows:
        achieved = None if row.tokens_per_s is None else row.tokens_per_s * row.flops_per_token / 1e12
        print(
            f"| {row.key} | {fmt(row.tokens_per_s, ',.0f')} | {fmt(row.step_s, '.3f')} | {row.flops or '—'} | "
            f"{fmt(achieved, '.1f')} | {fmt(mfu(row, ceiling), '.1%')} | {fmt(row.peak_gib, '.1f')} | "
            f"{fmt(row.seconds, '.0f')} | {row.status} |"
        )


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="The small model (rows named after it); its tokenizer serves both."
    )
    parser.add_argument("--budget-s", type=float, default=480.0, help="Rows that do not fit are skipped or stopped.")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-gpu"), help="Where result.json goes.")
    parser.add_argument("--smoke", action="store_true", help="Every row on a tiny random LLaMA, 2 timed steps.")
    return parser


def main() -> None:
    args = make_parser().parse_args()
    device = best_device()
    dtype = best_dtype(device)
    sizes = SMOKE if args.smoke else GPU
    device_name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"{device_name}, {str(dtype).removeprefix('torch.')}, budget {args.budget_s:.0f} s", flush=True)
    small = "tiny" if args.smoke else model_key(args.model)
    keys = [small] if args.smoke else [small, "llama1b"]
    rows = [Row(key, what) for key in keys for what in ROWS] + [Row(keys[-1], "zero3")]
    ceiling, shape_ceilings = None, {}

    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        work = Path(tmp)
        try:
            ceiling = matmul_rate([(sizes.square,) * 3], device, dtype, products=10)
            print(f"matmul ceiling: {ceiling / 1e12:.1f} TFLOP/s", flush=True)
            tokenizer = load_tokenizer(args.model)
            data = write_datasets(tokenizer, work)
            models = {small: args.model}
            if args.smoke:
                models[small] = random_llama(work / small, tokenizer, TINY, device, dtype)
            else:
                models["llama1b"] = random_llama(work / "llama1b", tokenizer, LLAMA_1B, device, dtype)
            for key, spec in models.items():
                shapes = step_shapes(AutoConfig.from_pretrained(local_weights_dir(spec)), sizes.sft_rows * ROW_TOKENS)
                shape_ceilings[key] = matmul_rate(shapes, device, dtype, products=10)
                print(f"{key}: matmul at its step's shapes {shape_ceilings[key] / 1e12:.1f} TFLOP/s", flush=True)
        except Exception as err:  # the figures are still printed, every row marked
            traceback.print_exc()
            for row in rows:
                row.status = f"failed: setup: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}"
            models = {}
        for i, row in enumerate(rows, 1):
            left = args.budget_s - END_RESERVE_S - seconds_since_start()
            if row.model not in models or left < MIN_ROW_S:
                print(f"[{i}/{len(rows)}] {row.key}: {row.status} ({left:.0f} s of the budget left)", flush=True)
                continue
            print(f"[{i}/{len(rows)}] {row.key} ...", flush=True)
            run_row(row, models[row.model], data, work, sizes, left)
            print(
                f"[{i}/{len(rows)}] {row.key}: {row.status}, {fmt(row.tokens_per_s, ',.0f')} tokens/s, "
                f"MFU {fmt(mfu(row, ceiling), '.1%')}, {row.seconds:.0f} s",
                flush=True,
            )

    print_table(rows, ceiling)
    figures: dict = {
        "device": device_name,
        "dtype": str(dtype).removeprefix("torch."),
        "matmul_tflops": None if ceiling is None else round(ceiling / 1e12, 2),
        **{f"{key}_shape_matmul_tflops": round(rate / 1e12, 2) for key, rate in shape_ceilings.items()},
    }
    for row in rows:
        figures[f"{row.key}_mfu"] = None if mfu(row, ceiling) is None else round(mfu(row, ceiling), 4)
        figures[f"{row.key}_tokens_per_s"] = None if row.tokens_per_s is None else round(row.tokens_per_s, 1)
        figures[f"{row.key}_step_s"] = None if row.step_s is None else round(row.step_s, 4)
        figures[f"{row.key}_peak_gib"] = None if row.peak_gib is None else round(row.peak_gib, 2)
    figures["not_ok"] = {row.key: row.status for row in rows if row.status != "ok"}
    figures["seconds"] = round(seconds_since_start(), 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "result.json").write_text(
        json.dumps({**figures, "rows": [asdict(row) for row in rows], "sizes": asdict(sizes)}, indent=1)
    )
    emit(figures)


if __name__ == "__main__":
    main()
