"""PARL's rule verifier data: signature checkers against the planted truth, the dataset's splits and balance,
bad input, and the judge's accuracy on labelled checks (batched == one check at a time)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from datasets import load_from_disk

from data_prep.parl.prepare import attach_baselines
from data_prep.parl.readers import read_task
from data_prep.parl.rule_verifier import prepare_verifier
from data_prep.parl.signatures import RULES, TRAIN_WORDINGS, WORDINGS_PER_RULE, composed_wordings
from data_prep.synthetic.parl import PET_WORDS
from persetrain.engine import load_engine
from persetrain.io import InputError
from persetrain.prompts.parl import judge_request
from persetrain.rewards.parl import RubricJudge
from persetrain.rewards.parl_judge_eval import judge_accuracy


@pytest.fixture(scope="module")
def parl_news(parl_prepared):
    return parl_prepared / "parl_news"


@pytest.fixture(scope="module")
def verifier_data(parl_news, tmp_path_factory):
    out = tmp_path_factory.mktemp("verifier") / "parl_news"
    prepare_verifier(out, parl=[parl_news])
    return out


@pytest.mark.parametrize("task", ["amazon", "reddit", "news"])
def test_checkers_agree_with_the_planted_signatures_on_every_text(parl_sample, task):
    """Users' texts have exactly their signatures, the generic negative none, the RAG-like one the first."""
    truth = json.loads(parl_sample.ground_truth.read_text())["users"]
    examples = attach_baselines(read_task(parl_sample.root / task, task), [parl_sample.root / task / "baselines.jsonl"])
    assert len(examples) == 32
    for ex in examples:
        traits = truth[ex.user_id]
        planted = [(h.output, set(traits)) for h in ex.history] + [(ex.output, set(traits))]
        planted += [(ex.baselines["synthetic-non"], set()), (ex.baselines["synthetic-rag"], {traits[0]})]
        for text, has in planted:
            assert {c.name for c in RULES[task] if c.check(text)} == has, (ex.id, text)


def test_every_rule_has_its_own_distinct_wordings():
    """A wording repeated inside a rule would shrink the validation wordings; one shared by two rules, mislabel;
    a composed wording that is a validation wording would train on what validation measures."""
    for task, checks in RULES.items():
        wordings = [w.casefold() for check in checks for w in check.wordings]
        assert all(len(check.wordings) == WORDINGS_PER_RULE for check in checks), task
        assert len(set(wordings)) == len(wordings), task
        for check in checks:
            composed = {w.casefold() for w in composed_wordings(task, check)}
            others = {w.casefold() for c in checks if c is not check for w in c.wordings + composed_wordings(task, c)}
            assert len(composed) > WORDINGS_PER_RULE and not composed & others, (task, check.name)
            assert not composed & {w.casefold() for w in check.wordings[TRAIN_WORDINGS:]}, (task, check.name)


def test_verifier_data_splits_users_and_wordings_and_balances_answers(parl_news, verifier_data):
    data = load_from_disk(str(verifier_data))
    parl = load_from_disk(str(parl_news))
    users = {split: set(data[split]["user_id"]) for split in ("train", "validation")}
    assert users["train"] <= set(parl["train"]["user_id"]) and users["validation"] <= set(parl["test"]["user_id"])
    assert set(data["validation"]["wording"]) == set(range(TRAIN_WORDINGS, WORDINGS_PER_RULE))
    train_wordings = Counter(w < TRAIN_WORDINGS for w in data["train"]["wording"])  # else composed
    assert set(data["train"]["wording"]).isdisjoint(range(TRAIN_WORDINGS, WORDINGS_PER_RULE))
    assert train_wordings[True] > 0 and train_wordings[False] > 0
    train_rules = set(data["train"]["rule"])
    assert not train_rules & set(data["validation"]["rule"])
    for split in ("train", "validation"):
        counts = Counter((r, label) for r, label in zip(data[split]["rule_name"], data[split]["label"], strict=True))
        for check in RULES["news"]:
            assert counts[(check.name, "yes")] == counts[(check.name, "no")] > 0, (split, check.name)
    row = data["validation"][0]
    assert row["prompt"] == [
        m.model_dump() for m in judge_request("news", row["input"], row["text"], row["rule"]).messages
    ]
    assert row["completion"] == [{"role": "assistant", "content": row["label"]}]
    check = next(c for c in RULES["news"] if c.name == row["rule_name"])
    assert (row["label"] == "yes") == check.check(row["text"])
    info = json.loads((verifier_data / "build_info.json").read_text())
    assert info["task"] == "verifier_sft" and info["synthetic"] and info["splits"]["train"] == len(data["train"])
    assert "Synthetic data" in (verifier_data / "README.md").read_text()


