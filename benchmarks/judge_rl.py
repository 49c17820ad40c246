"""A judge trained by reinforcement on its own verdicts, on PrefEval topics it never saw, next to the judges trained
by supervision on the same rows.

1. Data: the training topics as verdict prompts (``persetrain prepare verdict``) and as the reward model's and
   verifier's views (``persetrain prepare preference``), the same questions; the validation pair (or ``--eval DIR``)
   held out whole, as ``benchmarks/learned_judges.py`` does. The verdict prompts by ``--view``: ``letter``
   (mcq-letter's prompt, every question in ``--orders`` orders, 2 by default; the recipe's step must hold all of a
   question's) or ``yes-no`` (the verifier's prompt about one candidate, a question's candidates one item:
   its "yes" one and one drawn "no" one, ``--balance-yes-no``, or all of them with ``--all-candidates``, in
   ``data/judge-all``; with ``--swap-persons`` its "yes" one shown to another user, gold "no", is one more "no" one,
   in ``data/judge-swap``).
2. Training, each timed: the RL judge (by the view ``recipes/verdict/cpu_smollm2_prefeval.yaml`` or
   ``cpu_smollm2_prefeval_yes_no.yaml``, GRPO with verdict-correct and verdict-consistent, from ``--start``), the
   reward model (``recipes/rm/cpu_smollm2_prefeval.yaml``) and the SFT
   verifier (``recipes/verifier/cpu_smollm2_prefeval.yaml``) on the same training rows; and the RL judge's
   supervised ceiling, the same model SFT-trained on the same verdict prompts with their gold verdict
   (``persetrain prepare verdict-sft``, the verifier's recipe) for as many prompts as the RL run samples from
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

``--folds K`` is leave-topics-out cross-validation of the yes / no RL judge over the ``--train`` topics (the 8 given
ones): the topics, sorted, are dealt into K folds; a fold's topics are judged by judges trained on the others, of
which one (``--validation-topics``, default 1) is held out of training as the validation topic its checkpoints are
chosen on (``validation_evaluator``). Per fold, once: the data and the reward model
(``recipes/rm/cpu_smollm2_prefeval.yaml``, the same training rows; not with ``--rl-only``, which leaves the summary
to the reward models already on disk); per fold and setting (``--name``), the start
(``--start``; a ``{fold}`` in it is the fold's number, so that each fold starts from a model trained on its own rows),
each judged with the ``blind`` probe; per fold and seed (``--seeds``), the RL judge, its collapse step if any and the
checkpoint it ended with. Each fold x seed result is a file (``OUT/cv/NAME/fold<k>-seed<s>.json``) that a rerun
reads instead of training again (once it is written, the run's checkpoints are deleted; the judge stays in
``rl/``); a rerun with another ``--max-eval``, or another ``--start`` under the same ``--name``, is refused rather
than set beside figures judged on another sample or gains over another start; ``--fold-ids`` runs some folds only
(another process can run the others). The last line is the summary over every result on disk: mean and spread of the RL
judge, its start and the reward model, the gain over the start, and each target.
``--rl-overrides "--key value ..."`` goes to the GRPO recipe (a shorter schedule: ``--max-steps``).

    python benchmarks/judge_rl.py [--train DIR ...] [--eval DIR] [--max-eval 300] [--seed 0] [--start MODEL] \\
        [--view letter|yes-no] [--recipe YAML] [--orders 2] [--max-steps N] [--sft-steps N] [--rl-only] \\
        [--out runs/judge-rl] [-- SFT-OVERRIDES]
    python benchmarks/judge_rl.py --folds 4 --fold-ids 0,1 --seeds 0,1 --name short40 --max-steps 40 \\
        [--max-eval 100] [--rl-overrides "--save_steps 10"] [--out runs/judge-rl]
"""

from __future__ import annotations

import argparse
import json
import shlex
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
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from data_prep.preference.prepare import prepare_preference
from data_prep.readers.prefeval import OPTIONS_DIR, topic_files
from data_prep.verdict.prepare import prepare_verdict
from data_prep.verdict.sft_view import verdict_sft
from persetrain.evaluation import load_examples
from persetrain.evaluators.registry import SystemSpec
from persetrain.io import atomic_dir, write_json
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate
from persetrain.metrics.parl import first_last_fifth
from persetrain.train.runner import METRICS_FILE

