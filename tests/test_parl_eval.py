"""PARL metrics with exact values, and the evaluator end to end (rubrics induce; evaluate on the embedded model)."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.metrics.parl import (
    first_last_fifth,
    mean_std,
    paired_runs_t_test,
    paired_t_test,
    parl_metrics,
    run_metrics,
    runs_from_checks,
)
from persetrain.models import DEFAULT_MODEL

T, F = True, False
RUN = [
    {"gt": [T, T], "non": [T, F], "rag": [T, T]},
    {"gt": [T, T, T], "non": [F, F, F], "rag": [T, F, T]},
    {},
]  # the third user's rubric set came out empty


def test_run_metrics_exact():
    m = run_metrics(RUN)
    assert m["user_coverage"] == pytest.approx(2 / 3)
    assert m["avg_rules_per_user"] == pytest.approx(5 / 3)
    assert (m["user_acc/gt"], m["user_acc/non"], m["user_acc/rag"]) == (1.0, 0.0, 0.5)
    assert m["rubric_acc/gt"] == 1.0 and m["rubric_acc/non"] == pytest.approx(0.2) and m["rubric_acc/rag"] == 0.8
    assert m["max_diff"] == 0.5  # gt 1.0 minus the best negative (rag, 0.5)
    assert m["ttest_t/non"] is None  # identical differences: no variance, no t


def test_paired_t_test_matches_scipy():
    run = [{"gt": [g], "rag": [r]} for g, r in [(T, F), (T, T), (T, F), (F, F)]]
    expected = stats.ttest_rel([1, 1, 1, 0], [0, 1, 0, 0], alternative="greater")
    got = paired_t_test(run, "rag")
    assert got["t"] == pytest.approx(expected.statistic) and got["p"] == pytest.approx(expected.pvalue)
    assert got["n"] == 4


def test_paired_runs_t_test_matches_scipy_and_drops_undefined_runs():
    trained, untrained = [0.5, 0.25, None, 0.75], [0.0, 0.25, 0.1, 0.25]
    expected = stats.ttest_rel([0.5, 0.25, 0.75], [0.0, 0.25, 0.25], alternative="greater")
    got = paired_runs_t_test(trained, untrained)
    assert got["t"] == pytest.approx(expected.statistic) and got["p"] == pytest.approx(expected.pvalue)
    assert got["n"] == 3
    assert paired_runs_t_test([0.5, 0.5], [0.0, 0.0])["p"] is None  # equal differences: no variance, no t


def test_mean_and_std_over_runs():
    second = [{"gt": [T], "non": [F]}, {"gt": [T], "non": [F]}, {"gt": [F], "non": [F]}]
    m = parl_metrics([RUN, second])
    assert m["runs"] == 2
    assert m["user_coverage"] == pytest.approx((2 / 3 + 1) / 2)
    assert m["user_coverage_std"] == pytest.approx(math.sqrt(2 * (1 / 6) ** 2))
    assert mean_std([None, None]) == {"mean": None, "std": None, "n": 0}


def test_first_and_last_fifth_of_a_curve():
    assert first_last_fifth([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]) == (1.5, 9.5)
    assert first_last_fifth([0.0, 1.0, 2.0]) == (0.0, 2.0)  # fewer than five steps: one step each
    assert first_last_fifth([]) == (None, None)


def test_runs_from_checks_marks_unparsed_users_uncovered():
    runs = runs_from_checks(
        ["a", "b"], [("a", "gt", 0, [T]), ("a", "non", 0, [F]), ("b", "gt", 0, None), ("b", "non", 0, None)]
    )
    assert runs == [[{"gt": [T], "non": [F]}, {}]]


@pytest.fixture(scope="module")
def parl_data(tmp_path_factory):
    from data_prep.parl.prepare import prepare_parl
    from data_prep.synthetic.parl import write_parl_sample

    root = tmp_path_factory.mktemp("parl")
    write_parl_sample(root / "raw")
    prepare_parl(root / "raw", root / "prepared", tasks=("news",))
    return root / "prepared" / "parl_news"


@pytest.mark.slow
def test_rubrics_induce_cli(parl_data, tmp_path, tiny_llama_dir):
    out = tmp_path / "rubrics.jsonl"
    result = CliRunner().invoke(
        app,
        [
            "-q",
            "rubrics",
            "induce",
            "--data",
            str(parl_data),
            "--out",
            str(out),
            "--model",
            str(tiny_llama_dir),
            "--max-new-tokens",
            "48",
            "--max-examples",
            "2",
            "--runs",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["run"], r["seed"]) for r in records] == [(0, 0), (0, 0), (1, 1), (1, 1)]
    assert all(set(r["satisfied"]) == {"gt", "synthetic-non", "synthetic-rag"} for r in records)
    bad = CliRunner().invoke(app, ["rubrics", "induce", "--data", str(tmp_path), "--out", str(out)])
    assert bad.exit_code == 2 and "not a dataset" in bad.output


@pytest.mark.slow
def test_evaluate_parl_on_the_embedded_model(parl_data, tmp_path):
    """The real pipeline: the 135M model induces rubrics under structured output and judges them."""
    run = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "-q",
            "evaluate",
            "--data",
            str(parl_data),
            "--out",
            str(run),
            "--system",
            f"lm135m=parl:{DEFAULT_MODEL}",
            "--set",
            "max_new_tokens=160",
            "--set",
            "temperature=0",
            "--set",
            "max_tries=1",
            "--max-examples",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((run / "metrics.json").read_text())["systems"]["lm135m"]
    assert metrics["users"] == 1 and 0.0 <= metrics["user_coverage"] <= 1.0
    judgments = [json.loads(line) for line in (run / "judgments" / "lm135m.jsonl").read_text().splitlines()]
    assert len(judgments) == 3  # one per target: gt and the two negatives
    parsed = [j for j in judgments if j["parsed"]]
    assert parsed, "structured output must give the embedded model parsable rubric sets"
    for j in parsed:
        assert set(j["details"]) >= {"rules", "p_yes", "satisfied", "dropped", "run"}
        assert len(j["details"]["rules"]) == len(j["details"]["satisfied"])
    assert "PARL rubrics" in (run / "report.md").read_text()