@pytest.mark.parametrize("task", ["amazon", "reddit", "news"])
def test_every_edit_toggles_its_signature_on_every_text(parl_sample, task):
    """The counterfactual edits give and take away each signature on every text the sample has."""
    examples = attach_baselines(read_task(parl_sample.root / task, task), [parl_sample.root / task / "baselines.jsonl"])
    texts = [t for ex in examples for t in (*(h.output for h in ex.history), ex.output, *ex.baselines.values())]
    rng = random.Random(0)
    for text in texts:
        for check in RULES[task]:
            for want in (True, False):
                assert check.check(check.edit(text, want, rng)) is want, (check.name, want, text)


@pytest.mark.parametrize("task", ["amazon", "reddit", "news"])
def test_form_swaps_keep_the_signature_in_every_other_form(parl_sample, task):
    """A class signature's text comes back in each other form of the class, the rest of the text unchanged."""
    examples = attach_baselines(read_task(parl_sample.root / task, task), [parl_sample.root / task / "baselines.jsonl"])
    texts = [t for ex in examples for t in (*(h.output for h in ex.history), ex.output, *ex.baselines.values())]
    classes = [c for c in RULES[task] if c.forms is not None]
    assert [c.name for c in classes] == (["pet_word"] if task == "news" else ["opener"])
    for check in classes:
        having = [t for t in texts if check.check(t)]
        assert having and not any(check.forms(t) for t in texts if not check.check(t))
        for text in having:
            forms = check.forms(text)
            assert len(set(forms)) == 4 and text.strip() not in forms, text
            assert all(check.check(f) for f in forms), text
            tail = text.strip()[16:]  # past the longest form ("Quick thoughts: ")
            assert all(f.endswith(tail) for f in forms), text


def test_counterfactual_copies_are_labelled_by_the_checkers_and_only_trained_on(parl_news, verifier_data, tmp_path):
    out = tmp_path / "counterfactual"
    prepare_verifier(out, parl=[parl_news], counterfactuals=True)
    plain, edited = load_from_disk(str(verifier_data)), load_from_disk(str(out))
    assert edited["validation"].to_list() == plain["validation"].to_list()  # held-out checks are never edited
    wording = dict(zip(plain["train"]["id"], plain["train"]["rule"], strict=True))
    shared = [(i, r) for i, r in zip(edited["train"]["id"], edited["train"]["rule"], strict=True) if i in wording]
    assert shared and all(wording[i] == r for i, r in shared)  # the original texts' wordings are unchanged
    kinds = Counter(kind.partition(":edit-")[2] for kind in edited["train"]["text_kind"])
    assert set(kinds) == {"", *(c.name for c in RULES["news"])} and len(edited["train"]) > 4 * len(plain["train"])
    checks = {c.name: c for c in RULES["news"]}
    for row in edited["train"].select(range(0, len(edited["train"]), 7)):
        assert (row["label"] == "yes") == checks[row["rule_name"]].check(row["text"]), row["id"]
    forms = edited["train"].filter(lambda r: ":form-" in r["text_kind"])
    assert set(forms["rule_name"]) == {"pet_word"} and set(forms["label"]) == {"yes"}  # checked on its rule only
    assert {t.split()[0].lower() for t in forms["text"]} == {w.lower() for w in PET_WORDS}
    assert json.loads((out / "build_info.json").read_text())["counterfactuals"] is True
    assert "edited copies" in (out / "README.md").read_text()


def test_extra_samples_add_new_users_to_train_only(parl_news, verifier_data, tmp_path):
    """Another sample's users all train, named apart from this sample's (each sample numbers its users from 0)."""
    from data_prep.parl.prepare import prepare_parl
    from data_prep.synthetic.parl import write_parl_sample

    prepare_parl(write_parl_sample(tmp_path / "raw", seed=1).root, tmp_path / "data", tasks=("news",), seed=1)
    extra = load_from_disk(str(tmp_path / "data" / "parl_news"))
    out = tmp_path / "verifier"
    prepare_verifier(out, parl=[parl_news], extra_parl=[tmp_path / "data" / "parl_news"])
    plain, more = load_from_disk(str(verifier_data)), load_from_disk(str(out))
    assert more["validation"].to_list() == plain["validation"].to_list()
    assert len(set(more["train"]["id"])) == len(more["train"]) > len(plain["train"])
    added = {u for u in more["train"]["user_id"] if u.startswith("extra0:")}
    assert added == {f"extra0:{u}" for split in extra for u in extra[split]["user_id"]}  # test users too
    checks = {c.name: c for c in RULES["news"]}
    for row in more["train"]:
        assert (row["label"] == "yes") == checks[row["rule_name"]].check(row["text"]), row["id"]
    info = json.loads((out / "build_info.json").read_text())
    assert (
        info["extra_parl"] == [str(tmp_path / "data" / "parl_news")]
        and "every user to train" in (out / "README.md").read_text()
    )