REPO = Path(__file__).resolve().parents[1]
#: By view: the RL judge's recipe, and the evaluator that reads the RL judge, its start and the SFT judge.
VIEWS = {
    "letter": (REPO / "recipes" / "verdict" / "cpu_smollm2_prefeval.yaml", "mcq-letter"),
    "yes-no": (REPO / "recipes" / "verdict" / "cpu_smollm2_prefeval_yes_no.yaml", "verifier"),
}
RM_RECIPE = RM_RECIPES["rm"]
MODEL = "embedded:smollm2-135m-instruct"
#: The share of right verdicts a GRPO step logs: verdict-correct's mean reward, also logged by verdict-correct-balanced,
#: whose own reward is weighted (``persetrain.rewards.verdict``).
VERDICT_REWARD = "verdict/accuracy"
#: Prompts a step of the SFT judge (the verifier recipe's batch).
SFT_BATCH = 8
CHECKPOINTS = f"{PREFIX_CHECKPOINT_DIR}-*"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", nargs="+", type=Path, default=GIVEN, help="PrefEval folders to train on.")
    parser.add_argument(
        "--eval", type=Path, default=None, help="PrefEval folder to evaluate on (default: a held-out pair)."
    )
    parser.add_argument("--max-eval", type=int, default=300, help="Evaluation questions (seeded sample).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--start",
        default=MODEL,
        help="The RL judge's starting point: a model or an SFT checkpoint ({fold}: the fold's number).",
    )
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
        "--swap-persons",
        action="store_true",
        help="yes-no: each question's 'yes' candidate shown to another user, gold 'no', one more 'no' to draw "
        "(prepare verdict --swap-persons); its data in data/judge-swap.",
    )
    parser.add_argument(
        "--all-candidates",
        action="store_true",
        help="yes-no: every candidate of a question, not its 'yes' one and one drawn 'no' one (prepare verdict "
        "without --balance-yes-no); its data in data/judge-all.",
    )
    parser.add_argument(
        "--rl-only",
        action="store_true",
        help="Train and judge only the RL judge (and read its start): another seed of it, without the comparisons "
        "(with --folds: without training the fold's reward model).",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/judge-rl"))
    parser.add_argument("--folds", type=int, default=None, help="Leave-topics-out cross-validation in K folds.")
    parser.add_argument("--fold-ids", default=None, help="The folds to run (comma-separated; default: all).")
    parser.add_argument("--seeds", default="0,1", help="Cross-validation: the RL judge's seeds (comma-separated).")
    parser.add_argument("--name", default="recipe", help="Cross-validation: this setting's name (its results folder).")
    parser.add_argument(
        "--validation-topics", type=int, default=1, help="Cross-validation: training topics held out for validation."
    )
    parser.add_argument("--rl-overrides", default="", help='Cross-validation: GRPO recipe overrides, "--key value".')
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
    """Run a trainer (``module``'s parser and ``main``) and copy its trained model (merged when LoRA) to ``judge``;
    seconds taken (0 when ``judge`` is already there). A model trained whole is its run's folder, so its
    ``checkpoint-N`` folders (weights and optimizer state, 1.6 GB each for the embedded model) stay behind."""
    if (judge / "config.json").is_file():
        return 0.0
    start = time.perf_counter()
    model = module.main(*module.make_parser().parse_args_and_config(argv)).trained_model()
    seconds = time.perf_counter() - start
    with atomic_dir(judge) as tmp:
        shutil.copytree(model, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(CHECKPOINTS))
    return seconds


def drop_checkpoints(run_dir: Path) -> None:
    """Delete a finished run's checkpoints: they only let a stopped run resume, and the cross-validation keeps
    each finished fold x seed's judge and result, so eight runs trained whole would otherwise hold 25 GB."""
    for checkpoint in run_dir.glob(CHECKPOINTS):
        shutil.rmtree(checkpoint)


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
        verdict_sft(judge_data, data / "judge-sft")
    times["sft"] = times.get("sft") or train_sft(args, data / "judge-sft", sft_steps)
    return sft_steps


# ------------------------------------------------------------------------------------ cross-validation
#: What each fold x seed result holds that the summary averages.
CV_FIGURES = (
    "rl_accuracy",
    "rl_blind_accuracy",
    "rl_swap_accuracy",
    "start_accuracy",
    "start_blind_accuracy",
    "rl_gain",
)

#: The gain over the start every fold x seed must reach. Both accuracies are fractions of the same questions, so a
#: gain of exactly 0.15 (9 of 60) comes out of the float subtraction a hair below it (0.6 - 0.45 = 0.1499...): the
#: target is compared with this much slack, far below one question's share.
GAIN_TARGET, FLOAT_SLACK = 0.15, 1e-9


def topic_folds(train: list[Path], k: int) -> list[list[str]]:
    """The ``--train`` topics, sorted, dealt into ``k`` folds (fold i: topics i, i + k, ...)."""
    topics = sorted({f.stem for d in train for f in topic_files(d)})
    if not 2 <= k <= len(topics):
        raise SystemExit(f"error: --folds must be 2 to {len(topics)} (the topics), not {k}")
    return [topics[i::k] for i in range(k)]


def judge_folder(args) -> str:
    """The RL judge's data folder inside a run's data: the yes / no prompts, every candidate's and the swapped-person
    rows apart from the balanced ones."""
    return "judge" + ("-all" if args.all_candidates else "") + ("-swap" if args.swap_persons else "")


def prepare_yes_no(args, data: Path, seed: int) -> None:
    """The RL judge's yes / no prompts from the reward model's verifier view (split as the reward model's data), in
    :func:`judge_folder`: balanced unless ``--all-candidates``, the swapped-person rows with ``--swap-persons``."""
    prepare_verdict(
        data / judge_folder(args),
        verifier=[data / "verifier"],
        seed=seed,
        balance_yes_no=not args.all_candidates,
        swap_persons=args.swap_persons,
    )


def fold_data(args, fold_dir: Path, test: list[str], folds: list[list[str]]) -> tuple[Path, Path, list[str]]:
    """The fold's data: ``prepare preference`` of every other topic with ``--validation-topics`` of them held out
    (the reward model's rows and the verifier view), the RL judge's yes / no prompts and validation questions from
    it (``prepare verdict``), and a PrefEval folder of the fold's own topics; and the validation topics."""
    rest = sorted(t for fold in folds for t in fold if t not in test)
    validation = rest[: args.validation_topics]
    data, eval_dir, sources = fold_dir / "data", fold_dir / "data" / "eval", fold_dir / "data" / "sources"
    files = {f.stem: f for d in args.train for f in topic_files(d)}
    for folder, topics in ((sources, rest), (eval_dir, test)):
        (folder / OPTIONS_DIR).mkdir(parents=True, exist_ok=True)
        for topic in topics:
            shutil.copy2(files[topic], folder / OPTIONS_DIR / files[topic].name)
    if not (data / "listwise").is_dir():
        prepare_preference(data, prefeval=[sources], holdout_topics=validation, seed=0)
    if not (data / judge_folder(args)).is_dir():
        prepare_yes_no(args, data, seed=0)
    return data, eval_dir, validation


def fold_reference(args, fold_dir: Path, data: Path, eval_dir: Path, name: str, start: str | None) -> dict:
    """The RL judges' start (``start``: the model ``start``, judged in the setting's folder) or the reward model
    trained on the fold's rows (``rm``, once per fold), judged on the fold's questions, person-blind too."""
    from persetrain.train import rm

    seconds = 0.0
    if name == "rm":
        seconds = train(
            rm,
            RM_RECIPE,
            ["--dataset_path", str(data / "listwise"), "--output_dir", str(fold_dir / "rm")]
            + ["--report_to", "none", "--save_strategy", "no"],
            fold_dir / "rm",
        )
    system = SystemSpec("rm", "rm", str(fold_dir / "rm")) if name == "rm" else SystemSpec(name, "verifier", start)
    folder = fold_dir if name == "rm" else fold_dir / args.name
    judged = meta_evaluate(
        MetaEvalConfig(
            data=str(eval_dir),
            out=str(folder / f"meta-eval-{name}"),
            systems=[system],
            probes=["blind"],
            max_examples=args.max_eval,
            seed=0,
        )
    )
    return {
        f"{name}_accuracy": judged["systems"][name]["metrics"]["accuracy"],
        f"{name}_blind_accuracy": judged["systems"][name]["blind"]["accuracy"],
        f"{name}_n_eval": judged["n_examples"],
        **({f"{name}_train_seconds": seconds} if seconds else {}),
    }


def read_judged(path: Path, args, start: str | None = None) -> dict:
    """A figure kept on disk by an earlier run, if it was judged on the questions this run asks for (``--max-eval``)
    and, for a start or an RL judge (``start`` given), from the start this run asks for.

    Why: a fold's start, its reward model and its RL judges are compared with each other; a rerun with another
    ``--max-eval`` or ``--start`` that read them would set accuracies on different samples, or gains over another
    start, side by side, and average them, without a word."""
    found = json.loads(path.read_text())
    if found.get("max_eval") != args.max_eval:
        raise SystemExit(
            f"error: {path} was judged with --max-eval {found.get('max_eval')}, and this run asks for --max-eval "
            f"{args.max_eval}: pass the same --max-eval, or another --out"
        )
    if start is not None and found.get("start") != start:
        raise SystemExit(
            f"error: {path} was trained or judged from --start {found.get('start')}, and this run asks for --start "
            f"{start}: pass the same --start, or another --name"
        )
    return found


def fold_folder(out: Path, fold: int, folds: int) -> Path:
    """``OUT/cv-fold<k>-of<K>``: a fold's data, its reward model (``rm.json``) and each setting's runs."""
    return out / f"cv-fold{fold}-of{folds}"


def run_folder(fold_dir: Path, name: str, seed: int) -> Path:
    """A setting's RL judge of the fold at ``seed``: its training run (``rl-run``) and its model (``rl``)."""
    return fold_dir / name / f"seed{seed}"


def cv_result_file(out: Path, name: str, fold: int, seed: int) -> Path:
    """A fold x seed's figures, which a rerun reads instead of training again."""
    return out / "cv" / name / f"fold{fold}-seed{seed}.json"


def fold_start(args, fold: int) -> str:
    """The fold's start: ``--start`` with ``{fold}`` replaced by the fold's number, so that each fold can start from
    a model trained on its own rows (an SFT verifier of ``OUT/cv-fold<k>-of<K>/data/verifier``); a start trained on
    every topic would have seen the fold's held-out ones."""
    return args.start.replace("{fold}", str(fold))


def fold_reference_cached(
    args, fold_dir: Path, data: Path, eval_dir: Path, name: str, start: str | None = None
) -> dict:
    """:func:`fold_reference`, kept in ``fold_dir/rm.json`` or the setting's ``fold_dir/NAME/start.json`` so that a
    rerun reads it (:func:`read_judged`)."""
    path = fold_dir / "rm.json" if name == "rm" else fold_dir / args.name / "start.json"
    if path.is_file():
        return read_judged(path, args, start)
    found = {**fold_reference(args, fold_dir, data, eval_dir, name, start), "max_eval": args.max_eval}
    if name == "start":
        found["start"] = start
    write_json(path, found)
    return found


def collapse_and_choice(run_dir: Path) -> dict:
    """The run's collapse (step, onset) if any, the checkpoint it ended with and each checkpoint's validation."""
    rows = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines()]
    collapse = next((r for r in rows if r.get("event") == "collapse"), None)
    validation = {r["step"]: r["validation/accuracy"] for r in rows if r.get("event") == "validation"}
    results = run_dir / "train_results.json"
    chosen = json.loads(results.read_text()).get("chosen_step") if results.is_file() else None
    return {
        "collapse_step": None if collapse is None else collapse["step"],
        "collapse_onset": None if collapse is None else collapse["onset"],
        "chosen_step": chosen,
        "validation_accuracy": validation,
        "saved_model_collapsed": collapse is not None and (chosen is None or chosen >= collapse["onset"]),
    }


