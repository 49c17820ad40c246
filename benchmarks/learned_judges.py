"""Learned judges on PrefEval topics they never saw: a reward model and a yes/no verifier trained here, on the CPU.

1. Data (``persetrain prepare preference``): the training topics' questions as listwise rows (reward model)
   and yes/no rows (verifier). By default the 8 given topics less a validation pair, which is held out whole
   and evaluated on; with ``--eval DIR`` every ``--train`` topic trains and DIR's topics are evaluated.
2. Training: two reward models, the decoder ``recipes/rm/cpu_smollm2_prefeval.yaml`` (``rm``) and the
   encoder ``recipes/rm/cpu_minilm_prefeval.yaml`` (``rm-minilm``), and the verifier
   ``recipes/verifier/cpu_smollm2_prefeval.yaml``, as they are, with this run's data and output folders
   (``train_seconds`` counts all three).
3. Judging, through ``persetrain meta-eval`` on the evaluation topics (``--max-eval N --seed S`` picks the
   questions ``persetrain evaluate --max-examples N --seed S`` picks): the reward models, the verifier and
   the ``odd-one-out`` baseline, each also with the person removed (``blind``) and with another question's
   preference (``swap``). The untrained references, zero-shot letter choice (``mcq-letter``) and PREF, run
   on a seeded subset of at least 100 of the same questions (``--reference-questions``).
4. Speed (``benchmarks/rm_speed.py``): the listwise path against TRL's ``RewardTrainer`` per question,
   their losses on the same questions, and the listwise path's share of the fp32 matmul rate.

``--out DIR`` keeps everything: ``DIR/rm``, ``DIR/rm-minilm`` and ``DIR/verifier/merged`` are the
checkpoints, so ``persetrain evaluate --evaluator rm --model DIR/rm --data DIR/data/eval --max-examples N --seed S``
reproduces ``rm_accuracy``. A rerun skips what is already there (finished trainings, judged systems).
The last line printed is one JSON object.

    python benchmarks/learned_judges.py [--train DIR ...] [--eval DIR] [--max-eval 300] [--seed 0] \\
        [--out runs/learned-judges]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from common import emit  # beside this script
from rm_speed import measure as measure_speed  # beside this script

from data_prep.preference.prepare import prepare_preference
from data_prep.readers.prefeval import OPTIONS_DIR, topic_files
from persetrain.evaluation import EvaluationConfig, evaluate, load_examples, random_sample
from persetrain.evaluators.registry import SystemSpec
from persetrain.io import write_json
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate

REPO = Path(__file__).resolve().parents[1]
GIVEN = [REPO / "data" / "prefeval" / "dev", REPO / "data" / "prefeval" / "train"]
VALIDATION_TOPICS = ("lifestyle_dietary", "travel_restaurant")
#: The reward models trained, by system name: the decoder (``rm_*`` keys) and the encoder (``rm_minilm_*``).
RM_RECIPES = {
    "rm": REPO / "recipes" / "rm" / "cpu_smollm2_prefeval.yaml",
    "rm-minilm": REPO / "recipes" / "rm" / "cpu_minilm_prefeval.yaml",
}
VERIFIER_RECIPE = REPO / "recipes" / "verifier" / "cpu_smollm2_prefeval.yaml"
MODEL = "embedded:smollm2-135m-instruct"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", nargs="+", type=Path, default=GIVEN, help="PrefEval folders to train on.")
    parser.add_argument(
        "--eval",
        type=Path,
        default=None,
        help=f"PrefEval folder to evaluate on; default: {', '.join(VALIDATION_TOPICS)} of --train, "
        "held out of training.",
    )
    parser.add_argument("--max-eval", type=int, default=300, help="Evaluation questions (seeded sample).")
    parser.add_argument(
        "--reference-questions",
        type=int,
        default=100,
        help="Questions of that sample for the untrained references (PREF, zero-shot).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--verifier-rows",
        type=int,
        default=600,
        help="Yes/no rows the verifier trains on (a seeded sample; the CPU budget).",
    )
    parser.add_argument("--speed-questions", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("runs/learned-judges"))
    return parser


def prepare_data(args) -> tuple[Path, Path]:
    """The training datasets and a PrefEval folder holding only the evaluation topics."""
    data, eval_dir = args.out / "data", args.out / "data" / "eval"
    if args.eval is None:
        holdout = list(VALIDATION_TOPICS)
        sources = [f for d in args.train for f in topic_files(d) if f.stem in holdout]
    else:
        sources = topic_files(args.eval)
        holdout = []
        overlap = {f.stem for f in sources} & {f.stem for d in args.train for f in topic_files(d)}
        if overlap:
            raise SystemExit(
                f"error: --eval shares topics with --train ({', '.join(sorted(overlap))}): whole topics must stay apart"
            )
    if not (data / "listwise").is_dir():
        prepare_preference(data, prefeval=args.train, holdout_topics=holdout, seed=args.seed)
    (eval_dir / OPTIONS_DIR).mkdir(parents=True, exist_ok=True)
    for f in sources:
        shutil.copy2(f, eval_dir / OPTIONS_DIR / f.name)
    return data, eval_dir


def train(module, recipe: Path, overrides: list[str], model_dir: Path) -> float:
    """Run a recipe through its trainer's parser and ``main``; seconds taken (0 when already trained)."""
    if (model_dir / "config.json").is_file():
        return 0.0
    start = time.perf_counter()
    module.main(*module.make_parser().parse_args_and_config(["--config", str(recipe), *overrides])).trained_model()
    return time.perf_counter() - start


