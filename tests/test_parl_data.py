"""PARL data: the synthetic fixture's planted signatures, the three readers, negatives and the exports."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from datasets import load_from_disk
from typer.testing import CliRunner

from data_prep.parl.prepare import attach_baselines, prepare_parl
from data_prep.parl.readers import read_amazon, read_lamp4, read_longlamp, read_task
from data_prep.parl.rule_verifier import prepare_verifier
from data_prep.synthetic.parl import write_parl_sample
from persetrain.cli import app
from persetrain.io import InputError


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_parl_sample(tmp_path_factory.mktemp("parl-raw"))


def test_prepare_parl_writes_grpo_and_verl_layouts(sample, tmp_path):
    sizes = prepare_parl(sample.root, tmp_path, tasks=("news",))
    assert sizes["news"]["train"] + sizes["news"]["test"] == 32 and sizes["news"]["test"] > 0
    data = load_from_disk(str(tmp_path / "parl_news"))
    row = data["train"][0]
    assert {
        "prompt",
        "task",
        "history_inputs",
        "history_outputs",
        "target_input",
        "ground_truth",
        "negatives",
        "negative_names",
    } <= set(row)
    assert row["prompt"][-1]["role"] == "user" and "<User Historical News>" in row["prompt"][-1]["content"]
    assert row["negative_names"] == ["synthetic-non", "synthetic-rag"] and len(row["negatives"]) == 2
    info = json.loads((tmp_path / "parl_news" / "build_info.json").read_text())
    assert info["task"] == "rubric" and info["synthetic"] is True
    verl = pd.read_parquet(tmp_path / "parl_news" / "verl" / "train.parquet")
    assert list(verl.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    first = verl.iloc[0]
    assert first["data_source"] == "parl/news" and first["reward_model"]["ground_truth"] == row["ground_truth"]
    assert set(first["extra_info"]["baseline"]) == {"synthetic-non", "synthetic-rag"}
    assert first["extra_info"]["metadata"] == row["target_input"]


def test_user_negatives_are_other_users_texts_of_the_same_split(sample, tmp_path):
    """Each row's user negatives: K other users of its split, their own target texts with the inputs they answer;
    the generators' negatives, which Max-Diff and the verifier data read, stay as they were."""
    prepare_parl(sample.root, tmp_path / "plain", tasks=("news",))
    prepare_parl(sample.root, tmp_path / "users", tasks=("news",), user_negatives=3)
    plain, data = (
        load_from_disk(str(tmp_path / "plain" / "parl_news")),
        load_from_disk(str(tmp_path / "users" / "parl_news")),
    )
    for split in ("train", "test"):
        targets = {row["user_id"]: (row["target_input"], row["ground_truth"]) for row in data[split]}
        for row, before in zip(data[split], plain[split], strict=True):
            assert {k: row[k] for k in before} == before
            ids = row["user_negative_ids"]
            assert len(set(ids)) == 3 and row["user_id"] not in ids and set(ids) <= set(targets)
            assert list(zip(row["user_negative_inputs"], row["user_negatives"], strict=True)) == [
                targets[u] for u in ids
            ]
    assert json.loads((tmp_path / "users" / "parl_news" / "build_info.json").read_text())["user_negatives"] == 3
    assert "user_negatives" not in plain["train"].column_names
    with pytest.raises(InputError, match=r"user_negatives 9 needs more than 9 users in every split; split 'test' has"):
        prepare_parl(sample.root, tmp_path / "never", tasks=("news",), user_negatives=9)
    assert not (tmp_path / "never" / "parl_news").exists()