def fold_seed(args, seed: int, fold_dir: Path, data: Path, eval_dir: Path, start: dict) -> dict:
    """One RL judge of the fold, trained from its start (``start["start"]``) with ``seed`` and judged on the fold's
    topics."""
    from persetrain.train import grpo

    run = run_folder(fold_dir, args.name, seed)
    argv = ["--config", str(args.recipe), "--model_name_or_path", start["start"]]
    argv += ["--dataset_path", str(data / judge_folder(args))]
    argv += ["--output_dir", str(run / "rl-run"), "--seed", str(seed)]
    argv += [] if args.max_steps is None else ["--max_steps", str(args.max_steps)]
    seconds = train_judge(grpo, [*argv, *shlex.split(args.rl_overrides)], run / "rl")
    judged = meta_evaluate(
        MetaEvalConfig(
            data=str(eval_dir),
            out=str(run / "meta-eval"),
            systems=[SystemSpec("rl", "verifier", str(run / "rl"))],
            probes=["blind", "swap"],
            max_examples=args.max_eval,
            seed=0,
        )
    )
    steps = step_logs(run / "rl-run")
    curve = [r[VERDICT_REWARD] for r in steps]
    first, last = first_last_fifth(curve)
    found = {
        **{k: v for k, v in figures(judged, "rl", "rl").items() if v is not None},
        **start,
        "rl_gain": judged["systems"]["rl"]["metrics"]["accuracy"] - start["start_accuracy"],
        **collapse_and_choice(run / "rl-run"),
        "rl_train_seconds": seconds,
        "steps": len(steps),
        "reward_first_fifth": first,
        "reward_last_fifth": last,
        "reward_curve": curve,
        "equal_group_share_curve": [r.get("frac_reward_zero_std") for r in steps],
        "verdict_entropy_curve": [r.get("verdict/entropy") for r in steps],
        "reward_time_share": reward_time_share(steps),
    }
    return found


