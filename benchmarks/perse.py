"""PerSE targets on this machine: judge quality on planted preferences, and SFT throughput.

1. Kendall tau on the demo's held-out reviewers for the trained embedded judge, the untrained
   model and Reviewer Avg. (from ``runs/demo/eval/metrics.json``; the demo is run first when that
   file is missing or ``--rerun`` is given).
2. SFT throughput, FLOP utilization and the packing speed-up, measured by ``benchmarks/sft.py``
   in a separate process so that its timing is not disturbed by this process's memory.

The last line printed is one JSON object with the figures.

    python benchmarks/perse.py [--run runs/demo] [--rerun] [--sft-steps 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import emit  # beside this script

HERE = Path(__file__).resolve().parent


def judge_figures(run: Path, rerun: bool) -> dict:
    metrics_path = run / "eval" / "metrics.json"
    if rerun or not metrics_path.is_file():
        from persetrain.demos.perse import run_demo

        run_demo(run)
    metrics = json.loads(metrics_path.read_text())
    systems = metrics["systems"]
    figures = {
        "kendall_by_system": {name: m["kendall"] for name, m in systems.items()},
        "unparsed_by_system": {name: m["n_unparsed"] for name, m in systems.items()},
        "n_examples": metrics["n_examples"],
    }
    # Each judge is credited with the better of its two scores (parsed text, expected score); an
    # undefined correlation (null: every output unparsed) does not count.
    for judge in ("trained", "untrained"):
        found = [systems[n]["kendall"] for n in (judge, f"{judge}-expected") if systems[n]["kendall"] is not None]
        figures[f"kendall_{judge}"] = max(found) if found else None
    figures["kendall_reviewer_avg"] = systems["reviewer-avg"]["kendall"]
    return figures


def sft_figures(steps: int) -> dict:
    out = subprocess.run(
        [sys.executable, str(HERE / "sft.py"), "--steps", str(steps), "--no-trl-default"],
        capture_output=True,
        text=True,
        check=True,
    )
    print(out.stdout, end="")
    return json.loads(out.stdout.strip().splitlines()[-1])


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=Path("runs/demo"))
    parser.add_argument("--rerun", action="store_true", help="run the demo even if its metrics exist")
    parser.add_argument("--sft-steps", type=int, default=4)
    return parser


def main() -> None:
    args = make_parser().parse_args()
    figures = judge_figures(args.run, args.rerun)
    sft = sft_figures(args.sft_steps)
    figures.update(
        {k: sft[k] for k in ("sft_tokens_per_s", "sft_flop_utilization", "packing_speedup", "matmul_gflops")}
    )
    figures["trained_minus_untrained"] = round(figures["kendall_trained"] - figures["kendall_untrained"], 4)
    figures["trained_beats_reviewer_avg"] = figures["kendall_trained"] > figures["kendall_reviewer_avg"]
    figures["target_met"] = figures["trained_minus_untrained"] >= 0.15 and figures["trained_beats_reviewer_avg"]
    emit(figures)


if __name__ == "__main__":
    main()
