"""A judge trained by reinforcement on its own verdicts, on PrefEval topics it never saw, next to the judges trained
by supervision on the same rows.

1. Data: the training topics as verdict prompts (``persetrain prepare judge``) and as the reward model's and
   verifier's views (``persetrain prepare preference``), the same questions; the validation pair (or ``--eval DIR``)
   held out whole, as ``benchmarks/learned_judges.py`` does. The verdict prompts by ``--view``: ``letter``
   (mcq-letter's prompt, every question in ``--orders`` orders, 2 by default; the recipe's step must hold all of a
   question's) or ``yes-no`` (the verifier's prompt about one candidate, a question's candidates one item:
   its "yes" one and one drawn "no" one, ``--balance-yes-no``).
2. Training, each timed: the RL judge (by the view ``recipes/judge/cpu_smollm2_prefeval.yaml`` or
   ``cpu_smollm2_prefeval_yes_no.yaml``, GRPO with judge-verdict and judge-consistent, from ``--start``), the
   reward model (``recipes/rm/cpu_smollm2_prefeval.yaml``) and the SFT
   verifier (``recipes/verifier/cpu_smollm2_prefeval.yaml``) on the same training rows; and the RL judge's
   supervised ceiling, the same model SFT-trained on the same verdict prompts with their gold verdict
   (``persetrain prepare judge-sft``, the verifier's recipe) for as many prompts as the RL run samples from
   (``--sft-steps``): told the answer where GRPO learns only whether its own was right.
3. Judging, through ``persetrain meta-eval`` on the held-out questions (``--max-eval N --seed S`` picks the questions
   ``persetrain evaluate --max-examples N --seed S`` picks): the RL judge, its starting point and the SFT judge of
   the same view read by ``mcq-letter`` (``letter``) or ``verifier`` (``yes-no``), the verifier by ``verifier``,
   the reward model by ``rm``; each with its accuracy
   person-blind and preference-swapped and its position flip rate (the options reversed); and the three RL-view
   judges' accuracy on the training questions themselves (``*_train_accuracy``), which tells a judge that did not
   learn the format (chance there too) from one that learned its training topics and does not carry; next to them
   each letter's accuracy as a judge that always answers it (``constant_letter_*accuracy``), the floor a judge
   that answers one position (flip rate 1) scores without reading anything.
4. The reward curve: the mean verdict reward per GRPO step, its first and last fifth, and the rewards' share of a
   step's wall time.

Arguments after ``--`` override the SFT judge's recipe (``-- --use_peft false --learning_rate 1e-4``: full
fine-tuning). ``--out DIR`` keeps everything; ``DIR/rl`` is the RL judge's merged model (``DIR/sft`` the SFT
judge's), so that
``persetrain evaluate --evaluator mcq-letter --model DIR/rl --data DIR/data/eval --max-examples N --seed S``
(``--evaluator verifier`` for ``--view yes-no``) reproduces ``rl_accuracy``. A rerun skips finished trainings and
judged systems. ``--rl-only`` trains and judges the RL judge alone (and reads its start): another seed of it costs
the RL run and its judging, without the three comparisons. The last line printed is one JSON object.

    python benchmarks/judge_rl.py [--train DIR ...] [--eval DIR] [--max-eval 300] [--seed 0] [--start MODEL] \\
        [--view letter|yes-no] [--recipe YAML] [--orders 2] [--max-steps N] [--sft-steps N] [--rl-only] \\
        [--out runs/judge-rl] [-- SFT-OVERRIDES]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from collections import Counter
from pathlib import Path
from string import ascii_uppercase

from common import emit  # beside this script
from learned_judges import (
    GIVEN,
    RM_RECIPES,
    VALIDATION_TOPICS,
    VERIFIER_RECIPE,
    prepare_data,
    train,
)  # beside this script

from data_prep.judge.prepare import prepare_judge
from data_prep.judge.sft_view import judge_sft
from data_prep.readers.prefeval import OPTIONS_DIR, topic_files
from persetrain.evaluation import load_examples
from persetrain.evaluators.registry import SystemSpec
from persetrain.io import atomic_dir, write_json
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate
from persetrain.metrics.parl import first_last_fifth
from persetrain.train.runner import METRICS_FILE

REPO = Path(__file__).resolve().parents[1]
#: By view: the RL judge's recipe, and the evaluator that reads the RL judge, its start and the SFT judge.
VIEWS = {
    "letter": (REPO / "recipes" / "judge" / "cpu_smollm2_prefeval.yaml", "mcq-letter"),
    "yes-no": (REPO / "recipes" / "judge" / "cpu_smollm2_prefeval_yes_no.yaml", "verifier"),
}
RM_RECIPE = RM_RECIPES["rm"]
MODEL = "embedded:smollm2-135m-instruct"
#: What TRL logs per step for the judge-verdict reward (its function's name).
VERDICT_REWARD = "rewards/judge_verdict/mean"
#: Prompts a step of the SFT judge (the verifier recipe's batch).
SFT_BATCH = 8


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", nargs="+", type=Path, default=GIVEN, help="PrefEval folders to train on.")
    parser.add_argument(
        "--eval", type=Path, default=None, help="PrefEval folder to evaluate on (default: a held-out pair)."
    )
    parser.add_argument("--max-eval", type=int, default=300, help="Evaluation questions (seeded sample).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", default=MODEL, help="The RL judge's starting point: a model or an SFT checkpoint.")
    parser.add_argument(
        "--view",
        choices=list(VIEWS),
        default="letter",
        help="letter: choose among the options; yes-no: judge one candidate (p(yes) ranks a question's).",
    )
    parser.add_argument("--recipe", type=Path, default=None, help="The RL judge's GRPO recipe (default: the view's).")
    parser.add_argument(
        "--orders",
        type=int,
        default=2,
        help="Orders of each training question's options (a GRPO step must hold all of a question's: the recipe's).",
    )
    parser.add_argument("--max-steps", type=int, default=None, help="GRPO steps (default: the recipe's).")
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=None,
        help="Steps of the SFT judge (8 prompts each; default: as many prompts as the RL run samples from).",
    )
    parser.add_argument(
        "--verifier-rows", type=int, default=600, help="Yes/no rows the verifier trains on (as learned_judges.py)."
    )
    parser.add_argument(
        "--rl-only",
        action="store_true",
        help="Train and judge only the RL judge (and read its start): another seed of it, without the comparisons.",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/judge-rl"))
    parser.add_argument("sft_overrides", nargs="*", help="The SFT judge's recipe overrides, after '--'.")
    return parser


def step_logs(run_dir: Path) -> list[dict]:
    """Each logged GRPO step's record, in step order, each step once (resume trims the log)."""
    rows = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]
    by_step = {r["step"]: r for r in rows if r.get("event") == "log" and VERDICT_REWARD in r}
    return [by_step[step] for step in sorted(by_step)]


