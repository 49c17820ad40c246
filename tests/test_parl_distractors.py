"""Distractor rules for PARL's rule verifier: labels against checkers written here, one "yes" and one "no" check
per text, held-out distractors and wordings kept out of train, and the signature rows left as they were."""

from __future__ import annotations

import random
import re

import pytest
from datasets import load_from_disk

from data_prep.parl.distractors import HELD_OUT, TRAIN, TRAIN_WORDINGS, distractor_checks
from data_prep.parl.rule_verifier import prepare_verifier

_WORDS = re.compile(r"[A-Za-z][A-Za-z']*")

#: Each distractor's truth, decided here from the text and the slot the rule names.
TRUTH = {
    "first_word": lambda text, slot: _WORDS.findall(text)[0].casefold() == slot.casefold(),
    "last_word": lambda text, slot: _WORDS.findall(text)[-1].casefold() == slot.casefold(),
    "contains_word": lambda text, slot: slot.casefold() in {w.casefold() for w in _WORDS.findall(text)},
    "first_letter": lambda text, slot: text.lstrip()[0].upper() == slot,
    "more_words": lambda text, slot: len(text.split()) > int(slot),
    "fewer_words": lambda text, slot: len(text.split()) < int(slot),
    "all_caps": lambda text, slot: text == text.upper() and text != text.lower(),
    "period_end": lambda text, slot: text.rstrip().endswith("."),
}
DISTRACTORS = {d.name: d for d in TRAIN + HELD_OUT}


def _slot(name: str, rule: str, unit: str) -> str:
    """The slot a rule names, read back through whichever of the distractor's wordings it is."""
    for wording in DISTRACTORS[name].wordings:
        pattern = re.escape(wording.replace("{unit}", unit)).replace(re.escape("{slot}"), "(.+?)")
        if match := re.fullmatch(pattern, rule):
            return match.group(1) if match.groups() else ""
    raise AssertionError(f"{rule!r} is no wording of {name}")


@pytest.mark.parametrize("text", ["Finally did Mibrenton close repairs?", "cheap lanes open in ruloton (12)!"])
def test_every_distractor_gives_a_right_yes_and_a_right_no_on_a_text(text):
    rng = random.Random(0)
    pool = ["Wow", "harvest", "Breaking", "Mibrenton"]
    for split in ("train", "validation"):
        answers: dict[str, list[bool]] = {}
        for name, _, check in distractor_checks(text, "headline", split, pool, rng):
            assert TRUTH[name](check.text, _slot(name, check.rule, "headline")) == check.satisfied, (name, check)
            answers.setdefault(name, []).append(check.satisfied)
        expected = TRAIN if split == "train" else TRAIN + HELD_OUT
        assert {name: sorted(a) for name, a in answers.items()} == {d.name: [False, True] for d in expected}


def test_distractor_rows_keep_held_out_rules_and_wordings_out_of_train(parl_prepared, tmp_path):
    """Train rows: train distractors in their train wordings; validation: their other wordings and every held-out
    distractor. Every label agrees with the checkers above, and each distractor is balanced in both splits."""
    parl_news = parl_prepared / "parl_news"
    prepare_verifier(tmp_path / "plain", parl=[parl_news], counterfactuals=True)
    prepare_verifier(tmp_path / "with", parl=[parl_news], counterfactuals=True, distractors=True)
    plain, data = load_from_disk(str(tmp_path / "plain")), load_from_disk(str(tmp_path / "with"))
    for split in ("train", "validation"):
        rows = [r for r in data[split] if r["rule_name"].startswith("distractor:")]
        signature = [r for r in data[split] if not r["rule_name"].startswith("distractor:")]
        assert signature == plain[split].to_list()  # the signature rows are the same with distractors
        names = {r["rule_name"].removeprefix("distractor:") for r in rows}
        held_out = {d.name for d in HELD_OUT}
        assert names == ({d.name for d in TRAIN} | (held_out if split == "validation" else set()))
        for row in rows:
            name = row["rule_name"].removeprefix("distractor:")
            assert TRUTH[name](row["text"], _slot(name, row["rule"], "headline")) == (row["label"] == "yes"), row["id"]
            in_train_wordings = row["wording"] < TRAIN_WORDINGS and name not in held_out
            assert in_train_wordings == (split == "train"), row["id"]
            assert not row["text_kind"].count(":")  # original texts only, never an edited copy
        for name in names:
            labels = [r["label"] for r in rows if r["rule_name"] == f"distractor:{name}"]
            assert labels.count("yes") == labels.count("no") > 0, (split, name)
    assert "distractor rules" in (tmp_path / "with" / "README.md").read_text()


def test_cli_adds_distractors(parl_prepared, tmp_path):
    from typer.testing import CliRunner

    from persetrain.cli import app

    out = tmp_path / "verifier"
    args = ["prepare", "verifier", "--parl", str(parl_prepared / "parl_news"), "--out", str(out), "--distractors"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert any(name.startswith("distractor:") for name in load_from_disk(str(out))["train"]["rule_name"])
