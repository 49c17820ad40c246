"""``persetrain compare`` and the judgment records it reads: real runs on PrefEval's dev slice (the odd-one-out
baseline against mcq-letter on the tiny random-weight model, under one system name), compared with paired
statistics that must reproduce the metrics.json difference; and a run in the earlier layout, still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from scipy.stats import binomtest
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.evaluation import EvaluationConfig, evaluate, examples_of_config
from persetrain.evaluators.registry import SystemSpec
from persetrain.io import InputError
from persetrain.records import attach_probes, file_names, judgment_of, record_of, slug
from persetrain.schema import Judgment, McqExample, PairwiseExample, PairwiseProfileItem
from persetrain.view.compare import compare_runs
from persetrain.view.runs import load_run

DEV = Path(__file__).resolve().parent.parent / "data" / "prefeval" / "dev"


def run(out: Path, *systems: SystemSpec, n: int = 24) -> Path:
    evaluate(EvaluationConfig(data=str(DEV), out=str(out), systems=list(systems), max_examples=n))
    return out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, tiny_llama_dir) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    a = run(root / "a", SystemSpec("judge", "odd-one-out"))
    b = run(root / "b", SystemSpec("judge", "mcq-letter", str(tiny_llama_dir)))
    return a, b


def plain(run_dir: Path) -> dict[str, dict]:
    [path] = (run_dir / "judgments").glob("*.jsonl")
    return {r["example_id"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.slow  # real runs through evaluate (docs/testing.md)
def test_compare_reproduces_metrics_json_with_paired_intervals_and_tests(two_runs):
    a, b = two_runs
    result = compare_runs(load_run(a), load_run(b), resamples=300, seed=1)
    [judge] = result["systems"]
    assert result["n_common"] == judge["n"] == 24 and result["only_a"] == result["only_b"] == 0
    reported = {
        side: json.loads((d / "metrics.json").read_text())["systems"]["judge"] for side, d in (("a", a), ("b", b))
    }
    for key in ("accuracy", "mse", "ndcg"):
        m = judge["metrics"][key]
        assert m["diff"] == pytest.approx(reported["b"][key] - reported["a"][key], abs=1e-12)
        assert m["diff"] == pytest.approx(m["reported_diff"], abs=1e-12)
        assert m["low"] <= m["high"] and 0 <= m["p"] <= 1
    records_a, records_b = plain(a), plain(b)
    only_a = sum(records_a[i]["correct"] and not records_b[i]["correct"] for i in records_a)
    only_b = sum(records_b[i]["correct"] and not records_a[i]["correct"] for i in records_a)
    accuracy = judge["metrics"]["accuracy"]
    assert accuracy["test"] == "mcnemar-exact" and judge["metrics"]["mse"]["test"] == "paired-bootstrap"
    expected_p = 1.0 if only_a + only_b == 0 else binomtest(only_a, only_a + only_b, 0.5).pvalue
    assert accuracy["p"] == pytest.approx(expected_p)
    changed = {i for i in records_a if records_a[i]["choice"] != records_b[i]["choice"]}
    assert {c["example_id"] for c in judge["changed"]} == changed
    groups = judge["groups"]
    assert groups["by"] == "topic" and sum(g["n"] for g in groups["values"].values()) == 24
    assert result == compare_runs(load_run(a), load_run(b), resamples=300, seed=1)  # seeded


@pytest.mark.slow  # real runs through evaluate (docs/testing.md)
def test_compare_command_prints_tables_and_json(two_runs):
    a, b = two_runs
    text = CliRunner().invoke(app, ["compare", str(a), str(b), "--resamples", "200"])
    assert text.exit_code == 0, text.output
    assert "| accuracy |" in text.output and "mcnemar-exact" in text.output and "Verdicts that changed" in text.output
    # Each changed verdict names the candidate chosen: odd-one-out is shown no labels, so by its index.
    changed = [line for line in text.output.splitlines() if line.startswith("- ") and " -> " in line]
    assert changed and not any("None" in line for line in changed)
    as_json = CliRunner().invoke(app, ["compare", str(a), str(b), "--resamples", "200", "--json"])
    assert as_json.exit_code == 0, as_json.output
    result = json.loads(as_json.output)
    assert result["systems"][0]["metrics"]["accuracy"]["diff"] == pytest.approx(
        result["systems"][0]["metrics"]["accuracy"]["reported_diff"]
    )


@pytest.mark.slow  # real runs through evaluate (docs/testing.md)
def test_compare_refuses_runs_without_a_shared_system(two_runs, tmp_path):
    a, _ = two_runs
    other = run(tmp_path / "other", SystemSpec("x", "odd-one-out"), SystemSpec("y", "odd-one-out"), n=4)
    result = CliRunner().invoke(app, ["compare", str(a), str(other)])
    assert result.exit_code == 2
    assert "share no system" in result.output and "Traceback" not in result.output


def to_old_layout(run_dir: Path, out: Path) -> Path:
    """The run as persetrain wrote runs before records: bare judgments (``evaluator`` = the system's name, ``choice``
    a string), a file named after the system as it is, no examples.jsonl."""
    shutil.copytree(run_dir, out)
    (out / "examples.jsonl").unlink()
    for path in (out / "judgments").rglob("*.jsonl"):
        old = []
        for r in map(json.loads, path.read_text().splitlines()):
            old.append(
                {
                    "example_id": r["example_id"],
                    "evaluator": r["system"],
                    "target": r["target"],
                    "score": r["score"],
                    "choice": None if r["choice"] is None else str(r["choice"]),
                    "probs": r["probs"],
                    "explanation": r["explanation"],
                    "raw": r["raw"],
                    "parsed": r["parsed"],
                    "details": r["details"],
                    "cost": r["cost"],
                }
            )
        path.write_text("".join(json.dumps(r) + "\n" for r in old))
    return out


@pytest.mark.slow  # real runs through evaluate (docs/testing.md)
def test_runs_of_the_earlier_layout_still_load(two_runs, tmp_path):
    _, b = two_runs
    old = to_old_layout(b, tmp_path / "old")
    current, earlier = load_run(b), load_run(old, examples_of=examples_of_config)
    keep = ("example_id", "system", "evaluator", "choice", "choice_label", "gold", "gold_label", "correct")
    assert [{k: r[k] for k in keep} for r in earlier.records["judge"]] == [
        {k: r[k] for k in keep} for r in current.records["judge"]
    ]
    assert earlier.records["judge"][0]["choice_label"] in "ABCD"  # mcq-letter's letters, from its registry entry
    with pytest.raises(InputError, match=r"no examples\.jsonl.*persetrain evaluate --data .* writes it again"):
        load_run(old)
    config = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**config, "data": str(tmp_path / "gone")}))
    result = CliRunner().invoke(app, ["view", str(old), "--export", str(tmp_path / "old.html")])
    assert result.exit_code == 2 and "writes it again" in result.output and "Traceback" not in result.output


# --- records, without a model -------------------------------------------------------------------------------------

QUESTION = McqExample(id="q1", preference="no meat", question="Dinner?", options=["steak", "salad", "ribs"], gold=1)


def test_file_names_are_slugs_that_never_collide():
    assert slug("embedded:smollm2-135m-instruct") == "embedded-smollm2-135m-instruct"
    assert slug("/runs/rm") == "runs-rm"
    assert file_names(["a:b", "a/b", "A-b"]) == {"a:b": "a-b.jsonl", "a/b": "a-b-2.jsonl", "A-b": "A-b-3.jsonl"}


@pytest.mark.parametrize(("labels", "choice_label", "gold_label"), [("letters", "C", "B"), ("numbers", "3", "2")])
def test_one_numbering_with_the_label_the_judge_saw(labels, choice_label, gold_label):
    judgment = Judgment(example_id="q1", evaluator="sys", choice="2", details={"scores": [1.0, 2.0, 3.0]})
    spec = {"name": "sys", "evaluator": "pref", "model": "m", "options": {}}
    record = record_of(judgment, QUESTION, spec, labels)
    assert (record["choice"], record["choice_label"], record["gold"], record["gold_label"]) == (
        2,
        choice_label,
        1,
        gold_label,
    )
    assert record["system"] == "sys" and record["evaluator"] == "pref" and record["correct"] is False
    assert judgment_of(record, QUESTION) == judgment  # what compare recomputes the metrics from


def test_a_tie_or_an_unreadable_judgment_is_wrong_and_a_pair_is_a_or_b():
    tie = Judgment(example_id="q1", evaluator="s", details={"scores": [5.0, 5.0, 1.0]})
    assert record_of(tie, QUESTION, {})["correct"] is False
    item = PairwiseProfileItem(premise="p", plot_a="a", plot_b="b", aspect="Ending", preferred="A")
    pair = PairwiseExample(
        id="d1", annotator_id="u", aspect="Ending", profile=[item], premise="p", plot_a="x", plot_b="y", preferred="B"
    )
    record = record_of(Judgment(example_id="d1", evaluator="s", choice="B"), pair, {})
    assert (record["choice"], record["choice_label"], record["gold_label"], record["correct"]) == (1, "B", "B", True)


def test_probe_outcomes_name_the_choice_in_the_original_order():
    plain = record_of(Judgment(example_id="q1", evaluator="s", choice="1"), QUESTION, {}, "letters")
    reversed_question = QUESTION.model_copy(update={"options": QUESTION.options[::-1], "gold": 1})
    flipped = record_of(Judgment(example_id="q1", evaluator="s", choice="0"), reversed_question, {}, "letters", "flip")
    blind = record_of(Judgment(example_id="q1", evaluator="s", choice="1"), QUESTION, {}, "letters", "blind")
    [record] = attach_probes([plain], {"flip": [flipped], "blind": [blind]}, {"q1": QUESTION}, "letters")
    assert record["probes"]["flip"]["choice"] == 2 and record["probes"]["flip"]["choice_label"] == "C"
    assert record["probes"]["flip"]["changed"] and not record["probes"]["blind"]["changed"]