def accuracy(metrics: dict, system: str) -> float:
    return metrics["systems"][system]["metrics"]["accuracy"]


def key_of(system: str) -> str:
    """A system's name as the prefix of its result keys (``rm-minilm`` -> ``rm_minilm``)."""
    return system.replace("-", "_")


def rm_figures(metrics: dict, system: str) -> dict[str, float]:
    """A reward model's accuracy, its blind and swap accuracies and its seconds per question, under keys named
    after the system (``rm-minilm`` -> ``rm_minilm_accuracy``)."""
    found = metrics["systems"][system]
    key = key_of(system)
    return {
        f"{key}_accuracy": found["metrics"]["accuracy"],
        f"{key}_blind_accuracy": found["blind"]["accuracy"],
        f"{key}_swap_accuracy": found["swap"]["accuracy"],
        f"{key}_seconds_per_question": found["metrics"]["cost"]["seconds"] / metrics["n_examples"],
    }


def main() -> None:
    from persetrain.train import rm, sft

    args = make_parser().parse_args()
    data, eval_dir = prepare_data(args)
    times_file = args.out / "train_seconds.json"
    times = json.loads(times_file.read_text()) if times_file.is_file() else {}
    common = ["--report_to", "none", "--save_strategy", "no"]
    for name, recipe in RM_RECIPES.items():
        times[name] = times.get(name) or train(
            rm,
            recipe,
            ["--dataset_path", str(data / "listwise"), "--output_dir", str(args.out / name), *common],
            args.out / name,
        )
    times["verifier"] = times.get("verifier") or train(
        sft,
        VERIFIER_RECIPE,
        [
            "--dataset_path",
            str(data / "verifier"),
            "--output_dir",
            str(args.out / "verifier"),
            "--max_train_samples",
            str(args.verifier_rows),
            *common,
        ],
        args.out / "verifier" / "merged",
    )
    write_json(times_file, times)

    systems = [
        *(SystemSpec(name, "rm", str(args.out / name)) for name in RM_RECIPES),
        SystemSpec("verifier", "verifier", str(args.out / "verifier" / "merged")),
        SystemSpec("odd-one-out", "odd-one-out"),
    ]
    judged = meta_evaluate(
        MetaEvalConfig(
            data=str(eval_dir),
            out=str(args.out / "meta-eval"),
            systems=systems,
            probes=["blind", "swap"],
            max_examples=args.max_eval,
            seed=args.seed,
        )
    )
    _, sample = load_examples(
        EvaluationConfig(data=str(eval_dir), out="", systems=[], max_examples=args.max_eval, seed=args.seed)
    )
    references = random_sample(sample, max(min(args.reference_questions, len(sample)), 0), args.seed)
    untrained = evaluate(
        EvaluationConfig(
            data=str(eval_dir),
            out=str(args.out / "references"),
            seed=args.seed,
            systems=[SystemSpec("zero-shot", "mcq-letter", MODEL), SystemSpec("pref", "pref", MODEL)],
        ),
        examples=references,
    )

    n = judged["n_examples"]
    result = {
        **{key: value for name in RM_RECIPES for key, value in rm_figures(judged, name).items()},
        "verifier_accuracy": accuracy(judged, "verifier"),
        "verifier_blind_accuracy": judged["systems"]["verifier"]["blind"]["accuracy"],
        "verifier_swap_accuracy": judged["systems"]["verifier"]["swap"]["accuracy"],
        "odd_one_out_accuracy": accuracy(judged, "odd-one-out"),
        "zero_shot_accuracy": untrained["systems"]["zero-shot"]["accuracy"],
        "pref_accuracy": untrained["systems"]["pref"]["accuracy"],
        "verifier_seconds_per_question": judged["systems"]["verifier"]["metrics"]["cost"]["seconds"] / n,
        "pref_seconds_per_question": untrained["systems"]["pref"]["cost"]["seconds"] / len(references),
        "train_seconds": sum(times.values()),
        **{f"{key_of(name)}_train_seconds": times[name] for name in RM_RECIPES},
        "verifier_train_seconds": times["verifier"],
        "n_eval": n,
        "n_reference": len(references),
        "eval_topics": sorted({ex.topic for ex in sample}),
    }
    result.update(measure_speed(_listwise_train(data), MODEL, args.speed_questions))
    write_json(args.out / "result.json", result)
    emit(result)


def _listwise_train(data: Path):
    from datasets import load_from_disk

    return load_from_disk(str(data / "listwise"))["train"]


if __name__ == "__main__":
    main()
