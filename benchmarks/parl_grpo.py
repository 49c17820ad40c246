"""PARL GRPO on a CPU: a trained judge, warm start + GRPO of the embedded model on the SYNTHETIC sample users.

The ``grpo`` part of ``benchmarks/parl.py`` (also runnable alone). One run, end to end, on the news
task of the sample data (headlines: the shortest texts), with the embedded SmolLM2-135M-Instruct as
the rubric generator and, fine-tuned, as the judge. Held-out users (the PARL dataset's test split) are
never trained on, by the judge or the generator:

0. **judge**: ``persetrain prepare verifier`` on the training users (signature checkers as labels, rules
   in 3 of their 5 wordings) -> ``persetrain sft`` with ``recipes/verifier/cpu_smollm2_parl_news.yaml``
   (or ``--judge DIR``: an already trained one). ``judge_heldout_accuracy``: its accuracy on the held-out
   users' checks, worded in the 2 wordings it never saw; ``judge_heldout_accuracy_untrained``: the
   embedded model's on the same checks. This judge scores every later stage.
1. **warm start**: the base model's structured-output rubric sets for the training users that pass
   validation (``persetrain rubrics warmstart-data``; their share is ``valid_share_warmstart_structured``)
   -> ``persetrain sft`` (LoRA, merged). With no set passing, GRPO starts from the base model.
2. **GRPO** with ``recipes/parl/cpu_smollm2_news.yaml``: the share of rollouts whose rubric set parses and
   keeps >= 2 valid rules in the first and last fifth of the steps (``valid_share_first_fifth`` /
   ``valid_share_last_fifth``, from the per-step ``parl/valid_share`` metric), and the reward's share of
   the step time (``time/reward_s`` over TRL's ``step_time``, summed over steps).
   ``mean_d_first_fifth`` / ``mean_d_last_fifth``: the reward's discriminative part, the margin product D
   averaged per step over the rollouts that have one (>= 2 valid rules), in the first and last fifth.
3. **untrained**: the base model on the held-out (test) users with the ``parl`` evaluator (structured
   output, validation, scoring; ``--runs`` seeds of induction) -> ``max_diff_untrained`` (mean, ``_std``);
   the same users unaided (no structured output) -> ``valid_share_base_unaided``.
4. **trained**: the GRPO model the same way -> ``max_diff_trained``; ``max_diff_p_value``: one-sided
   paired t-test of trained > untrained over the seed-paired runs.

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
from data_prep.rule_verifier import prepare_verifier
from persetrain.console import console, set_quiet
from persetrain.data import load_dataset
from persetrain.engine import load_engine
from persetrain.evaluators.base import JudgeContext
from persetrain.evaluators.parl import PARLConfig, PARLEvaluator, induce
from persetrain.metrics.parl import paired_runs_t_test, parl_metrics, run_metrics
from persetrain.models import DEFAULT_MODEL
from persetrain.rewards.parl import RubricJudge
from persetrain.rewards.parl_judge_eval import judge_accuracy
from persetrain.tasks import rubric_runs
from persetrain.train.grpo import REWARD_PARTS_FILE, run_grpo
from persetrain.train.runner import METRICS_FILE
from persetrain.train.sft import run_sft
from persetrain.train.warmstart import write_warmstart_data

OUT = Path("runs/bench-parl/grpo")
REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "parl" / "cpu_smollm2_news.yaml"
JUDGE_RECIPE = REPO / "recipes" / "verifier" / "cpu_smollm2_parl_news.yaml"


def _max_diff(model: str, examples, data: Path, config: PARLConfig, out: Path, seed: int) -> dict:
    engine = load_engine(model, cache_path=out / f"{out.name}-engine.sqlite")
    judgments = PARLEvaluator(config).judge(
        examples, engine, JudgeContext(data=data, split="test", system=out.name, out=out, seed=seed)
    )
    runs = rubric_runs(examples, judgments)
    metrics = parl_metrics(runs)
    return {
        "max_diff": metrics.get("max_diff"),
        "max_diff_std": metrics.get("max_diff_std"),
        "max_diff_runs": [run_metrics(run)["max_diff"] for run in runs],
        "user_coverage": metrics.get("user_coverage"),
        "user_acc_gt": metrics.get("user_acc/gt"),
    }


def _train_judge(args: argparse.Namespace, data: Path) -> tuple[str, dict]:
    """Stage 0: the rule verifier trained on the training users, measured on the held-out users' checks."""
    prepare_verifier(OUT / "verifier_data", parl=[data], seed=args.seed)
    judge = args.judge
    if judge is None:
        steps = ["--max_steps", str(args.judge_steps)] if args.judge_steps else []
        judge = str(
            run_sft(
                ["--config", str(JUDGE_RECIPE), "--dataset_path", str(OUT / "verifier_data")]
                + ["--output_dir", str(OUT / "verifier"), "--seed", str(args.seed), *steps]
                + ["--auto_resume", "false", "--save_strategy", "no", "--disable_tqdm", "true"]
            ).model_dir
        )
    from datasets import load_from_disk

    rows = list(load_from_disk(str(OUT / "verifier_data"))["validation"])
    trained = judge_accuracy(RubricJudge(load_engine(judge)), rows)
    untrained = judge_accuracy(RubricJudge(load_engine(args.model)), rows)
    return judge, {
        "judge_heldout_accuracy": round(trained.accuracy, 4),
        "judge_heldout_yes_share": round(trained.yes_share, 4),
        "judge_heldout_per_rule": {k: round(v, 3) for k, v in trained.per_rule.items()},
        "judge_heldout_accuracy_untrained": round(untrained.accuracy, 4),
        "judge_heldout_yes_share_untrained": round(untrained.yes_share, 4),
        "judge_heldout_checks": trained.n,
    }


