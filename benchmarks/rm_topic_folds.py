"""A reward-model recipe's accuracy on PrefEval topics it never saw, by cross-validation over the training topics.

``benchmarks/learned_judges.py`` measures a recipe on the validation pair of topics; choosing a recipe by that
figure would fit the validation pair (113 questions, a standard error of about 0.045). This script measures a
recipe without it: the 6 given topics outside the validation pair are cut into 3 folds of 2 whole topics, and
each fold is judged by a model trained on the other 4 (``--holdout-topics`` of ``persetrain prepare
preference``), through ``persetrain meta-eval`` with the ``blind`` and ``swap`` probes, next to the lexical
``odd-one-out`` baseline on the same questions. The pooled figures (every question of the 6 topics judged
once) are what a setting is chosen by.

    python benchmarks/rm_topic_folds.py --recipe recipes/rm/cpu_minilm_prefeval.yaml --name minilm \\
        [--folds 0,1,2] [--out runs/rm-topic-folds] [-- --key value ...]

Arguments after ``--`` override the recipe (``-- --contrast_persons 4``). A rerun with the same ``--name``
skips the folds already judged. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from common import emit  # beside this script
from learned_judges import GIVEN, VALIDATION_TOPICS  # beside this script

from data_prep.preference.prepare import prepare_preference
from data_prep.readers.prefeval import OPTIONS_DIR, topic_files
from persetrain.evaluation import EvaluationConfig, evaluate
from persetrain.evaluators.registry import SystemSpec
from persetrain.io import write_json
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate

#: The training topics in folds of two whole topics (31 + 54, 51 + 36 and 52 + 54 questions).
FOLDS = (
    ("education_learning_styles", "shop_fashion"),
    ("entertain_games", "professional_work_location_style"),
    ("lifestyle_fit", "travel_hotel"),
)
FIGURES = ("accuracy", "blind_accuracy", "swap_accuracy", "odd_one_out_accuracy")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", type=Path, required=True, help="A reward-model recipe (recipes/rm/*.yaml).")
    parser.add_argument("--name", required=True, help="This setting's name: its results file and run folders.")
    parser.add_argument("--folds", default="0,1,2", help="Which folds to run (comma-separated indices).")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("runs/rm-topic-folds"))
    parser.add_argument("overrides", nargs="*", help="Recipe overrides, after '--'.")
    return parser


def fold_data(out: Path, fold: int, seed: int) -> tuple[Path, Path]:
    """The fold's training data (every given topic but the validation pair and the fold's) and a PrefEval
    folder holding the fold's topics."""
    data = out / f"data-fold{fold}"
    if not (data / "listwise").is_dir():
        holdout = sorted({*VALIDATION_TOPICS, *FOLDS[fold]})
        prepare_preference(data, prefeval=GIVEN, holdout_topics=holdout, seed=seed)
    judged = data / "judged"
    if not (judged / OPTIONS_DIR).is_dir():
        (judged / OPTIONS_DIR).mkdir(parents=True)
        for f in (f for d in GIVEN for f in topic_files(d) if f.stem in FOLDS[fold]):
            shutil.copy2(f, judged / OPTIONS_DIR / f.name)
    return data, judged


def run_fold(args, fold: int) -> dict:
    """Train on the other folds' topics, judge this fold's questions with the probes; the model is not kept."""
    from persetrain.train import rm

    data, judged = fold_data(args.out, fold, args.seed)
    run = args.out / f"{args.name}-fold{fold}"
    start = time.perf_counter()
    overrides = ["--dataset_path", str(data / "listwise"), "--output_dir", str(run / "model")]
    overrides += ["--report_to", "none", "--save_strategy", "no", *args.overrides]
    rm.main(*rm.make_parser().parse_args_and_config(["--config", str(args.recipe), *overrides])).trained_model()
    train_seconds = time.perf_counter() - start
    metrics = meta_evaluate(
        MetaEvalConfig(
            data=str(judged),
            out=str(run / "meta-eval"),
            systems=[SystemSpec("rm", "rm", str(run / "model"))],
            probes=["blind", "swap"],
            seed=args.seed,
        )
    )
    shutil.rmtree(run / "model")
    found = metrics["systems"]["rm"]
    return {
        "topics": list(FOLDS[fold]),
        "n": metrics["n_examples"],
        "accuracy": found["metrics"]["accuracy"],
        "blind_accuracy": found["blind"]["accuracy"],
        "swap_accuracy": found["swap"]["accuracy"],
        "train_seconds": train_seconds,
    }


def odd_one_out(out: Path, fold: int, seed: int) -> float:
    """The lexical baseline's accuracy on a fold (it never reads the person nor trains: judged once per fold)."""
    _, judged = fold_data(out, fold, seed)
    run = out / f"odd-one-out-fold{fold}"
    if not (run / "metrics.json").is_file():
        evaluate(EvaluationConfig(data=str(judged), out=str(run), systems=[SystemSpec("odd-one-out", "odd-one-out")]))
    return json.loads((run / "metrics.json").read_text())["systems"]["odd-one-out"]["accuracy"]


def main() -> None:
    args = make_parser().parse_args()
    results_file = args.out / f"{args.name}.json"
    folds = json.loads(results_file.read_text()) if results_file.is_file() else {}
    for fold in (int(f) for f in args.folds.split(",")):
        if str(fold) not in folds:
            folds[str(fold)] = run_fold(args, fold)
            write_json(results_file, folds)
    n = sum(f["n"] for f in folds.values())
    for fold, found in folds.items():
        found["odd_one_out_accuracy"] = odd_one_out(args.out, int(fold), args.seed)
    pooled = {key: sum(f[key] * f["n"] for f in folds.values()) / n for key in FIGURES}
    for fold, found in sorted(folds.items()):
        print(
            f"fold {fold} ({' + '.join(found['topics'])}, {found['n']} questions): "
            + ", ".join(f"{key} {found[key]:.3f}" for key in FIGURES)
        )
    emit(
        {
            "name": args.name,
            "recipe": str(args.recipe),
            "overrides": args.overrides,
            "n": n,
            **pooled,
            "folds": folds,
        }
    )


if __name__ == "__main__":
    main()