def test_a_rule_subset_is_the_full_datasets_rows_of_those_rules(parl_news, verifier_data, tmp_path):
    """A curriculum stage's data: the same balanced checks as the full dataset's, of the named rules only."""
    out = tmp_path / "two"
    prepare_verifier(out, parl=[parl_news], rules=["colon", "lowercase"])
    full, two = load_from_disk(str(verifier_data)), load_from_disk(str(out))
    for split in ("train", "validation"):
        expected = [r for r in full[split] if r["rule_name"] in ("colon", "lowercase")]
        assert two[split].to_list() == expected and set(two[split]["rule_name"]) == {"colon", "lowercase"}
    assert json.loads((out / "build_info.json").read_text())["rules"] == ["colon", "lowercase"]

    with pytest.raises(ValueError, match=r"unknown signature rule\(s\) \['colons'\]; the rules are \['colon'"):
        prepare_verifier(tmp_path / "never", parl=[parl_news], rules=["colons"])
    assert not (tmp_path / "never").exists()


def test_labelled_rows_and_their_errors(tmp_path):
    good = {
        "task": "news",
        "input": "An article.",
        "text": "A headline",
        "rule": "The headline is short.",
        "split": "train",
    }
    rows = [{**good, "satisfied": True}, {**good, "satisfied": False}]
    rows += [{**good, "split": "validation", "satisfied": s} for s in (True, False)]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert prepare_verifier(tmp_path / "out", labels=[labels]) == {"train": 2, "validation": 2}

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "satisfied": "yes"}) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:2: field 'satisfied': not a bool"):
        prepare_verifier(tmp_path / "never", labels=[bad])
    assert not (tmp_path / "never").exists() and not list(tmp_path.glob(".never*"))

    one_sided = tmp_path / "yes_only.jsonl"
    one_sided.write_text("".join(json.dumps({**r, "satisfied": True}) + "\n" for r in rows))
    with pytest.raises(InputError, match="split would be empty after balancing"):
        prepare_verifier(tmp_path / "never", labels=[one_sided])
    assert not (tmp_path / "never").exists()


def test_real_data_is_refused_by_the_signature_checkers(parl_news, tmp_path):
    real = tmp_path / "parl_real"
    real.mkdir()
    info = json.loads((parl_news / "build_info.json").read_text())
    (real / "build_info.json").write_text(json.dumps({**info, "synthetic": False}))
    with pytest.raises(InputError, match=r"build_info\.json: field 'synthetic' is not true"):
        prepare_verifier(tmp_path / "out", parl=[real])


@pytest.mark.slow
def test_judge_accuracy_batched_equals_one_check_at_a_time(verifier_data):
    """The measured accuracy is the engine's p(yes) on each check, thresholded; per rule as well."""
    rows = list(load_from_disk(str(verifier_data))["validation"].select(range(12)))
    judge = RubricJudge(load_engine("embedded:smollm2-135m-instruct", backend="hf"))
    measured = judge_accuracy(judge, rows, tau=0.5)
    one_by_one = [judge.p_yes(r["task"], [(r["rule"], r["input"], r["text"])])[0] for r in rows]
    right = [(p > 0.5) == (r["label"] == "yes") for p, r in zip(one_by_one, rows, strict=True)]
    assert measured.n == 12 and measured.accuracy == pytest.approx(sum(right) / 12)
    assert measured.yes_share == pytest.approx(sum(p > 0.5 for p in one_by_one) / 12)
    names = {r["rule_name"] for r in rows}
    assert set(measured.per_rule) == names


@pytest.mark.slow
def test_cli_prepares_the_data_and_measures_a_judge(parl_news, tiny_llama_dir, tmp_path):
    from typer.testing import CliRunner

    from persetrain.cli import app

    runner = CliRunner()
    out = tmp_path / "verifier"
    result = runner.invoke(app, ["prepare", "verifier", "--parl", str(parl_news), "--out", str(out)])
    assert result.exit_code == 0, result.output
    measured = tmp_path / "accuracy.json"
    args = ["rubrics", "verifier-accuracy", "--data", str(out), "--model", str(tiny_llama_dir), "--out", str(measured)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    got = json.loads(measured.read_text())
    assert got["n"] == len(load_from_disk(str(out))["validation"]) and 0 <= got["accuracy"] <= 1
    assert set(got["per_rule"]) == {c.name for c in RULES["news"]}

    result = runner.invoke(app, ["rubrics", "verifier-accuracy", "--data", str(parl_news), "--split", "train"])
    assert result.exit_code != 0 and "lacks the columns ['label', 'rule', 'text']" in result.output
