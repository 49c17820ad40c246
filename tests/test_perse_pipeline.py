"""PerSE end to end on the real embedded model: raw files -> dataset -> SFT -> judge -> metrics -> report.

Sizes are cut to the bone (two training steps, four test examples) so the test checks the wiring,
not the judge's quality; `make demo` and benchmarks/perse.py measure quality.
"""

from __future__ import annotations

import json

import pytest
from datasets import load_from_disk

from data_prep.perse.prepare import prepare_perse
from data_prep.synthetic.perse import write_sample_data
from persetrain.data import read_split
from persetrain.demos.perse import CPU_RECIPE
from persetrain.evaluation import EvaluationConfig, evaluate
from persetrain.evaluators.perse import built_profile_words
from persetrain.evaluators.registry import SystemSpec
from persetrain.models import load_model
from persetrain.prompts.perse import scalar_request
from persetrain.train.sft import run_sft


@pytest.mark.slow
def test_perse_pipeline_on_embedded_model(tmp_path):
    write_sample_data(
        tmp_path / "raw", seed=1, n_plots=40, n_reviewers=30, reviews_per_reviewer=(7, 8), n_sparse_reviewers=1
    )
    dataset = prepare_perse(tmp_path / "raw", tmp_path / "data", engine=None, ks=(3,), profile_words=12).datasets[
        "per_mpst_k3"
    ]
    # The judge is asked exactly what the judge was trained on: prompts cut as the dataset was built.
    row = load_from_disk(str(dataset))["test"][0]
    example = read_split(dataset, "test")[1][0]
    assert built_profile_words(dataset) == 12
    assert [m.model_dump() for m in scalar_request(example, 12).messages] == row["prompt"]

    judge = tmp_path / "judge"
    result = run_sft(
        [
            "--config",
            str(CPU_RECIPE),
            "--dataset_path",
            str(dataset),
            "--output_dir",
            str(judge),
            "--max_steps",
            "2",
            "--save_steps",
            "2",
            "--logging_steps",
            "1",
        ]
    )
    assert result.global_step == 2
    logged = [json.loads(line) for line in (judge / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in record for record in logged)
    model, _ = load_model(str(result.model_dir))
    assert sum(p.numel() for p in model.parameters()) > 100_000_000

    config = EvaluationConfig(
        data=str(dataset),
        out=str(tmp_path / "eval"),
        max_per_reviewer=2,
        max_examples=4,
        systems=[
            SystemSpec("trained", "perse", str(result.model_dir), {"max_new_tokens": 24, "temperature": 0.8}),
            SystemSpec.parse("reviewer-avg"),
            SystemSpec.parse("mf"),
        ],
    )
    metrics = evaluate(config)
    systems = metrics["systems"]
    assert set(systems) == {"trained", "trained-expected", "reviewer-avg", "mf"}
    assert all(m["n"] == 4 for m in systems.values())
    assert systems["trained-expected"]["n_unparsed"] == 0
    assert "explanation" in systems["trained"]  # BLEU / ROUGE / BERTScore of the generated reviews
    for name in ("config.json", "environment.json", "metrics.json", "report.md", "scatter.png"):
        assert (tmp_path / "eval" / name).is_file(), name
    judged = (tmp_path / "eval" / "judgments" / "trained.jsonl").read_text().splitlines()
    assert len(judged) == 4
    assert "| trained-expected |" in (tmp_path / "eval" / "report.md").read_text()

    # A re-run (served from the engine's request cache; sampling is seeded per request) is identical
    # but for the seconds it took.
    def timeless(m):
        return json.dumps(
            {k: {**v, "cost": {**v["cost"], "seconds": 0}} for k, v in m["systems"].items()}, sort_keys=True
        )

    assert timeless(evaluate(config)) == timeless(metrics)


def test_the_demo_report_opens_with_a_summary_of_what_was_trained_and_measured():
    from persetrain.demos.perse import summary_section

    systems = {
        "trained": {"kendall": 0.40},
        "trained-expected": {"kendall": 0.43},
        "untrained": {"kendall": None},
        "untrained-expected": {"kendall": 0.02},
        "reviewer-avg": {"kendall": 0.12},
        "mf": {"kendall": 0.33},
    }
    text = " ".join(summary_section({"n_examples": 48, "systems": systems}, {"sft": 300.0, "evaluate": 120.0}))
    assert "in 7.0 minutes" in text and "on 48 queries of reviewers it never saw" in text
    assert "trained 0.430, untrained 0.020, the reviewer's average score 0.120" in text
    assert "it learned to read a reviewer's taste" in text
    systems["trained"]["kendall"] = systems["trained-expected"]["kendall"] = 0.05
    text = " ".join(summary_section({"n_examples": 48, "systems": systems}, {"sft": 300.0}))
    assert "does not beat both" in text
    # constant parsed scores give a NaN tau in memory (written as null): they rank nothing, the expected score counts
    systems["trained"]["kendall"] = 0.43
    systems["untrained"]["kendall"] = float("nan")
    text = " ".join(summary_section({"n_examples": 48, "systems": systems}, {"sft": 300.0}))
    assert "trained 0.430, untrained 0.020," in text and "it learned to read a reviewer's taste" in text
    systems["untrained-expected"]["kendall"] = float("nan")
    text = " ".join(summary_section({"n_examples": 48, "systems": systems}, {"sft": 300.0}))
    assert "trained 0.430, untrained undefined," in text and "it learned to read a reviewer's taste" in text