def reward_time_share(steps: list[dict]) -> float:
    """The rewards' share of a GRPO step's wall time (TRL's ``step_time``, the trainer's ``time/reward_s``)."""
    return sum(r["time/reward_s"] for r in steps) / sum(r["step_time"] for r in steps)


def train_judge(module, argv: list[str], judge: Path) -> float:
    """Run a trainer (``module``'s parser and ``main``) and copy its trained model (merged when LoRA) whole to
    ``judge``; seconds taken (0 when ``judge`` is already there)."""
    if (judge / "config.json").is_file():
        return 0.0
    start = time.perf_counter()
    model = module.main(*module.make_parser().parse_args_and_config(argv)).trained_model()
    seconds = time.perf_counter() - start
    with atomic_dir(judge) as tmp:
        shutil.copytree(model, tmp, dirs_exist_ok=True)
    return seconds


def train_rl(args, data: Path) -> float:
    """GRPO from ``--start``, the judge in ``out/rl``."""
    from persetrain.train import grpo

    steps = [] if args.max_steps is None else ["--max_steps", str(args.max_steps)]
    argv = ["--config", str(args.recipe), "--model_name_or_path", args.start, "--dataset_path", str(data)]
    argv += ["--output_dir", str(args.out / "rl-run"), "--seed", str(args.seed), *steps]
    return train_judge(grpo, argv, args.out / "rl")