def test_cli_adds_user_negatives(sample, tmp_path):
    args = [
        "prepare",
        "parl",
        "--raw",
        str(sample.root),
        "--out",
        str(tmp_path),
        "--task",
        "news",
        "--user-negatives",
        "2",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert {len(ids) for ids in load_from_disk(str(tmp_path / "parl_news"))["train"]["user_negative_ids"]} == {2}


def test_prepare_parl_reruns_over_a_killed_runs_half_written_folder(sample, tmp_path):
    prepare_parl(sample.root, tmp_path, tasks=("news",))
    (tmp_path / ".parl_news.tmp" / "verl").mkdir(parents=True)  # a run killed while writing the verl files
    sizes = prepare_parl(sample.root, tmp_path, tasks=("news",))
    assert len(load_from_disk(str(tmp_path / "parl_news"))["train"]) == sizes["news"]["train"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parl_news"]


def _write(path, lines):
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_reader_errors_name_file_record_and_field(tmp_path):
    meta = _write(tmp_path / "meta.jsonl", [{"parent_asin": "A", "title": "Kettle", "description": ["x"]}])
    review = {"user_id": "u", "parent_asin": "A", "timestamp": 1, "rating": 5.0, "title": "t", "text": "good"}
    reviews = _write(tmp_path / "reviews.jsonl", [review, {**review, "timestamp": 2, "text": ""}])
    with pytest.raises(InputError, match=r"reviews.jsonl:2: field 'text'"):
        read_amazon(reviews, meta)
    _write(reviews, [review, {**review, "timestamp": 2}])
    with pytest.raises(InputError, match=r"has 1 earlier items; at least 3"):
        read_amazon(reviews, meta, min_history=3)
    assert [len(e.history) for e in read_amazon(reviews, meta)] == [1]

    posts = _write(tmp_path / "posts.jsonl", [{"name": "u", "input": "s", "output": "c", "profile": "oops"}])
    with pytest.raises(InputError, match=r"posts.jsonl:1: field 'profile'"):
        read_longlamp(posts)

    questions = tmp_path / "questions.json"
    questions.write_text(
        json.dumps(
            [
                {
                    "id": "q1",
                    "input": "Generate a headline for the following article: a",
                    "profile": [{"text": "b", "title": "B"}],
                }
            ]
        )
    )
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"golds": [{"id": "q2", "output": "x"}]}))
    with pytest.raises(InputError, match=r"outputs.json:q1: field 'output'"):
        read_lamp4(questions, outputs)
    outputs.write_text(json.dumps({"golds": [{"id": "q1", "output": "A"}]}))
    (example,) = read_lamp4(questions, outputs)
    assert example.input == "a" and example.history[0].output == "B"


def test_lamp4_input_must_be_text_not_a_number(tmp_path):
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps([{"id": 7, "input": 5, "profile": [{"text": "b", "title": "B"}]}]))
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({"golds": [{"id": "7", "output": "A"}]}))
    with pytest.raises(InputError, match=r"questions.json:question 0: field 'input': expected text, got int"):
        read_lamp4(questions, outputs)


