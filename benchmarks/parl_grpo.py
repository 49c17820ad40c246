"""PARL GRPO on a CPU: ``persetrain demo parl`` from an empty folder, plus what only a benchmark measures.

The ``grpo`` part of ``benchmarks/parl.py`` (also runnable alone). The pipeline is the demo's
(``persetrain.demos.parl``: a rule verifier trained on the training users and measured on held-out ones, warm
start, GRPO with ``recipes/parl/cpu_smollm2_news.yaml`` judged by the verifier, Max-Diff of the untrained and
trained generators over ``--runs`` seeds with a paired t-test), run into an empty ``runs/bench-parl/grpo``:
a GRPO run appends to its metrics and reward-parts files and keeps its judge's request cache, so a second run
into the same folder would read both runs' steps and time a reward served from the cache. Added here: the
reward's share of the step time (``time/reward_s`` over TRL's ``step_time``, summed over steps) and the share
of the base model's unaided (no structured output) rubric sets with >= 2 valid rules
(``valid_share_base_unaided``). Times are wall times of this machine as it was during the run.

    python benchmarks/parl_grpo.py [--steps 12] [--runs 3] [--judge DIR] [--heldout-users N]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from common import emit  # beside this script

from persetrain.console import set_quiet
from persetrain.data import read_split
from persetrain.demos.parl import run_parl_demo
from persetrain.demos.parl_config import JUDGE_CURRICULUM, demo_config, parse_curriculum
from persetrain.engine import load_engine
from persetrain.evaluators.parl import PARLConfig, induce
from persetrain.models import DEFAULT_MODEL
from persetrain.train.grpo import REWARD_PARTS_FILE
from persetrain.train.runner import METRICS_FILE

OUT = Path("runs/bench-parl/grpo")


def _reward_share(grpo_out: Path) -> float | None:
    steps = [json.loads(line) for line in (grpo_out / METRICS_FILE).read_text().splitlines()]
    steps = [r for r in steps if r.get("event") == "log" and "parl/valid_share" in r]
    reward_s = sum(r.get("time/reward_s", 0.0) for r in steps)
    step_s = sum(r.get("step_time", 0.0) for r in steps)
    return round(reward_s / step_s, 3) if step_s else None


def _valid_share_unaided(model: str, examples, config: PARLConfig, seed: int) -> float:
    users = induce(load_engine(model), examples, replace(config, structured=False, max_tries=1), seed)
    return sum(sum(u.valid(config.tau)) >= 2 for u in users) / len(users)


def grpo_run(args: argparse.Namespace) -> dict:
    config = demo_config(
        full=True,
        out=OUT,
        model=args.model,
        seed=args.seed,
        judge=args.judge,
        judge_curriculum=parse_curriculum(args.judge_curriculum),
        warmstart=args.warmstart,
        warmstart_users=args.warmstart_users,
        warmstart_samples=args.warmstart_samples,
        warmstart_copies=args.warmstart_copies,
        grpo_steps=args.steps,
        grpo_prompts=args.prompts,
        heldout_users=args.heldout_users,
        runs=args.runs,
        max_new_tokens=args.max_new_tokens,
        fresh=True,
    )
    summary = run_parl_demo(config)
    _, test = read_split(OUT / "data" / "parl_news", "test")
    judged = PARLConfig(temperature=0.6, max_new_tokens=args.max_new_tokens, judge_model=summary["judge"])
    summary["valid_share_base_unaided"] = round(
        _valid_share_unaided(args.model, test[: args.heldout_users], judged, args.seed), 3
    )
    summary["reward_share_of_step_time"] = _reward_share(OUT / "grpo")
    summary["grpo_reward_parts_path"] = str(OUT / "grpo" / REWARD_PARTS_FILE)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    per_item = ("curve", "judge_heldout_per_rule", "judge_distractor_per_rule", "scored_sets_trained")
    return {k: v for k, v in summary.items() if k not in (*per_item, "scored_sets_untrained")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps",
        type=int,
        default=12,
        help="GRPO steps (the recipe and the demo run 46; 12, at 23-66 s each here, keep this benchmark short).",
    )
    parser.add_argument("--prompts", type=int, default=1, help="Users per GRPO step (4 took 130-222 s a step).")
    parser.add_argument(
        "--warmstart", default="truth", help="Warm-start sets: truth (the users' true rules) or induced (the base's)."
    )
    parser.add_argument("--warmstart-users", type=int, default=None, help="Training users in the warm start (all).")
    parser.add_argument(
        "--warmstart-samples", type=int, default=0, help="Extra synthetic samples whose users join the warm start."
    )
    parser.add_argument("--warmstart-copies", type=int, default=2, help="Truth warm-start rows per user.")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="Longest induced rubric set (tokens).")
    parser.add_argument("--heldout-users", type=int, default=None, help="Evaluate on the first N held-out users.")
    parser.add_argument("--runs", type=int, default=3, help="Seeds of rubric induction per evaluated generator.")
    parser.add_argument("--judge", default=None, help="A trained rule verifier to judge with (skips its training).")
    parser.add_argument(
        "--judge-curriculum",
        default=JUDGE_CURRICULUM,
        help="The verifier's stages, RULE[+RULE...]:STEPS or all:STEPS (default %(default)s, the recipe's one stage).",
    )


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = make_parser().parse_args(argv)
    set_quiet(args.quiet)
    results = grpo_run(args)
    emit(results)
    return results


if __name__ == "__main__":
    main()
