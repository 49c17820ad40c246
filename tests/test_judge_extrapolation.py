"""benchmarks/judge_extrapolation.py: a cross-validation's RL judges moved along judge - start, judged on their run's
validation topic and their fold's held-out topics, the step chosen on the first."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from persetrain.evaluators.registry import SystemSpec
from persetrain.io import InputError, write_json
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate
from persetrain.soup import read_weights

REPO = Path(__file__).resolve().parents[1]
PREFEVAL_DEV = REPO / "data" / "prefeval" / "dev"


def test_a_step_of_0_1_and_2_gives_the_start_the_judge_and_twice_its_move(
    monkeypatch, tiny_llama_dir, moved_judge, tmp_path
):
    """1 is the judge's weights exactly, 0 its start's, 2 the start plus twice the move; the result loads as a model
    with the judge's config and tokenizer beside it."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from judge_extrapolation import extrapolate

    start, judge = read_weights(tiny_llama_dir), read_weights(moved_judge)
    for alpha in (0.0, 1.0, 2.0):
        extrapolate(start, judge, moved_judge, alpha, tmp_path / f"a{alpha:g}")
    one, zero, two = (load_file(str(tmp_path / f"a{a}" / "model.safetensors")) for a in ("1", "0", "2"))
    assert all(torch.equal(one[k], judge[k]) and torch.equal(zero[k], start[k]) for k in judge)
    assert all(torch.allclose(two[k], 2 * judge[k] - start[k], atol=1e-6) for k in judge)
    assert any(not torch.equal(two[k], judge[k]) for k in judge)
    AutoModelForCausalLM.from_pretrained(tmp_path / "a2")
    AutoTokenizer.from_pretrained(tmp_path / "a2")


@pytest.mark.slow
def test_the_cross_validations_judges_are_judged_per_step_and_read_back(
    monkeypatch, tiny_llama_dir, moved_judge, tmp_path
):
    """Each step's figures land in the fold x seed's file, the validation topic's every question judged and the
    held-out questions judge_rl.py judged; a step of 1 is the judge judged as judge_rl.py judges it; the summary
    picks per run the step with the best validation accuracy; a rerun judges nothing again; a fold with no RL
    judge on disk is refused in one line naming its file."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from judge_extrapolation import main
    from judge_rl import fold_data, make_parser, topic_folds

    out = tmp_path / "out"
    args = make_parser().parse_args(
        ["--view", "yes-no", "--train", str(PREFEVAL_DEV), "--folds", "3", "--out", str(out)]
    )
    folds = topic_folds(args.train, 3)
    fold_dir = out / "cv-fold0-of3"
    data, eval_dir, _ = fold_data(args, fold_dir, folds[0], folds)
    run = fold_dir / "kept" / "seed0"
    (run / "rl").parent.mkdir(parents=True)
    moved_judge.rename(run / "rl")
    config = {"script": {"dataset_path": str(data / "judge")}}
    config["training"] = {"validation_data": None, "validation_split": "validation"}
    write_json(run / "rl-run" / "resolved_config.json", config)
    kept = {"fold": 0, "rl_accuracy": 0.5, "start_accuracy": 0.4, "max_eval": 12, "start": str(tiny_llama_dir)}
    write_json(out / "cv" / "kept" / "fold0-seed0.json", kept)

    argv = ["--out", str(out), "--folds", "3", "--fold-ids", "0", "--seeds", "0", "--name", "kept"]
    found = main([*argv, "--alphas", "1,0,2"])
    per_step = json.loads((out / "cv" / "kept" / "extrapolated" / "fold0-seed0.json").read_text())["by_alpha"]
    assert sorted(per_step) == ["0", "1", "2"]
    n_questions = {per_step[a]["n_validation"] for a in per_step}
    assert len(n_questions) == 1 and n_questions.pop() > 12  # every validation question, not the training's sample
    assert not list(run.glob(".extrapolated-*"))  # the moved models live only while judged

    judged_as_judge_rl_does = [SystemSpec("rl", "verifier", str(run / "rl"))]
    direct = meta_evaluate(
        MetaEvalConfig(str(eval_dir), str(tmp_path / "direct"), judged_as_judge_rl_does, max_examples=12)
    )
    assert per_step["1"]["accuracy"] == direct["systems"]["rl"]["metrics"]["accuracy"]
    best = max(per_step[a]["validation_accuracy"] for a in per_step)
    pick = min(float(a) for a in per_step if per_step[a]["validation_accuracy"] == best)
    assert found["chosen_alpha"] == {"fold0-seed0": pick}
    assert found["chosen_accuracy"]["mean"] == per_step[f"{pick:g}"]["accuracy"]
    assert found["rm_accuracy"]["mean"] is None and found["rm_folds_on_disk"] == 0

    written = (out / "cv" / "kept" / "extrapolated" / "fold0-seed0.json").stat().st_mtime_ns
    assert main([*argv, "--alphas", "2,1"])["by_alpha"]["2"] == found["by_alpha"]["2"]
    assert (out / "cv" / "kept" / "extrapolated" / "fold0-seed0.json").stat().st_mtime_ns == written
    missing = out / "cv" / "kept" / "fold1-seed0.json"
    with pytest.raises(SystemExit, match=rf"^error: {re.escape(str(missing))} does not exist: run benchmarks/judge_rl"):
        main(["--out", str(out), "--folds", "3", "--fold-ids", "1", "--seeds", "0", "--name", "kept"])

    # A seed-1 "judge" that never moved from the start: the soup of seeds 0 and 1 is seed 0 moved halfway, exactly.
    shutil.copytree(tiny_llama_dir, fold_dir / "kept" / "seed1" / "rl")
    write_json(out / "cv" / "kept" / "fold0-seed1.json", kept)
    main(["--out", str(out), "--folds", "3", "--fold-ids", "0", "--seeds", "0", "--name", "kept", "--alphas", "0.5"])
    souped = main([*argv[:-4], "--seeds", "0,1", "--name", "kept", "--soup", "--alphas", "1"])
    assert souped["runs"] == ["fold0-soup0-1"]
    halfway = json.loads((out / "cv" / "kept" / "extrapolated" / "fold0-seed0.json").read_text())["by_alpha"]["0.5"]
    soup_file = out / "cv" / "kept" / "extrapolated" / "fold0-soup0-1.json"
    assert json.loads(soup_file.read_text())["by_alpha"]["1"] == halfway
    assert (out / "cv" / "kept" / "extrapolated" / "summary-soup.json").is_file()
    write_json(out / "cv" / "kept" / "fold0-seed1.json", {**kept, "max_eval": 20})
    seed1 = out / "cv" / "kept" / "fold0-seed1.json"
    with pytest.raises(
        InputError, match=rf"^{re.escape(str(seed1))}: field 'max_eval': 20 against seed 0's 12: a soup needs"
    ):
        main([*argv[:-4], "--seeds", "0,1", "--name", "kept", "--soup", "--alphas", "2"])
