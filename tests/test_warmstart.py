"""The induced warm start: the model's own structured-output rubric sets, each row's completion the set's valid
rules, written atomically with how they were made; with none valid, a one-line reason and nothing written."""

from __future__ import annotations

import json

import pytest
from datasets import load_from_disk

from persetrain.data import read_split
from persetrain.engine import load_engine
from persetrain.evaluators.parl import PARLConfig, induce
from persetrain.prompts.parl import induction_messages
from persetrain.rewards.parl import parse_rubric
from persetrain.train.warmstart import write_warmstart_data


@pytest.fixture(scope="module")
def users(parl_prepared):
    return read_split(parl_prepared / "parl_news", "train")[1][:2]


@pytest.mark.slow
def test_induced_rows_hold_each_set_valid_rules(tiny_llama_dir, users, tmp_path):
    engine = load_engine(str(tiny_llama_dir))
    # tau 0: every rule is valid, so every set that parses with 2 or more rules becomes a row
    config = PARLConfig(max_new_tokens=256, tau=0.0)
    expected = {u.example.id: u.rules for u in induce(engine, users, config, seed=0) if len(u.rules) >= 2}
    assert expected, "structured output gave no set of 2+ rules: nothing to check"
    counts = write_warmstart_data(engine, users, tmp_path / "ws", config, seed=0)
    rows = list(load_from_disk(str(tmp_path / "ws"))["train"])
    assert {r["id"]: parse_rubric(r["completion"][0]["content"]).rules for r in rows} == expected
    by_id = {u.id: u for u in users}
    for row in rows:
        ex = by_id[row["id"]]
        history = ex.history
        assert row["prompt"] == induction_messages(ex.task, [h.input for h in history], [h.output for h in history])
    info = json.loads((tmp_path / "ws" / "build_info.json").read_text())
    assert info["source"] == "induced" and info["valid"] == counts["valid"] == len(rows) and info["tau"] == 0.0


@pytest.mark.slow
def test_no_valid_set_is_a_clear_error_and_writes_nothing(tiny_llama_dir, users, tmp_path):
    engine = load_engine(str(tiny_llama_dir))
    with pytest.raises(ValueError, match=r"^no rubric set of 2 passed validation"):
        write_warmstart_data(engine, users, tmp_path / "ws", PARLConfig(max_new_tokens=48, tau=1.0), seed=0)
    assert not (tmp_path / "ws").exists() and not (tmp_path / "ws.tmp").exists()