def cv_summary(results: dict[str, dict], rm_by_fold: dict[int, dict]) -> dict:
    """Mean and spread over the fold x seed results (the reward model: over the folds it was trained in), and each
    target: no collapse in a saved model, the RL judge at least its start + 0.15 in every one, and on average at
    least the reward model of the same folds."""
    from persetrain.metrics.parl import mean_std

    summary: dict = {"runs": sorted(results), "n_runs": len(results), "rm_folds": sorted(rm_by_fold)}
    for key in CV_FIGURES:
        summary[key] = mean_std([r.get(key) for r in results.values()])
    for key in ("rm_accuracy", "rm_blind_accuracy"):
        summary[key] = mean_std([rm_by_fold[fold][key] for fold in sorted(rm_by_fold)])
    same_folds = [r["rl_accuracy"] for r in results.values() if r["fold"] in rm_by_fold]
    summary["rl_accuracy_on_rm_folds"] = mean_std(same_folds)
    summary["collapsed_saved_models"] = sorted(k for k, r in results.items() if r["saved_model_collapsed"])
    summary["collapses"] = {k: r["collapse_step"] for k, r in results.items() if r["collapse_step"] is not None}
    rm_mean = summary["rm_accuracy"]["mean"]
    summary["targets"] = {  # None: nothing measured yet (no result, or no reward model of the same folds)
        "no_collapse_in_saved_model": not summary["collapsed_saved_models"] if results else None,
        "gain_at_least_0.15_everywhere": (
            all(r["rl_gain"] >= GAIN_TARGET - FLOAT_SLACK for r in results.values()) if results else None
        ),
        "mean_at_least_rm": None if rm_mean is None else summary["rl_accuracy_on_rm_folds"]["mean"] >= rm_mean,
    }
    return summary