def _mean_d_per_step(parts_path: Path) -> list[float]:
    """Mean margin product D per GRPO step over the rollouts that have one (>= 2 valid rules)."""
    by_step: dict[int, list[float]] = {}
    for line in parts_path.read_text().splitlines():
        row = json.loads(line)
        if row.get("d") is not None:
            by_step.setdefault(row["step"], []).append(row["d"])
    return [sum(ds) / len(ds) for _, ds in sorted(by_step.items())]


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

    timings = {}
    t = time.perf_counter()
    judge, judge_measures = _train_judge(args, data)
    timings["judge_s"] = time.perf_counter() - t
    record(judge=judge, **judge_measures, **timings)
    config = PARLConfig(temperature=0.6, max_new_tokens=args.max_new_tokens, runs=args.runs, judge_model=judge)

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
            "--judge_model",
            judge,
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
    d_first, d_last = _fifths(_mean_d_per_step(grpo_out / REWARD_PARTS_FILE))
    reward_s = sum(r.get("time/reward_s", 0.0) for r in steps)
    step_s = sum(r.get("step_time", 0.0) for r in steps)
    record(
        valid_share_first_fifth=first,
        valid_share_last_fifth=last,
        mean_d_first_fifth=d_first,
        mean_d_last_fifth=d_last,
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
        max_diff_untrained_std=untrained["max_diff_std"],
        max_diff_untrained_runs=untrained["max_diff_runs"],
        user_coverage_untrained=untrained["user_coverage"],
        valid_share_base_unaided=round(base_unaided, 3),
        **timings,
    )

    t = time.perf_counter()
    trained = _max_diff(str(result.model_dir), test, data, config, OUT / "trained", args.seed)
    timings["trained_eval_s"] = time.perf_counter() - t

    record(
        max_diff_trained=trained["max_diff"],
        max_diff_trained_std=trained["max_diff_std"],
        max_diff_trained_runs=trained["max_diff_runs"],
        max_diff_p_value=paired_runs_t_test(trained["max_diff_runs"], untrained["max_diff_runs"])["p"],
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
    parser.add_argument("--runs", type=int, default=3, help="Seeds of rubric induction per evaluated generator.")
    parser.add_argument("--judge", default=None, help="A trained rule verifier to judge with (skips its training).")
    parser.add_argument(
        "--judge-steps", type=int, default=None, help="Verifier SFT steps (default: the recipe's one epoch)."
    )


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