def train_sft(args, data: Path, steps: int) -> float:
    """The SFT judge of the RL judge's view (the verifier's recipe, ``args.sft_overrides`` on top) on the verdict
    prompts with their gold verdict, the judge in ``out/sft``."""
    from persetrain.train import sft

    argv = ["--config", str(VERIFIER_RECIPE), "--dataset_path", str(data), "--output_dir", str(args.out / "sft-run")]
    argv += ["--seed", str(args.seed), "--max_steps", str(steps), "--per_device_train_batch_size", str(SFT_BATCH)]
    argv += ["--report_to", "none", "--save_strategy", "no", *args.sft_overrides]
    return train_judge(sft, argv, args.out / "sft")


def training_questions(args, data: Path, holdout: list[str]) -> Path:
    """A PrefEval folder of the training topics' questions, for the RL-view judges' in-sample accuracy."""
    folder = data / "train-eval"
    (folder / OPTIONS_DIR).mkdir(parents=True, exist_ok=True)
    for f in (f for d in args.train for f in topic_files(d) if f.stem not in holdout):
        shutil.copy2(f, folder / OPTIONS_DIR / f.name)
    return folder


def rl_prompts(recipe: Path, max_steps: int | None) -> int:
    """The prompts an RL run samples from (one process): steps x rollouts a step / rollouts a prompt, from the
    recipe as the GRPO trainer's parser reads it (TRL's defaults filled in)."""
    from persetrain.train import grpo

    training = grpo.make_parser().parse_args_and_config(["--config", str(recipe)])[1]
    batch = training.per_device_train_batch_size * training.gradient_accumulation_steps
    return (max_steps or training.max_steps) * batch // training.num_generations


def figures(judged: dict, system: str, key: str) -> dict[str, float]:
    found = judged["systems"][system]
    return {
        f"{key}_accuracy": found["metrics"]["accuracy"],
        f"{key}_blind_accuracy": found["blind"]["accuracy"],
        f"{key}_swap_accuracy": found["swap"]["accuracy"],
        f"{key}_flip_rate": found.get("flip_rate"),
    }


def constant_letter_accuracy(config: MetaEvalConfig) -> dict[str, float]:
    """Each letter's accuracy as a judge that always answers it, on the questions ``config`` judges.

    A letter judge whose flip rate is 1 answers one position whatever the options, and scores that letter's share
    of the gold: the floor it has to clear to have read anything, which is not its untrained start's accuracy."""
    examples = load_examples(config)[1]
    counts = Counter(ex.gold for ex in examples)
    letters = ascii_uppercase[: max(len(ex.options) for ex in examples)]
    return {letter: counts[i] / len(examples) for i, letter in enumerate(letters)}