def cross_validate(args) -> dict:
    """Every fold x seed asked for (a result on disk is read, not trained again), then the reward model of each of
    those folds (unless ``--rl-only``), then the summary of every result on disk."""
    if args.view != "yes-no":
        raise SystemExit("error: --folds cross-validates the yes / no judge: pass --view yes-no")
    folds = topic_folds(args.train, args.folds)
    ids = range(args.folds) if args.fold_ids is None else [int(i) for i in args.fold_ids.split(",")]
    results_dir = args.out / "cv" / args.name
    for fold in ids:
        fold_dir = fold_folder(args.out, fold, args.folds)
        data, eval_dir, validation = fold_data(args, fold_dir, folds[fold], folds)
        start = fold_reference_cached(args, fold_dir, data, eval_dir, "start", fold_start(args, fold))
        for seed in (int(s) for s in args.seeds.split(",")):
            result_file = cv_result_file(args.out, args.name, fold, seed)
            if result_file.is_file():
                read_judged(result_file, args, start["start"])
                continue
            result = fold_seed(args, seed, fold_dir, data, eval_dir, start)
            result.update(fold=fold, seed=seed, test_topics=folds[fold], validation_topics=validation)
            result.update(max_steps=args.max_steps, rl_overrides=args.rl_overrides, recipe=str(args.recipe))
            result.update(max_eval=args.max_eval)
            result.update(swap_persons=args.swap_persons, all_candidates=args.all_candidates)
            write_json(result_file, result)
            drop_checkpoints(run_folder(fold_dir, args.name, seed) / "rl-run")
            print(json.dumps({k: v for k, v in result.items() if not k.endswith("_curve")}), flush=True)
        if not args.rl_only:
            fold_reference_cached(args, fold_dir, data, eval_dir, "rm")
    results = {f.stem: read_judged(f, args) for f in sorted(results_dir.glob("fold*-seed*.json"))}
    rm_by_fold = {
        r["fold"]: read_judged(rm, args)
        for r in results.values()
        if (rm := fold_folder(args.out, r["fold"], args.folds) / "rm.json").is_file()
    }
    summary = cv_summary(results, rm_by_fold)
    write_json(results_dir / "summary.json", summary)
    return summary


def main() -> None:
    args = make_parser().parse_args()
    args.recipe = args.recipe or VIEWS[args.view][0]
    if args.folds is not None:
        emit(cross_validate(args))
        return
    data, eval_dir = prepare_data(args)
    judge_data = data / judge_folder(args)
    holdout = [] if args.eval is not None else list(VALIDATION_TOPICS)  # as prepare_data splits
    if not judge_data.is_dir():
        if args.view == "letter":
            prepare_verdict(judge_data, prefeval=args.train, holdout_topics=holdout, seed=args.seed, orders=args.orders)
        else:
            prepare_yes_no(args, data, seed=args.seed)
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
