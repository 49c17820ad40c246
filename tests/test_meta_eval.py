"""Meta-evaluation: the probe arithmetic on hand-made judgments, and a whole run on the tiny model."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.meta_eval import flip_rate, manipulated, relative_change, reversed_order
from persetrain.report import wrong_examples
from persetrain.schema import Judgment, McqExample, PairwiseExample, PairwiseProfileItem

PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"


def mcq(ex_id: str, gold: int = 0) -> McqExample:
    return McqExample(id=ex_id, preference="p", question="q", options=["a", "b", "c", "d"], gold=gold)


def test_reversal_moves_the_gold_label_and_manipulation_touches_every_candidate():
    ex = mcq("x", gold=1)
    back = reversed_order(ex)
    assert back.options == ["d", "c", "b", "a"] and back.options[back.gold] == "b"
    pair = PairwiseExample(
        id="y",
        annotator_id="u",
        aspect="Ending",
        premise="s",
        plot_a="A",
        plot_b="B",
        preferred="A",
        profile=[PairwiseProfileItem(premise="s", plot_a="1", plot_b="2", aspect="Ending", preferred="B")],
    )
    assert reversed_order(pair).preferred == "B" and reversed_order(pair).plot_a == "B"
    assert all(o.endswith(" 100% right") for o in manipulated(ex, "this is 100% right").options)


def test_flip_rate_compares_choices_in_the_original_order():
    examples = [mcq("a"), mcq("b"), mcq("c")]
    before = [Judgment(example_id=i, evaluator="s", choice="0") for i in ("a", "b", "c")]
    # Reversed: option 0 is shown last (index 3). "a" keeps its choice, "b" moves to another, "c" unreadable.
    after = [
        Judgment(example_id="a", evaluator="s", choice="3"),
        Judgment(example_id="b", evaluator="s", choice="0"),
        Judgment(example_id="c", evaluator="s", parsed=False),
    ]
    assert flip_rate(examples, before, after) == pytest.approx(2 / 3)


def test_relative_change_is_the_change_of_the_mean_score():
    before = [
        Judgment(example_id="a", evaluator="s", details={"scores": [2.0, 4.0]}),
        Judgment(example_id="b", evaluator="s", target="rag", score=6.0),
    ]
    after = [
        Judgment(example_id="a", evaluator="s", details={"scores": [3.0, 5.0]}),
        Judgment(example_id="b", evaluator="s", target="rag", score=7.0),
    ]
    assert relative_change(before, after) == pytest.approx((5.0 - 4.0) / 4.0)
    assert math.isnan(relative_change(before, []))


def test_the_reports_wrong_examples_name_a_pointwise_judges_choice():
    """A pointwise judge (``verifier``, ``rm``) is shown no option labels, so its record holds the chosen candidate's
    index and no label; the report said "no choice (a tie)" for it even where one candidate scored highest."""
    wrong = {"parsed": True, "correct": False, "gold": 2, "gold_label": None, "explanation": ""}
    found = {
        "verifier": [
            {**wrong, "example_id": "first", "choice": 0, "choice_label": None},
            {**wrong, "example_id": "tied", "choice": None, "choice_label": None},
            {**wrong, "example_id": "unread", "choice": None, "choice_label": None, "parsed": False},
        ],
        "letter": [{**wrong, "example_id": "labelled", "choice": 1, "choice_label": "B", "gold_label": "C"}],
    }
    lines = wrong_examples(found)["Wrong examples"].splitlines()
    said = {line.split("`")[1]: line.split(": ", 1)[1].split(".")[0] for line in lines if line.startswith("- ")}
    assert said == {
        "first": "gold 2, chose 0",
        "tied": "gold 2, chose no choice (a tie)",
        "unread": "gold 2, chose unreadable",
        "labelled": "gold C, chose B",
    }


@pytest.mark.slow
def test_meta_eval_command_on_the_tiny_model(tiny_llama_dir, tmp_path):
    out = tmp_path / "meta"
    result = CliRunner().invoke(
        app,
        [
            "-q",
            "meta-eval",
            "--data",
            str(PREFEVAL),
            "--out",
            str(out),
            "--max-examples",
            "2",
            "--seed",
            "1",
            "--system",
            f"letters=mcq-letter:{tiny_llama_dir}",
            "--system",
            f"gemba=gemba:{tiny_llama_dir}",
            "--system",
            f"pref=pref:{tiny_llama_dir}",
            "--set",
            "max_new_tokens=24",
            "--set",
            "max_retries=1",
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["kind"] == "mcq" and metrics["n_examples"] == 2
    for name in ("letters", "gemba", "pref"):
        system = metrics["systems"][name]
        assert set(system["agreement"]) == {"accuracy", "mse", "ndcg"}
        assert 0 <= system["flip_rate"] <= 1
        assert system["cost_per_instance"]["calls"] > 0
        assert "relative_score_change" in system["manipulation"]
        assert (out / "judgments" / "flip" / f"{name}.jsonl").is_file()
    # A pointwise judge never sees two options together: reversing them cannot change its choice.
    assert metrics["systems"]["gemba"]["flip_rate"] == 0
    report = (out / "report.md").read_text()
    assert "Side by side" in report and "plots/flip-rate.png" in report
    assert (out / "plots" / "flip-rate.png").is_file() and (out / "config.json").is_file()


def test_a_meta_eval_that_fails_writes_nothing_and_names_what_is_wrong(tmp_path):
    data = tmp_path / "reviews"
    data.mkdir()
    (data / "dataset.json").write_text(json.dumps({"task": "reference"}))
    record = {"id": "r0", "user_id": "u", "input": "write a review", "reference": "", "profile": ["I liked it"]}
    (data / "test.jsonl").write_text(json.dumps(record | {"outputs": {"rag": "good", "non": "bad"}}) + "\n")
    (tmp_path / "afile").write_text("")

    def meta_eval(out: Path, *args: str):
        return CliRunner().invoke(app, ["-q", "meta-eval", "--data", str(data), "--out", str(out), *args])

    failed = meta_eval(tmp_path / "run", "--system", "bleu")  # BLEU refuses the empty reference while it judges
    assert failed.exit_code == 2 and ":r0: field 'reference': " in failed.output
    assert not (tmp_path / "run").exists()
    in_a_file = meta_eval(tmp_path / "afile" / "sub", "--system", "bleu")
    assert in_a_file.exit_code == 2 and len(in_a_file.output.splitlines()) == 1
    assert f"{tmp_path / 'afile'} is a file, not a folder" in in_a_file.output
    no_system = meta_eval(tmp_path / "run")
    assert no_system.exit_code == 2 and "Missing option '--system'" in no_system.output


@pytest.mark.slow
def test_a_meta_eval_into_another_runs_folder_is_refused_unless_overwritten(tmp_path):
    """As evaluate's: the same config resumes, another one is one line naming config.json and --overwrite (in its
    own process, as a user meets it), and --overwrite replaces the earlier run."""
    data = tmp_path / "reviews"
    data.mkdir()
    (data / "dataset.json").write_text(json.dumps({"task": "reference"}))
    record = {"id": "r0", "user_id": "u", "input": "write a review", "reference": "a fine book", "profile": ["ok"]}
    (data / "test.jsonl").write_text(json.dumps(record | {"outputs": {"rag": "good book", "non": "bad"}}) + "\n")
    out = tmp_path / "run"
    first = ["-q", "meta-eval", "--data", str(data), "--out", str(out), "--system", "bleu"]
    assert CliRunner().invoke(app, first).exit_code == 0
    assert CliRunner().invoke(app, first).exit_code == 0  # the same run resumes
    before = (out / "config.json").read_text()

    other = [*first[:-1], "rouge-l"]
    refused = subprocess.run([sys.executable, "-m", "persetrain.cli", *other], capture_output=True, text=True)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode != 0 and 1 <= len(lines) <= 3 and "Traceback" not in refused.stderr
    assert f"{out / 'config.json'}: holds another run (it differs in systems)" in refused.stderr
    assert "--overwrite" in refused.stderr and (out / "config.json").read_text() == before

    assert CliRunner().invoke(app, [*other, "--overwrite"]).exit_code == 0
    assert [p.name for p in (out / "judgments").glob("*.jsonl")] == ["rouge-l.jsonl"]
