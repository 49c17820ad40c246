"""PARL GRPO on a CPU: warm start + GRPO of the embedded model on the SYNTHETIC sample users.

The ``grpo`` part of ``benchmarks/parl.py`` (also runnable alone). One run, end to end, on the news
task of the sample data (headlines: the shortest texts), with the embedded SmolLM2-135M-Instruct as
both the rubric generator and the judge:

1. **warm start**: the base model's structured-output rubric sets for the training users that pass
   validation (``persetrain rubrics warmstart-data``; their share is ``valid_share_warmstart_structured``)
   -> ``persetrain sft`` (LoRA, merged). With no set passing, GRPO starts from the base model.
2. **GRPO** with ``recipes/parl/cpu_smollm2_news.yaml``: the share of rollouts whose rubric set parses and
   keeps >= 2 valid rules in the first and last fifth of the steps (``valid_share_first_fifth`` /
   ``valid_share_last_fifth``, from the per-step ``parl/valid_share`` metric), and the reward's share of
   the step time (``time/reward_s`` over TRL's ``step_time``, summed over steps).
3. **untrained**: the base model on the held-out (test) users with the ``parl`` evaluator (structured
   output, validation, scoring) -> ``max_diff_untrained``; the same users unaided (no structured output)
   -> ``valid_share_base_unaided``.
4. **trained**: the GRPO model on the held-out users with the ``parl`` evaluator -> ``max_diff_trained``.

Every GRPO rollout's reward parts are in ``runs/bench-parl/grpo/grpo/reward_parts.jsonl``; the numbers
are also written to ``runs/bench-parl/grpo/summary.json`` after each stage. Times are wall
times of this machine as it was during the run (note other load when reading them). Every run starts from
an empty ``runs/bench-parl/grpo``: a GRPO run appends to its metrics and reward-parts files and keeps its
judge's request cache, so a second run into the same folder would read both runs' steps and time a reward
served from the cache.

    python benchmarks/parl_grpo.py [--steps 12] [--warmstart-users 12] [--heldout-users N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

from data_prep.parl import prepare_parl
from data_prep.parl_synthetic import write_parl_sample
from persetrain.console import console, set_quiet
from persetrain.data import load_dataset
from persetrain.engine import load_engine
from persetrain.evaluators.base import JudgeContext
from persetrain.evaluators.parl import PARLConfig, PARLEvaluator, induce
from persetrain.models import DEFAULT_MODEL
from persetrain.tasks import rubric_metrics
from persetrain.train.grpo import REWARD_PARTS_FILE, run_grpo
from persetrain.train.runner import METRICS_FILE
from persetrain.train.sft import run_sft
from persetrain.train.warmstart import write_warmstart_data

OUT = Path("runs/bench-parl/grpo")
REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "parl" / "cpu_smollm2_news.yaml"


def _max_diff(model: str, examples, data: Path, config: PARLConfig, out: Path, seed: int) -> dict:
    engine = load_engine(model, cache_path=out / f"{out.name}-engine.sqlite")
    judgments = PARLEvaluator(config).judge(
        examples, engine, JudgeContext(data=data, split="test", system=out.name, out=out, seed=seed)
    )
    metrics = rubric_metrics(examples, judgments)
    return {
        "max_diff": metrics.get("max_diff"),
        "user_coverage": metrics.get("user_coverage"),
        "user_acc_gt": metrics.get("user_acc/gt"),
    }


def _valid_share_unaided(model: str, examples, config: PARLConfig, seed: int) -> float:
    users = induce(load_engine(model), examples, replace(config, structured=False, max_tries=1), seed)
    return sum(sum(u.valid(config.tau)) >= 2 for u in users) / len(users)


def _fifths(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    k = max(1, len(values) // 5)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def grpo_run(args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    write_parl_sample(OUT / "raw", seed=args.seed)
    prepare_parl(OUT / "raw", OUT / "data", tasks=("news",), seed=args.seed)
    data = OUT / "data" / "parl_news"
    _, test = load_dataset(data, "test")
    _, train = load_dataset(data, "train")
    test = test[: args.heldout_users]
    summary: dict = {"heldout_users": len(test)}

    def record(**values) -> None:  # after each stage, so that a run cut short keeps what it measured
        summary.update(values)
        (OUT / "summary.json").write_text(json.dumps(summary, indent=1))

    config = PARLConfig(temperature=0.6, max_new_tokens=args.max_new_tokens)
    timings = {}

    t = time.perf_counter()
    policy = args.model
    try:
        counts = write_warmstart_data(
            load_engine(args.model, cache_path=OUT / "warmstart-engine.sqlite"),
            train[: args.warmstart_users],
            OUT / "warmstart_data",
            config,
            seed=args.seed,
        )
    except ValueError as err:  # no set passed validation: GRPO starts from the base model, as recorded
        console.print(f"warm start skipped: {err}")
        counts = {"valid": 0, "valid_share": 0.0}
    if counts["valid"]:
        policy = str(
            run_sft(
                [
                    "--model_name_or_path",
                    args.model,
                    "--dataset_path",
                    str(OUT / "warmstart_data"),
                    # No LoRA dropout, as in the GRPO recipe: on this CPU dropout took a third of the forward pass.
                    "--output_dir",
                    str(OUT / "warmstart"),
                    "--use_peft",
                    "true",
                    "--lora_r",
                    "16",
                    "--lora_alpha",
                    "32",
                    "--lora_dropout",
                    "0.0",
                    # One pass at GRPO's learning rate: 2 epochs at 1e-3 left a policy whose rollouts were all the
                    # same text (entropy 0.001, reward std 0 in every group: no GRPO gradient at all).
                    "--learning_rate",
                    "2e-4",
                    "--num_train_epochs",
                    "1",
                    "--per_device_train_batch_size",
                    "1",
                    "--max_length",
                    "2048",
                    "--report_to",
                    "none",
                    "--save_strategy",
                    "no",
                    "--logging_steps",
                    "1",
                    "--activation_checkpointing",
                    "false",
                    "--auto_resume",
                    "false",
                    "--disable_tqdm",
                    "true",
                ]
            ).model_dir
        )
    timings["warmstart_s"] = time.perf_counter() - t
    record(valid_share_warmstart_structured=round(counts["valid_share"], 3), warmstart_rows=counts["valid"], **timings)

    t = time.perf_counter()
    grpo_out = OUT / "grpo"
    result = run_grpo(
        [
            "--config",
            str(RECIPE),
            "--model_name_or_path",
            policy,
            "--dataset_path",
            str(data),
            "--output_dir",
            str(grpo_out),
            "--max_steps",
            str(args.steps),
            "--auto_resume",
            "false",
            "--save_strategy",
            "no",
            "--disable_tqdm",
            "true",
        ]
    )
    timings["grpo_s"] = time.perf_counter() - t
    steps = [json.loads(line) for line in (grpo_out / METRICS_FILE).read_text().splitlines()]
    steps = [r for r in steps if r.get("event") == "log" and "parl/valid_share" in r]
    first, last = _fifths([r["parl/valid_share"] for r in steps])
    reward_s = sum(r.get("time/reward_s", 0.0) for r in steps)
    step_s = sum(r.get("step_time", 0.0) for r in steps)
    record(
        valid_share_first_fifth=first,
        valid_share_last_fifth=last,
        grpo_steps=result.global_step,
        reward_share_of_step_time=round(reward_s / step_s, 3) if step_s else None,
        **timings,
    )

    t = time.perf_counter()
    untrained = _max_diff(args.model, test, data, config, OUT / "untrained", args.seed)
    base_unaided = _valid_share_unaided(args.model, test, config, args.seed)
    timings["untrained_eval_s"] = time.perf_counter() - t
    record(
        max_diff_untrained=untrained["max_diff"],
        user_coverage_untrained=untrained["user_coverage"],
        valid_share_base_unaided=round(base_unaided, 3),
        **timings,
    )

    t = time.perf_counter()
    trained = _max_diff(str(result.model_dir), test, data, config, OUT / "trained", args.seed)
    timings["trained_eval_s"] = time.perf_counter() - t

    record(
        max_diff_trained=trained["max_diff"],
        user_coverage_trained=trained["user_coverage"],
        grpo_reward_parts_path=str(grpo_out / REWARD_PARTS_FILE),
        **{k: round(v, 1) for k, v in timings.items()},
        total_s=round(time.perf_counter() - start, 1),
    )
    console.print(f"PARL GRPO on CPU: {summary}")
    return summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps",
        type=int,
        default=12,
        help="GRPO steps, the recipe's max_steps (23-66 s each on this CPU: 12 took 10 minutes).",
    )
    parser.add_argument("--warmstart-users", type=int, default=12, help="Training users induced for the warm start.")
    parser.add_argument("--max-new-tokens", type=int, default=512, help="Longest induced rubric set (tokens).")
    parser.add_argument("--heldout-users", type=int, default=None, help="Evaluate on the first N held-out users.")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    add_arguments(parser)
    args = parser.parse_args(argv)
    set_quiet(args.quiet)
    results = grpo_run(args)
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
