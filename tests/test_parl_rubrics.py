"""The SYNTHETIC users' true rubric sets: they are the planted signatures, the warm-start data written from them
holds only training users' rules in training wordings, and a dataset that is not synthetic is refused."""

from __future__ import annotations

import json
import shutil

import pytest
from datasets import load_from_disk
from typer.testing import CliRunner

from data_prep.parl_rubrics import true_rules
from data_prep.parl_signatures import RULES, TRAIN_WORDINGS
from persetrain.cli import app
from persetrain.data import load_dataset


@pytest.mark.parametrize("task", ["amazon", "reddit", "news"])
def test_true_rules_are_the_planted_signatures(parl_sample, parl_prepared, task):
    planted = json.loads(parl_sample.ground_truth.read_text())["users"]
    for split in ("train", "test"):
        for ex in load_dataset(parl_prepared / f"parl_{task}", split)[1]:
            assert set(true_rules(ex)) == set(planted[ex.user_id]), ex.id


def test_truth_warmstart_data_holds_training_users_true_rules_in_training_wordings(parl_prepared, tmp_path):
    data, out = parl_prepared / "parl_news", tmp_path / "warmstart"
    result = CliRunner().invoke(
        app,
        ["-q", "rubrics", "warmstart-data", "--data", str(data), "--out", str(out), "--source", "truth", "--runs", "2"],
    )
    assert result.exit_code == 0, result.output
    train = {ex.id: ex for ex in load_dataset(data, "train")[1]}
    rows = list(load_from_disk(str(out))["train"])
    assert len(rows) == 2 * len(train) and {r["id"] for r in rows} == set(train)
    checks = {c.name: c for c in RULES["news"]}
    completions = set()
    for row in rows:
        rules = [item["rule"] for item in json.loads(row["completion"][0]["content"])]
        named = {name for rule in rules for name, c in checks.items() if rule in c.wordings[:TRAIN_WORDINGS]}
        assert len(named) == len(rules) and named == set(true_rules(train[row["id"]])), row["id"]
        completions.add(row["completion"][0]["content"])
    assert len(completions) > len(train)  # the copies differ in order or wording
    info = json.loads((out / "build_info.json").read_text())
    assert info["source"] == "truth" and info["valid_share"] == 1.0 and info["rows"] == len(rows)


def test_truth_warmstart_refuses_data_that_is_not_synthetic_and_an_unknown_source(parl_prepared, tmp_path):
    data = tmp_path / "parl_news"
    shutil.copytree(parl_prepared / "parl_news", data)
    info = json.loads((data / "build_info.json").read_text())
    (data / "build_info.json").write_text(json.dumps({**info, "synthetic": False}))
    out = tmp_path / "warmstart"
    result = CliRunner().invoke(
        app, ["rubrics", "warmstart-data", "--data", str(data), "--out", str(out), "--source", "truth"]
    )
    assert result.exit_code != 0 and "build_info.json: field 'synthetic' is not true" in result.output
    assert "--source induced" in result.output and "Traceback" not in result.output
    assert not out.exists() and not out.with_name("warmstart.tmp").exists()
    args = ["rubrics", "warmstart-data", "--data", str(data), "--out", str(out), "--source", "x"]
    bad = CliRunner().invoke(app, args)
    assert bad.exit_code != 0 and "--source is 'induced' or 'truth', not 'x'" in bad.output


def test_truth_warmstart_adds_every_user_of_an_extra_sample(parl_prepared, tmp_path):
    """``--extra-data``: another sample's users, all splits, join the training users; only with the truth source."""
    from data_prep.parl import prepare_parl
    from data_prep.parl_synthetic import write_parl_sample
    from persetrain.train.warmstart import warmstart_row

    sample = write_parl_sample(tmp_path / "raw", seed=1)
    prepare_parl(sample.root, tmp_path / "extra", tasks=("news",), seed=1)
    data, extra, out = parl_prepared / "parl_news", tmp_path / "extra" / "parl_news", tmp_path / "warmstart"
    args = ["-q", "rubrics", "warmstart-data", "--data", str(data), "--out", str(out), "--runs", "1"]
    result = CliRunner().invoke(app, [*args, "--source", "truth", "--extra-data", str(extra)])
    assert result.exit_code == 0, result.output
    users = load_dataset(data, "train")[1]
    added = [ex for split in ("train", "test") for ex in load_dataset(extra, split)[1]]
    rows = list(load_from_disk(str(out))["train"])
    # each sample numbers its users from 0, so ids repeat across samples; the prompts (histories) do not
    prompt = {id(ex): warmstart_row(ex, [], 0)["prompt"][-1]["content"] for ex in users + added}
    expected = [(ex.id, prompt[id(ex)]) for ex in users + added if len(true_rules(ex)) >= 2]
    assert sorted((r["id"], r["prompt"][-1]["content"]) for r in rows) == sorted(expected)
    assert len(rows) > len(users)
    assert json.loads((out / "build_info.json").read_text())["extra"] == [str(extra)]
    induced = CliRunner().invoke(app, [*args, "--source", "induced", "--extra-data", str(extra)])
    assert induced.exit_code != 0 and "--extra-data needs --source truth" in induced.output
