"""The RL judges of a leave-topics-out cross-validation, extrapolated away from their start, on topics they never saw.

``benchmarks/judge_rl.py --folds`` leaves each fold x seed's RL judge in ``OUT/cv-fold<k>-of<K>/NAME/seed<s>/rl``.
Its KL term holds it near its start; if the direction training moved it in carries to unseen topics and the step
was only short, going further along it carries more, at no training cost. This is ExPO (Zheng et al., 2024,
"Weak-to-Strong Extrapolation Expedites Alignment"): the weights ``start + alpha * (judge - start)``, every tensor,
``alpha`` 1 being the judge itself, 0 its start, above 1 an extrapolation, below 1 an interpolation toward the start
(WiSE-FT). Each ``--alphas`` value is judged, by the evaluator that reads the judge (``verifier``), on

- the run's validation topic: every question of the one its checkpoints were chosen on (the ``validation_data``
  its resolved config names, by default ``<dataset_path>/questions``; the training itself judged a sample);
- its fold's held-out topics: the questions ``judge_rl.py`` judged it on (its ``--max-eval`` and seed), person-blind
  too.

With ``--soup`` a fold's judge is the mean of its seeds' judges, every tensor, as ``persetrain models soup`` takes it
(a uniform model soup, Wortsman et al., 2022, "Model soups"): judges trained from one start on the same rows in
different orders may sit in one basin, where their average keeps what each learned and drops what each fitted to its
own rollouts, at no training cost. The soup is then moved along ``soup - start`` as a single judge is; all its seeds
judged the same held-out questions from the same start, and its validation topic is their fold's.

Per run, ``alpha`` is chosen on the validation topic (the highest accuracy; a tie goes to the smaller step), so the
held-out figure of the chosen one is the figure a user who extrapolated would report. Each fold x seed's (or fold's
soup's) figures are a file (``OUT/cv/NAME/extrapolated/fold<k>-seed<s>.json``, ``fold<k>-soup<s>-<t>.json``) that a
rerun extends with the values it lacks; an extrapolated model lives only while it is judged. The last line is one
JSON object: per ``alpha`` the mean over the runs, the choice per run and its mean, and the reward models of the same
folds that ``judge_rl.py`` left on disk.

    python benchmarks/judge_extrapolation.py --folds 4 --fold-ids 1,2 --seeds 0 --name recipe --alphas 1,2,3,4 \\
        [--soup] [--out runs/judge-rl]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from common import emit  # beside this script
from judge_rl import cv_result_file, fold_folder, run_folder  # beside this script

from data_prep.verdict.prepare import QUESTIONS_DIR
from persetrain.evaluation import EvaluationConfig, evaluate
from persetrain.evaluators.registry import SystemSpec
from persetrain.io import InputError, write_json
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate
from persetrain.metrics.parl import mean_std
from persetrain.models import local_weights_dir
from persetrain.soup import average, read_weights, save_model

#: The evaluator that reads a yes / no judge (judge_rl.py's ``yes-no`` view).
EVALUATOR = "verifier"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/judge-rl"), help="judge_rl.py's --out.")
    parser.add_argument("--folds", type=int, required=True, help="judge_rl.py's --folds K.")
    parser.add_argument("--fold-ids", required=True, help="The folds to read (comma-separated).")
    parser.add_argument("--seeds", default="0", help="The RL judges' seeds (comma-separated).")
    parser.add_argument("--name", default="recipe", help="judge_rl.py's --name: the setting whose judges to read.")
    parser.add_argument(
        "--alphas", default="1,2,3,4", help="Steps along judge - start (comma-separated; 1: the judge, 0: its start)."
    )
    parser.add_argument(
        "--soup", action="store_true", help="Average each fold's seeds into one judge first: one run per fold."
    )
    return parser


def extrapolate(
    start: dict[str, torch.Tensor], trained: dict[str, torch.Tensor], judge: Path, alpha: float, out: Path
) -> None:
    """``start + alpha * (trained - start)`` for every tensor, in the judge's dtype, saved with the config and
    tokenizer of the judge's folder ``judge`` in ``out``. Written as ``(1 - alpha) * start + alpha * trained`` in
    float32, so that ``alpha`` 1 gives the judge's weights and 0 its start's exactly (``start + (trained - start)``
    can miss ``trained`` by a rounding)."""
    if trained.keys() != start.keys():
        raise InputError(judge, f"its tensors are not its start's ({len(trained)} against {len(start)})")
    moved = {
        name: ((1 - alpha) * start[name].float() + alpha * tensor.float()).to(tensor.dtype)
        for name, tensor in trained.items()
    }
    save_model(moved, judge, out)


def validation_questions(run_dir: Path) -> tuple[str, str]:
    """The questions and split the run chose its checkpoints on, as its resolved config names them."""
    config = json.loads((run_dir / "resolved_config.json").read_text())
    data = config["training"]["validation_data"] or str(Path(config["script"]["dataset_path"]) / QUESTIONS_DIR)
    return data, config["training"]["validation_split"]


def judge(model: Path, run_dir: Path, eval_dir: Path, max_eval: int, out: Path) -> dict[str, float]:
    """``model``'s accuracy on every validation question of its run and on its fold's held-out questions (the sample
    judge_rl.py judged), person-blind too."""
    data, split = validation_questions(run_dir)
    system = SystemSpec("judge", EVALUATOR, str(model))
    validation = evaluate(EvaluationConfig(data=data, out=str(out / "validation"), systems=[system], split=split))
    held_out = meta_evaluate(
        MetaEvalConfig(
            data=str(eval_dir), out=str(out / "held-out"), systems=[system], probes=["blind"], max_examples=max_eval
        )
    )
    return {
        "validation_accuracy": validation["systems"]["judge"]["accuracy"],
        "n_validation": validation["systems"]["judge"]["n"],
        "accuracy": held_out["systems"]["judge"]["metrics"]["accuracy"],
        "blind_accuracy": held_out["systems"]["judge"]["blind"]["accuracy"],
    }


def run_label(seeds: list[int]) -> str:
    """A run's name within its fold: ``seed0`` for one seed's judge, ``soup0-1`` for the soup of seeds 0 and 1."""
    return f"seed{seeds[0]}" if len(seeds) == 1 else "soup" + "-".join(map(str, seeds))


def seed_results(args, fold: int, seeds: list[int]) -> dict:
    """The first seed's ``judge_rl.py`` result, once every seed's is on disk with the same start and held-out sample
    (a soup's judges must share both, or its figures compare with none of theirs)."""
    results = []
    for seed in seeds:
        result_file = cv_result_file(args.out, args.name, fold, seed)
        if not result_file.is_file():
            raise SystemExit(
                f"error: {result_file} does not exist: run benchmarks/judge_rl.py --folds {args.folds} --fold-ids "
                f"{fold} --seeds {seed} --name {args.name} first"
            )
        results.append(json.loads(result_file.read_text()))
    result = results[0]
    for seed, other in zip(seeds[1:], results[1:], strict=True):
        for key in ("start", "max_eval"):
            if other[key] != result[key]:
                raise InputError(
                    cv_result_file(args.out, args.name, fold, seed),
                    f"{other[key]} against seed {seeds[0]}'s {result[key]}: a soup needs judges of one start judged "
                    "alike",
                    field=key,
                )
    return result


def extrapolated_run(args, fold: int, seeds: list[int], alphas: list[float]) -> dict:
    """One fold's judge (one seed's, or the soup of ``seeds``) figures per ``alpha`` (read from its file, the missing
    ones judged and added to it)."""
    result = seed_results(args, fold, seeds)
    fold_dir = fold_folder(args.out, fold, args.folds)
    runs = [run_folder(fold_dir, args.name, seed) for seed in seeds]
    label = run_label(seeds)
    path = cv_result_file(args.out, args.name, fold, seeds[0]).parent / "extrapolated" / f"fold{fold}-{label}.json"
    found = json.loads(path.read_text()) if path.is_file() else {"start": result["start"], "by_alpha": {}}
    start = trained = None  # read once, and only when a step is missing
    for alpha in alphas:
        if f"{alpha:g}" in found["by_alpha"]:
            continue
        if start is None:
            start = read_weights(local_weights_dir(result["start"]))
            judges = [run / "rl" for run in runs]
            trained = average(judges) if len(judges) > 1 else read_weights(judges[0])
        with tempfile.TemporaryDirectory(dir=runs[0], prefix=".extrapolated-") as tmp:
            model = runs[0] / "rl"
            if alpha != 1 or len(runs) > 1:
                model = Path(tmp) / "model"
                extrapolate(start, trained, runs[0] / "rl", alpha, model)
            figures = judge(
                model, runs[0] / "rl-run", fold_dir / "data" / "eval", result["max_eval"], Path(tmp) / "judged"
            )
        found["by_alpha"][f"{alpha:g}"] = figures
        write_json(path, found)
        print(json.dumps({"fold": fold, "run": label, "alpha": alpha, **figures}), flush=True)
    return {**found, "fold": fold, "label": label, "start_accuracy": result["start_accuracy"]}


def chosen(run: dict, alphas: list[float]) -> float:
    """The ``alpha`` with the best validation accuracy; a tie goes to the smaller step."""
    return max(sorted(alphas), key=lambda a: run["by_alpha"][f"{a:g}"]["validation_accuracy"])


def summary(args, runs: list[dict], alphas: list[float]) -> dict:
    """Per ``alpha`` the mean over the runs; each run's choice on its validation topic and the mean of its held-out
    figures; the reward models judge_rl.py trained in the same folds, if on disk."""
    found: dict = {"name": args.name, "runs": [f"fold{r['fold']}-{r['label']}" for r in runs], "by_alpha": {}}
    for alpha in alphas:
        rows = [r["by_alpha"][f"{alpha:g}"] for r in runs]
        found["by_alpha"][f"{alpha:g}"] = {
            key: mean_std([row[key] for row in rows]) for key in ("accuracy", "blind_accuracy", "validation_accuracy")
        }
    picks = {f"fold{r['fold']}-{r['label']}": chosen(r, alphas) for r in runs}
    found["chosen_alpha"] = picks
    picked = [r["by_alpha"][f"{picks[name]:g}"] for name, r in zip(picks, runs, strict=True)]
    for key in ("accuracy", "blind_accuracy"):
        found[f"chosen_{key}"] = mean_std([row[key] for row in picked])
    found["start_accuracy"] = mean_std([r["start_accuracy"] for r in runs])
    rm = [fold_folder(args.out, fold, args.folds) / "rm.json" for fold in sorted({r["fold"] for r in runs})]
    found["rm_accuracy"] = mean_std([json.loads(p.read_text())["rm_accuracy"] for p in rm if p.is_file()])
    found["rm_folds_on_disk"] = sum(p.is_file() for p in rm)
    return found


def main(argv: list[str] | None = None) -> dict:
    args = make_parser().parse_args(argv)
    alphas = [float(a) for a in args.alphas.split(",")]
    seeds = [int(seed) for seed in args.seeds.split(",")]
    groups = [seeds] if args.soup else [[seed] for seed in seeds]
    runs = [extrapolated_run(args, int(fold), group, alphas) for fold in args.fold_ids.split(",") for group in groups]
    found = summary(args, runs, alphas)
    summary_name = "summary-soup.json" if args.soup else "summary.json"
    write_json(args.out / "cv" / args.name / "extrapolated" / summary_name, found)
    emit(found)
    return found


if __name__ == "__main__":
    main()
