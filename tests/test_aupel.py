"""AuPEL: refusals, vote tallies, Elo metrics from judgments, and one real end-to-end run.

The end-to-end test runs ``persetrain evaluate`` with ExPerT and AuPEL on the embedded model over
two short synthetic records (the user's own text as system ``gold`` and a plain ``non`` output), and
checks the run directory a person reads.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.evaluators.aupel import AuPEL, AuPELConfig, aupel_metrics, tally
from persetrain.evaluators.base import JudgeContext
from persetrain.metrics.expert import SCORE_NAMES
from persetrain.schema import Judgment, ReferenceExample


def _example(outputs: dict[str, str], id: str = "r1") -> ReferenceExample:
    return ReferenceExample(
        id=id,
        user_id="u1",
        input="Review the cafe.",
        reference="great coffee.",
        profile=["i loved the bakery."],
        outputs=outputs,
    )


def test_odd_repeats_and_a_single_system_are_refused(tmp_path):
    context = JudgeContext(data=tmp_path, split="test", system="aupel", out=tmp_path / "run")
    two = [_example({"gold": "great coffee.", "non": "A fine cafe."})]
    for repeats in (1, 3, 0):
        with pytest.raises(ValueError, match="repeats must be a positive even number"):
            AuPEL(AuPELConfig(repeats=repeats)).judge(two, None, context)
    with pytest.raises(ValueError, match="needs at least two; .* holds outputs of 1 \\(gold\\)"):
        AuPEL().judge([_example({"gold": "great coffee."})], None, context)
    with pytest.raises(ValueError, match="unknown dimension"):
        AuPEL(AuPELConfig(dimensions=("humour",))).judge(two, None, context)


def test_tally():
    assert tally(["first", "first", "second", "first"]) == "win"
    assert tally(["first", "second"]) == "tie"
    assert tally(["second", "even"]) == "loss"
    assert tally(["even", "even"]) == "tie"


def _game(example: str, a: str, b: str, dim: str, outcome: str) -> Judgment:
    return Judgment(
        example_id=example,
        evaluator="aupel",
        target=a,
        choice=outcome,
        score={"win": 1.0, "tie": 0.5, "loss": 0.0}[outcome],
        details={"dimension": dim, "opponent": b},
    )


def test_metrics_elo_records_and_curves():
    judgments = []
    for i in range(20):
        judgments.append(_game(f"e{i}", "gold", "non", "personalization", "win"))
        judgments.append(_game(f"e{i}", "gold", "non", "quality", "tie" if i % 2 else "loss"))
    m = aupel_metrics(judgments, AuPELConfig(n_boot=100, draws=200))
    assert m["elo"]["personalization"]["gold"]["median"] > 1000 > m["elo"]["personalization"]["non"]["median"]
    assert m["elo"]["quality"]["gold"]["median"] < 1000
    assert set(m["elo"]) == {"personalization", "quality", "overall"}
    assert m["record"]["personalization"]["gold vs non"] == {"win": 1.0, "tie": 0.0, "loss": 0.0, "n": 20}
    assert m["record"]["quality"]["gold vs non"]["tie"] == 0.5
    curve = m["consistency"]["personalization"]["gold vs non"]
    assert curve["n"][-1] == 10 and curve["sensitivity"][-1] == 1.0 and curve["consistency"][-1] == 1.0


@pytest.mark.slow
def test_evaluate_expert_and_aupel_end_to_end(tmp_path):
    # Two short SYNTHETIC records (one user's lowercase, exclaiming style as "gold"; a plain "non" output),
    # short so that the embedded model's extraction stays cheap on a CPU.
    data = tmp_path / "reference"
    data.mkdir()
    (data / "dataset.json").write_text(json.dumps({"task": "reference", "synthetic": True}))
    records = [
        {
            "id": "r1",
            "user_id": "u1",
            "input": "Review: Steel Kettle",
            "reference": "this kettle boils fast! i love it!",
            "profile": ["this lamp is bright! i love it!", "this mug keeps tea hot! i like it!"],
            "outputs": {"gold": "this kettle boils fast! i love it!", "non": "The kettle boils water quickly."},
        },
        {
            "id": "r2",
            "user_id": "u1",
            "input": "Review: Wool Socks",
            "reference": "these socks are warm! i love them!",
            "profile": ["this lamp is bright! i love it!", "this mug keeps tea hot! i like it!"],
            "outputs": {"gold": "these socks are warm! i love them!", "non": "The socks are warm and comfortable."},
        },
    ]
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "run"
    model = "embedded:smollm2-135m-instruct"
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            "--data",
            str(data),
            "--out",
            str(out),
            "--system",
            f"expert=expert:{model}",
            "--system",
            f"aupel=aupel:{model}",
            "--set",
            "max_aspects=1",
            "--set",
            "max_evidence=1",
            "--set",
            "extract_tokens=100",
            "--set",
            "answer_tokens=24",
            "--set",
            "reason_chars=60",
            "--set",
            "max_retries=1",
            "--set",
            "n_boot=200",
            "--set",
            "draws=200",
        ],
    )
    assert result.exit_code == 0, result.output

    metrics = json.loads((out / "metrics.json").read_text())
    expert, aupel = metrics["systems"]["expert"], metrics["systems"]["aupel"]
    assert set(expert["targets"]) == {"gold", "non"} and expert["n"] == 4
    assert expert["cost"]["calls"] > 0
    judgments = [json.loads(x) for x in (out / "judgments" / "expert.jsonl").read_text().splitlines()]
    for j in judgments:
        assert j["target"] in ("gold", "non") and j["cost"]["calls"] >= 2
        if j["parsed"]:
            assert set(j["details"]["scores"]) == set(SCORE_NAMES)
            assert len(j["details"]["recall"]) >= 1 and len(j["details"]["precision"]) >= 1
            record = j["details"]["recall"][0]
            assert {"aspect", "matched_aspect", "content", "style", "content_reason", "style_reason"} <= set(record)
    assert set(aupel["elo"]) == {"personalization", "quality", "relevance", "overall"}
    assert set(aupel["elo"]["overall"]) == {"gold", "non"}
    assert aupel["n"] == 2 * 3  # two records, one pair, three dimensions
    report = (out / "report.md").read_text()
    assert "ExPerT explanations: expert" in report and "| reference aspect | matched aspect |" in report
    assert "AuPEL Elo ratings: aupel" in report and (out / "aupel-aupel-consistency.png").stat().st_size > 1000