@pytest.mark.parametrize("command", ["reference", "generate-baselines"])
def test_an_unknown_task_is_one_line_in_every_command_that_reads_one(sample, tmp_path, command):
    baselines = str(sample.root / "news" / "baselines.jsonl")
    args = {
        "reference": ["prepare", "reference", "--baselines", baselines],
        "generate-baselines": ["generate-baselines", "--generator", "non:embedded:x"],
    }[command]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [*args, "--raw", str(sample.root / "news"), "--task", "foo", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output == "error: unknown PARL task 'foo'; expected one of ('amazon', 'reddit', 'news')\n"
    assert not out.exists()


def test_a_reference_dataset_of_no_questions_is_refused_and_nothing_written(sample, tmp_path):
    raw = tmp_path / "news"
    raw.mkdir()
    (raw / "questions.json").write_text("[]")
    (raw / "outputs.json").write_text(json.dumps({"golds": []}))
    out = tmp_path / "out"
    args = ["prepare", "reference", "--raw", str(raw), "--task", "news", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--baselines", str(sample.root / "news" / "baselines.jsonl")])
    assert result.exit_code == 2, result.output
    assert f"error: {raw / 'questions.json'}: holds no records" in result.output
    assert not out.exists()


def _labels(path, **changes):
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"task": "news", "input": "An article.", "text": "A headline", "rule": "It is short.", "split": "train"}
    rows = [{**row, "satisfied": s, "split": split} for split in ("train", "validation") for s in (True, False)]
    return _write(path, [{**rows[0], **changes}, *rows[1:]])


def test_verifier_labels_given_twice_or_sharing_a_name_are_refused(tmp_path):
    """A labelled row's id is ``<file name>:<line>``: the same file twice, or two files of one name, gave two rows one
    id, and ``prepare verdict`` then refused the dataset with a message about the verifier folder."""
    ok, other = _labels(tmp_path / "ok.jsonl"), _labels(tmp_path / "b" / "ok.jsonl")
    with pytest.raises(InputError, match=r"ok.jsonl: given twice in --labels"):
        prepare_verifier(tmp_path / "o", labels=[ok, tmp_path / "b" / ".." / "ok.jsonl"])
    clash = rf"^{re.escape(str(other))}: its rows would have the ids of {re.escape(str(ok))}'s.*rename one$"
    with pytest.raises(InputError, match=clash):
        prepare_verifier(tmp_path / "o", labels=[ok, other])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("field", ["text", "rule"])
def test_verifier_labels_with_a_blank_text_or_rule_are_refused(tmp_path, field):
    labels = _labels(tmp_path / "labels.jsonl", **{field: "  "})
    with pytest.raises(InputError, match=rf"labels.jsonl:1: field '{field}': empty"):
        prepare_verifier(tmp_path / "o", labels=[labels])


def test_a_killed_sample_run_leaves_its_data_marked_synthetic(tmp_path):
    """The marker is written before the data: a run stopped midway (here: a folder where a file goes) must not leave
    data that `prepare parl` takes for real users."""
    (tmp_path / "amazon" / "reviews.jsonl").mkdir(parents=True)
    with pytest.raises(OSError):
        write_parl_sample(tmp_path)
    assert json.loads((tmp_path / "ground_truth.json").read_text())["synthetic"] is True


def test_missing_negatives_are_an_error(sample, tmp_path):
    examples = read_task(sample.root / "reddit", "reddit")
    lines = (sample.root / "reddit" / "baselines.jsonl").read_text().splitlines()
    partial = tmp_path / "baselines.jsonl"
    partial.write_text("\n".join(lines[:-1]) + "\n")  # the last example loses its synthetic-rag negative
    with pytest.raises(InputError, match=r"has no negative from \['synthetic-rag'\]"):
        attach_baselines(examples, [partial])


@pytest.mark.slow
def test_rag_retrieves_bm25_top4_and_baselines_resume(sample, tmp_path, tiny_llama_dir):
    from data_prep.parl.baselines import GeneratorSpec, generate_baselines, retrieve
    from persetrain.engine import load_engine
    from persetrain.schema import RubricExample

    history = [{"input": f"town fair number {n}", "output": f"fair {n}"} for n in range(6)]
    history[2] = {"input": "storm damages harbour boats", "output": "boats hit"}
    history[4] = {"input": "harbour repairs begin", "output": "repairs"}
    ex = RubricExample(
        id="x", task="news", user_id="u", history=history, input="storm floods the harbour", output="flood"
    )
    top = retrieve(ex)
    assert len(top) == 4 and top[:2] == [
        ("storm damages harbour boats", "boats hit"),
        ("harbour repairs begin", "repairs"),
    ]
    examples = read_task(sample.root / "news", "news")[:2]

    assert GeneratorSpec.parse("sft=rag:runs/x") == GeneratorSpec("sft", "rag", "runs/x")
    assert GeneratorSpec.parse("non:embedded:smollm2-135m-instruct").model == "embedded:smollm2-135m-instruct"
    with pytest.raises(ValueError, match="KIND"):
        GeneratorSpec.parse("bm25:model")

    engines = []

    def make_engine(spec):
        engines.append(load_engine(spec))
        return engines[-1]

    specs = [GeneratorSpec("non", "non", str(tiny_llama_dir)), GeneratorSpec("rag", "rag", str(tiny_llama_dir))]
    written = generate_baselines(examples, specs, tmp_path, make_engine, max_new_tokens=8)
    attached = attach_baselines(examples, list(written.values()))
    assert all(set(e.baselines) == {"non", "rag"} for e in attached)
    generate_baselines(examples, specs, tmp_path, make_engine, max_new_tokens=8)  # a rerun: nothing to do
    assert [e.cost.calls for e in engines[2:]] == [0, 0]
