"""The SYNTHETIC users' true rubric sets: they are the planted signatures, the warm-start data written from them
holds only training users' rules in training wordings, and a dataset that is not synthetic is refused."""

from __future__ import annotations

import json
import shutil

import pytest
from datasets import load_from_disk
from typer.testing import CliRunner

from data_prep.parl.rubrics import true_rules
from data_prep.parl.signatures import RULES, TRAIN_WORDINGS
from persetrain.cli import app
from persetrain.data import read_split


@pytest.mark.parametrize("task", ["amazon", "reddit", "news"])
def test_true_rules_are_the_planted_signatures(parl_sample, parl_prepared, task):
    planted = json.loads(parl_sample.ground_truth.read_text())["users"]
    for split in ("train", "test"):
        for ex in read_split(parl_prepared / f"parl_{task}", split)[1]:
            assert set(true_rules(ex)) == set(planted[ex.user_id]), ex.id


def test_truth_warmstart_data_holds_training_users_true_rules_in_training_wordings(parl_prepared, tmp_path):
    data, out = parl_prepared / "parl_news", tmp_path / "warmstart"
    result = CliRunner().invoke(
        app,
        ["-q", "rubrics", "warmstart-data", "--data", str(data), "--out", str(out), "--source", "truth", "--runs", "2"],
    )
    assert result.exit_code == 0, result.output
    train = {ex.id: ex for ex in read_split(data, "train")[1]}
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
    from data_prep.parl.prepare import prepare_parl
    from data_prep.synthetic.parl import write_parl_sample
    from persetrain.train.warmstart import warmstart_row

    sample = write_parl_sample(tmp_path / "raw", seed=1)
    prepare_parl(sample.root, tmp_path / "extra", tasks=("news",), seed=1)
    data, extra, out = parl_prepared / "parl_news", tmp_path / "extra" / "parl_news", tmp_path / "warmstart"
    args = ["-q", "rubrics", "warmstart-data", "--data", str(data), "--out", str(out), "--runs", "1"]
    result = CliRunner().invoke(app, [*args, "--source", "truth", "--extra-data", str(extra)])
    assert result.exit_code == 0, result.output
    users = read_split(data, "train")[1]
    added = [ex for split in ("train", "test") for ex in read_split(extra, split)[1]]
    rows = list(load_from_disk(str(out))["train"])
    # each sample numbers its users from 0, so ids repeat across samples; the prompts (histories) do not
    prompt = {id(ex): warmstart_row(ex, [], 0)["prompt"][-1]["content"] for ex in users + added}
    expected = [(ex.id, prompt[id(ex)]) for ex in users + added if len(true_rules(ex)) >= 2]
    assert sorted((r["id"], r["prompt"][-1]["content"]) for r in rows) == sorted(expected)
    assert len(rows) > len(users)
    assert json.loads((out / "build_info.json").read_text())["extra"] == [str(extra)]
    induced = CliRunner().invoke(app, [*args, "--source", "induced", "--extra-data", str(extra)])
    assert induced.exit_code != 0 and "--extra-data needs --source truth" in induced.output


def test_other_user_pass_rate_batched_equals_one_check_at_a_time(parl_prepared, tiny_llama_dir):
    from persetrain.engine import load_engine
    from persetrain.evaluators.parl import other_user_pass_rates
    from persetrain.rewards.parl import RubricJudge

    examples = read_split(parl_prepared / "parl_news", "test")[1][:4]
    checks = {c.name: c for c in RULES["news"]}
    # two sets of one user (two runs) and one of another, in training wordings
    sets = [(examples[0].id, [checks["colon"].wordings[0], checks["short"].wordings[1]])]
    sets += [(examples[0].id, [checks["question"].wordings[0], checks["colon"].wordings[0]])]
    sets += [(examples[1].id, [checks["number"].wordings[0], checks["lowercase"].wordings[0]])]
    judge = RubricJudge(load_engine(str(tiny_llama_dir)))
    by_id = {ex.id: ex for ex in examples}
    one_at_a_time = {
        (user, rule, other): judge.p_yes_many([(ex.task, rule, ex.input, ex.output)])[0]
        for user, rules in sets
        for rule in rules
        for other, ex in by_id.items()
        if other != user
    }
    # tau in the widest gap of the lower half of the p(yes) values: most rules pass, some do not, and no value
    # lies near enough to tau for a batch's float noise to flip it
    p = sorted(one_at_a_time.values())
    gap, k = max((p[k + 1] - p[k], k) for k in range(len(p) // 8, len(p) // 2))
    assert gap > 1e-4
    tau = (p[k] + p[k + 1]) / 2
    expected = [
        sum(all(one_at_a_time[(user, r, other)] > tau for r in rules) for other in by_id if other != user) / 3
        for user, rules in sets
    ]
    assert other_user_pass_rates(sets, examples, tau, judge) == pytest.approx(expected, abs=1e-9)
    assert 0 < sum(expected) < len(expected)  # the check is not decided by tau alone
    assert other_user_pass_rates([], examples, tau, judge) == []


def test_true_sets_are_personal_on_the_sample(parl_prepared):
    from data_prep.parl.rubrics import true_checks, true_other_user_pass_rates

    examples = read_split(parl_prepared / "parl_news", "train")[1]
    sets = true_checks(examples)
    assert set(sets) == {ex.id for ex in examples if len(true_rules(ex)) >= 2}
    rates = true_other_user_pass_rates(examples)
    assert len(rates) == len(sets) and all(0 <= r <= 1 for r in rates)
    # the planted signature combinations are the users' own: few other users' texts carry a whole set
    assert sum(rates) / len(rates) < 0.1
