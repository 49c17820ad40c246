"""ExPerT: aggregation math, reference data errors, failure handling, and one real run.

The scores are checked on hand-built match records against numbers worked out by hand (the same
semantics as the paper's ``expert_score`` package). The pipeline runs on real models: a tiny random
LLaMA for the failure paths (an answer budget too small to finish the JSON), and the embedded model
end to end through ``persetrain evaluate`` with AuPEL (``test_aupel.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.parl.reference import read_reference
from persetrain.data import read_split
from persetrain.engine import load_engine
from persetrain.evaluators.base import JudgeContext
from persetrain.evaluators.expert import ExPerT, ExPerTConfig
from persetrain.evaluators.expert_parsing import parse_aspects
from persetrain.evaluators.expert_pipeline import ExPerTJudge
from persetrain.io import InputError
from persetrain.metrics.expert import SCORE_NAMES, expert_scores, mean_scores
from persetrain.schema import ReferenceExample


def _rec(matched: bool, content: bool = False, style: bool = False) -> dict:
    return {"matched_aspect": "x" if matched else None, "content": content, "style": style}


def test_fifteen_scores_by_hand():
    recall = [_rec(True, True, False), _rec(True, True, True), _rec(False)]
    precision = [_rec(True, False, True), _rec(False, True, True)]  # unmatched: its verdicts do not count
    s = expert_scores(recall, precision)
    assert list(s) == list(SCORE_NAMES) and len(s) == 15
    expected = {
        "content_only": (2 / 3, 0.0, 0.0),
        "style_only": (1 / 3, 1 / 2, 0.4),  # 2 * (1/3 * 1/2) / (1/3 + 1/2)
        "content_and_style": (1 / 3, 0.0, 0.0),
        "content_or_style": (2 / 3, 1 / 2, 4 / 7),  # 2 * (1/3) / (7/6)
        "content_style_average": (0.5, 0.25, 1 / 3),  # (0.5 + 1 + 0) / 3 and 0.5 / 2
    }
    for name, (r, p, f) in expected.items():
        assert s[f"{name}_recall"] == pytest.approx(r)
        assert s[f"{name}_precision"] == pytest.approx(p)
        assert s[f"{name}_f1"] == pytest.approx(f)


def test_no_aspects_score_zero_and_means():
    zero = expert_scores([], [_rec(True, True, True)])
    assert zero["content_only_recall"] == 0 and zero["content_only_precision"] == 1 and zero["content_only_f1"] == 0
    perfect = expert_scores([_rec(True, True, True)], [_rec(True, True, True)])
    assert all(v == 1 for v in perfect.values())
    assert mean_scores([zero, perfect])["content_only_precision"] == 1
    assert mean_scores([zero, perfect])["style_only_f1"] == 0.5


def test_parse_aspects():
    text = '[{"title": "coffee", "description": "the coffee is good", "evidence": ["great coffee.", " "]}]'
    assert parse_aspects(text) == [
        {"title": "coffee", "description": "the coffee is good", "evidence": ["great coffee."]}
    ]
    for bad in ('{"title": "x"}', '[{"title": "x", "evidence": []}]', '[{"title": "x", "evidence": ["a"]', "[1]"):
        with pytest.raises(ValueError):
            parse_aspects(bad)


def _record(**over) -> dict:
    base = {
        "id": "r1",
        "user_id": "u1",
        "input": "Review the cafe.",
        "reference": "great coffee, slow staff.",
        "profile": ["i loved the bakery."],
        "outputs": {"gold": "great coffee, slow staff.", "non": "A fine cafe."},
    }
    return {**base, **over}


def _write(folder: Path, records: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset.json").write_text(json.dumps({"task": "reference"}))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_reader_errors_name_file_line_and_field(tmp_path):
    data = _write(tmp_path / "d", [_record(), _record(id="r2", input="")])
    with pytest.raises(InputError, match=r"test\.jsonl:2: field 'input'"):
        read_split(data)
    data = _write(tmp_path / "e", [_record(), _record(id="r2", outputs={"gold": "x", "non": "  "})])
    with pytest.raises(InputError, match=r"test\.jsonl:2: field 'outputs'.*'non' is empty"):
        read_reference(data / "test.jsonl")
    data = _write(tmp_path / "f", [_record(), _record(id="r2", outputs={"gold": "x"})])
    with pytest.raises(InputError, match=r"test\.jsonl:2: field 'outputs': no output of non"):
        read_reference(data / "test.jsonl")
    task, examples = read_split(_write(tmp_path / "g", [_record()]))
    assert task.name == "reference" and isinstance(examples[0], ReferenceExample)


def test_expert_refuses_missing_reference_and_missing_system(tmp_path):
    context = JudgeContext(data=tmp_path / "d", split="test", system="expert", out=tmp_path / "run")
    no_ref = [ReferenceExample(**_record(reference=""))]
    with pytest.raises(InputError, match=r"d:r1: field 'reference'"):
        ExPerT().judge(no_ref, None, context)
    uneven = [ReferenceExample(**_record()), ReferenceExample(**_record(id="r2", outputs={"gold": "x"}))]
    with pytest.raises(InputError, match=r"d:r2: field 'outputs': no output of system\(s\) non"):
        ExPerT().judge(uneven, None, context)


@pytest.fixture(scope="module")
def tiny_engine(tiny_llama_dir):
    engine = load_engine(str(tiny_llama_dir))
    yield engine
    engine.close()


def test_unreadable_extraction_is_kept_unparsed_after_retries(tiny_engine):
    # 4 tokens cannot finish the JSON list: every attempt fails, and the instance is kept, unscored.
    config = ExPerTConfig(extract_tokens=4, max_retries=1, max_aspects=2)
    judgments = ExPerTJudge(tiny_engine, config, "expert").run([ReferenceExample(**_record())])
    assert [j.target for j in judgments] == ["gold", "non"]
    assert all(not j.parsed and j.score is None for j in judgments)
    assert judgments[0].details["failures"]["extraction"] == 2  # reference and output (the same text)
    assert judgments[0].details["attempts"] == {"reference": 2, "output": 2}
    assert judgments[0].cost.calls == 4  # two attempts for each of the two extractions


def test_match_steps_text_failure_and_choice_probs_answer(tiny_engine):
    from persetrain.evaluators.expert_pipeline import _Step
    from persetrain.prompts.expert import match_choices, match_request

    aspects = [
        {"title": "coffee", "description": "the coffee is great", "evidence": ["great coffee."]},
        {"title": "staff", "description": "the staff are slow", "evidence": ["slow staff."]},
    ]

    def steps():
        return [
            _Step(0, "recall", i, match_request(a, aspects), match_choices(len(aspects))) for i, a in enumerate(aspects)
        ]

    # A 3-token budget never finishes a match object: after the retries the step has no answer (unmatched).
    failing = steps()
    ExPerTJudge(tiny_engine, ExPerTConfig(mode="text", answer_tokens=3, max_retries=1), "expert").answer(failing, "m")
    assert all(s.answer is None and s.cost.calls == 2 for s in failing)
    # The choice_probs path always answers from the closed set, with the probabilities kept.
    read = steps()
    ExPerTJudge(tiny_engine, ExPerTConfig(), "expert").answer(read, "m")
    for s in read:
        assert s.answer in ("1", "2", "none") and set(s.probs) == {"1", "2", "none"}
        assert s.answer == max(s.probs, key=s.probs.get) and s.cost.calls == 1
