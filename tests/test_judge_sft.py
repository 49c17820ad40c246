"""`persetrain prepare verdict-sft`: the judge rows as SFT rows whose completion is the gold verdict, trained at the
token `mcq-letter` reads, and the one-line refusals of rows it cannot train on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from datasets import load_from_disk
from typer.testing import CliRunner

from data_prep.verdict.prepare import prepare_verdict
from data_prep.verdict.sft_view import verdict_sft
from persetrain.cli import app
from persetrain.engine import load_engine
from persetrain.engine.choices import split_choices
from persetrain.io import InputError
from persetrain.models import DEFAULT_MODEL, load_tokenizer
from persetrain.prompts.mcq_letter import letter_request

PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"


@pytest.fixture(scope="module")
def judge(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("judge") / "prefeval"
    prepare_verdict(out, prefeval=[PREFEVAL], holdout_topics=["travel_restaurant"], seed=0)
    return out


@pytest.mark.slow
def test_the_sft_view_trains_the_gold_letter_where_mcq_letter_reads_it(judge, tmp_path):
    """TRL's SFT tokenizes a conversational row as the chat template of prompt + completion and trains on what
    follows the prompt's generation prompt; the first trained token that is not the prefix's is the gold letter's
    choice token after exactly the context mcq-letter reads (``split_choices``)."""
    out = tmp_path / "sft"
    result = CliRunner().invoke(app, ["prepare", "verdict-sft", "--data", str(judge), "--out", str(out)])
    assert result.exit_code == 0, result.output
    view, rows = load_from_disk(str(out)), load_from_disk(str(judge))
    assert {s: view[s].num_rows for s in view} == {s: rows[s].num_rows for s in rows}
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    backend = load_engine(DEFAULT_MODEL).backend
    for row, sft in zip(rows["train"].select(range(4)), view["train"].select(range(4)), strict=True):
        assert sft["id"] == row["id"] and sft["gold"] == row["gold"]
        assert sft["prompt"] == row["prompt"][:-1]
        assert sft["completion"] == [{"role": "assistant", "content": "Answer: " + row["gold"]}]
        trained = tokenizer.apply_chat_template(sft["prompt"] + sft["completion"], return_dict=True)["input_ids"]
        asked = backend.render(letter_request(row["preference"], row["question"], row["options"]))
        letters = row["verdicts"]
        common, per_letter = split_choices(
            backend.encode(asked), [backend.encode(asked + letter) for letter in letters], letters
        )
        context = backend.encode(asked)[:common]
        gold = per_letter[letters.index(row["gold"])]
        assert trained[: common + len(gold)] == context + gold


def test_rows_it_cannot_train_on_are_refused_naming_the_file_row_and_field(judge, tmp_path):
    think = tmp_path / "think"
    prepare_verdict(think, prefeval=[PREFEVAL], holdout_topics=["travel_restaurant"], seed=0, mode="think")
    with pytest.raises(InputError, match=r"think/train:[a-z_]+-\d+:o0: field 'mode': mode 'think': only verdict"):
        verdict_sft(think, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    result = CliRunner().invoke(app, ["prepare", "verdict-sft", "--data", str(tmp_path), "--out", str(tmp_path / "o")])
    assert result.exit_code != 0
    assert f"{tmp_path}: not a dataset `persetrain prepare verdict` wrote" in result.output


def test_a_judge_dataset_missing_a_split_or_with_bad_splits_is_one_line_naming_it(judge, tmp_path):
    """``load_from_disk`` trusts dataset_dict.json: a split folder gone, or ``splits`` a string (its letters taken
    for split names), was a FileNotFoundError from inside ``datasets``."""
    torn = shutil.copytree(judge, tmp_path / "torn")
    shutil.rmtree(torn / "validation")
    result = CliRunner().invoke(app, ["prepare", "verdict-sft", "--data", str(torn), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"{torn / 'dataset_dict.json'}: field 'splits': split 'validation' is missing" in result.output
    (torn / "dataset_dict.json").write_text(json.dumps({"splits": "train"}))
    with pytest.raises(InputError, match=r"dataset_dict.json: field 'splits': expected a list of split names"):
        verdict_sft(torn, tmp_path / "o")
    assert not (tmp_path / "o").exists()
