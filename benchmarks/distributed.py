"""Sharded training on this CPU: the CPU SFT recipe under each shipped config, 2 ranks x 1 thread against 1 x 2.

Every run is what a user starts, ``persetrain launch --config recipes/perse/cpu_smollm2_per-mpst-k3.yaml
--accelerate-config CONFIG --num-processes N``, on the embedded model and the SYNTHETIC PerSE data that
``persetrain prepare`` writes (``--no-llm``: raw synopses). The global batch is the same everywhere: one
process takes 2 rows a step, each of 2 ranks one. Throughput is trained tokens/s (TRL's ``num_tokens``, every
rank's) between the first and the last logged step, so start-up, the first step and the final save are not
counted; ``--repeats`` runs each configuration again, interleaved, and keeps its best. Peak RSS per rank is the
largest ``VmHWM`` of any rank of the run, read from ``/proc`` while it runs.

Ratios are against one process with both cores (``OMP_NUM_THREADS=2``), measured in the same invocation. The
last line printed is one JSON object: ``ddp_vs_single``, ``zero2_vs_single``, ``zero3_vs_single``,
``zero3_offload_vs_single``, ``fsdp_vs_single`` and ``peak_rss_mb_per_rank`` (each configuration's).

    python benchmarks/distributed.py [--steps 12] [--repeats 2] [--out runs/bench-distributed]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit  # beside this script
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "perse" / "cpu_smollm2_per-mpst-k3.yaml"
#: name -> (accelerate config, processes); "single" is the ceiling the others are held against.
CONFIGS = {
    "single": ("cpu", 1),
    "ddp": ("cpu", 2),
    "zero2": ("deepspeed_zero2", 2),
    "zero3": ("deepspeed_zero3", 2),
    "zero3_offload": ("deepspeed_zero3_offload", 2),
    "fsdp": ("fsdp", 2),
}


def _peak_rss_mb(pids: set[int]) -> float:
    peak = 0.0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peak = max(peak, int(line.split()[1]) / 1024)
    return peak


def _descendants(pid: int) -> set[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return {int(child) for child in found} | {grand for child in found for grand in _descendants(int(child))}


def run_config(name: str, data: Path, out: Path, steps: int) -> dict[str, float]:
    """One launch of ``name``; its trained tokens/s and the peak RSS of its largest rank."""
    config, processes = CONFIGS[name]
    batch = "2" if processes == 1 else "1"
    argv = [
        str(Path(sys.executable).with_name("persetrain")),
        *(
            "-q",
            "launch",
            "--config",
            str(RECIPE),
            "--accelerate-config",
            str(REPO / "accelerate_configs" / f"{config}.yaml"),
        ),
        *("--num-processes", str(processes), "--"),
        *("--dataset_path", str(data), "--output_dir", str(out), "--max_steps", str(steps), "--logging_steps", "1"),
        *("--per_device_train_batch_size", batch, "--gradient_accumulation_steps", "1", "--save_strategy", "no"),
        *("--disable_tqdm", "true", "--report_to", "none"),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(2 // processes)}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = 0.0
    while process.poll() is None:
        ranks = _descendants(process.pid) or {process.pid}
        peak = max(peak, _peak_rss_mb(ranks))
        time.sleep(0.5)
    output = process.stdout.read()
    if process.returncode != 0:
        raise SystemExit(f"{name} failed (exit {process.returncode}):\n{output[-4000:]}")
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logs = [r for r in logs if r["event"] == "log" and "num_tokens" in r]
    first, last = logs[0], logs[-1]
    return {
        "tokens_per_s": (last["num_tokens"] - first["num_tokens"]) / (last["time"] - first["time"]),
        "peak_rss_mb": peak,
    }


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="Where the runs go (default: a temporary folder).")
    return parser


def main() -> None:
    args = make_parser().parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="bench-distributed-"))
    data = root / "data"
    if not (data / "perse" / "per_mpst_k3").is_dir():
        persetrain = str(Path(sys.executable).with_name("persetrain"))
        subprocess.run([persetrain, "-q", "prepare", "sample", "--out", str(data / "raw")], check=True)
        subprocess.run(
            [
                persetrain,
                "-q",
                "prepare",
                "perse",
                "--raw",
                str(data / "raw"),
                "--out",
                str(data / "perse"),
                "--no-llm",
                "--no-probe",
            ],
            check=True,
        )
    best: dict[str, dict[str, float]] = {}
    runs = [(repeat, name) for repeat in range(args.repeats) for name in CONFIGS]
    for repeat, name in tqdm(runs, desc="launches"):
        result = run_config(name, data / "perse" / "per_mpst_k3", root / f"{name}-{repeat}", args.steps)
        kept = best.setdefault(name, result)
        if result["tokens_per_s"] > kept["tokens_per_s"]:
            best[name] = {**result, "peak_rss_mb": max(result["peak_rss_mb"], kept["peak_rss_mb"])}
    single = best["single"]["tokens_per_s"]
    print(f"{'config':<15}{'tokens/s':>10}{'vs single':>11}{'peak RSS/rank MB':>18}")
    for name, result in best.items():
        rate, rss = result["tokens_per_s"], result["peak_rss_mb"]
        print(f"{name:<15}{rate:>10.1f}{rate / single:>11.2f}{rss:>18.0f}")
    figures = {
        f"{name}_vs_single": round(best[name]["tokens_per_s"] / single, 3) for name in CONFIGS if name != "single"
    }
    figures["peak_rss_mb_per_rank"] = {name: round(result["peak_rss_mb"]) for name, result in best.items()}
    emit(figures)


if __name__ == "__main__":
    main()