def train_comparisons(args, data: Path, judge_data: Path, times: dict) -> int:
    """The reward model, the SFT verifier and the RL judge's SFT ceiling on the same rows, each timed into
    ``times``; the SFT judge's steps."""
    from persetrain.train import rm, sft

    common = ["--report_to", "none", "--save_strategy", "no"]
    times["rm"] = times.get("rm") or train(
        rm,
        RM_RECIPE,
        ["--dataset_path", str(data / "listwise"), "--output_dir", str(args.out / "rm"), *common],
        args.out / "rm",
    )
    times["verifier"] = times.get("verifier") or train(
        sft,
        VERIFIER_RECIPE,
        ["--dataset_path", str(data / "verifier"), "--output_dir", str(args.out / "verifier")]
        + ["--max_train_samples", str(args.verifier_rows), *common],
        args.out / "verifier" / "merged",
    )
    sft_steps = args.sft_steps or -(-rl_prompts(args.recipe, args.max_steps) // SFT_BATCH)
    if not (data / "judge-sft").is_dir():
        judge_sft(judge_data, data / "judge-sft")
    times["sft"] = times.get("sft") or train_sft(args, data / "judge-sft", sft_steps)
    return sft_steps


def main() -> None:
    args = make_parser().parse_args()
    args.recipe = args.recipe or VIEWS[args.view][0]
    data, eval_dir = prepare_data(args)
    judge_data = data / "judge"
    holdout = [] if args.eval is not None else list(VALIDATION_TOPICS)  # as prepare_data splits
    if not judge_data.is_dir():
        if args.view == "letter":
            prepare_judge(judge_data, prefeval=args.train, holdout_topics=holdout, seed=args.seed, orders=args.orders)
        else:  # the reward model's verifier view: split as the reward model's data
            prepare_judge(judge_data, verifier=[data / "verifier"], seed=args.seed, balance_yes_no=True)
    times_file = args.out / "train_seconds.json"
    times = json.loads(times_file.read_text()) if times_file.is_file() else {}
    times["rl"] = times.get("rl") or train_rl(args, judge_data)
    write_json(times_file, times)
    evaluator = VIEWS[args.view][1]
    judges = [SystemSpec("rl", evaluator, str(args.out / "rl")), SystemSpec("start", evaluator, args.start)]
    others: list[SystemSpec] = []
    sft_steps = None
    if not args.rl_only:
        sft_steps = train_comparisons(args, data, judge_data, times)
        write_json(times_file, times)
        judges.append(SystemSpec("sft", evaluator, str(args.out / "sft")))
        others = [
            SystemSpec("verifier", "verifier", str(args.out / "verifier" / "merged")),
            SystemSpec("rm", "rm", str(args.out / "rm")),
        ]

    held_out = MetaEvalConfig(
        data=str(eval_dir),
        out=str(args.out / "meta-eval"),
        systems=[*judges, *others],
        probes=["flip", "blind", "swap"],
        max_examples=args.max_eval,
        seed=args.seed,
    )
    in_sample = MetaEvalConfig(
        data=str(training_questions(args, data, holdout)),
        out=str(args.out / "meta-eval-train"),
        systems=judges,
        probes=[],
        max_examples=args.max_eval,
        seed=args.seed,
    )
    judged, judged_train = meta_evaluate(held_out), meta_evaluate(in_sample)
    steps = step_logs(args.out / "rl-run")
    curve = [r[VERDICT_REWARD] for r in steps]
    first, last = first_last_fifth(curve)
    result = {
        "view": args.view,
        **figures(judged, "rl", "rl"),
        **{k: v for k, v in figures(judged, "start", "start").items() if k in ("start_accuracy", "start_flip_rate")},
        **{
            k: v
            for j in held_out.systems
            if j.name not in ("rl", "start")
            for k, v in figures(judged, j.name, j.name).items()
        },
        **{f"{j.name}_train_accuracy": judged_train["systems"][j.name]["metrics"]["accuracy"] for j in judges},
        "n_train_eval": judged_train["n_examples"],
        "constant_letter_accuracy": constant_letter_accuracy(held_out),
        "constant_letter_train_accuracy": constant_letter_accuracy(in_sample),
        **{f"{name}_train_seconds": seconds for name, seconds in times.items()},
        **({} if sft_steps is None else {"sft_steps": sft_steps}),
        "reward_first_fifth": first,
        "reward_last_fifth": last,
        "reward_curve": curve,
        "reward_time_share": reward_time_share(steps),
        "n_eval": judged["n_examples"],
    }
    write_json(args.out / "result.json", result)
    emit(result)


if __name__ == "__main__":
    main()
