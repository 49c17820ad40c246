"""The ``verdict`` evaluator: a think-then-verdict judge read as its training reward reads it.

The tiny random model checks the plumbing (the prompt it asks, the text it keeps, the meta-eval probes); it never
writes a verdict line, so how an answer is read is checked on written answers (``read_verdict``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from persetrain.engine import load_engine
from persetrain.engine.types import Cost, Generation, GenerationParams
from persetrain.evaluators.base import JudgeContext
from persetrain.evaluators.registry import SystemSpec
from persetrain.evaluators.verdict import Verdict, VerdictConfig, read_verdict
from persetrain.meta_eval import MetaEvalConfig, meta_evaluate
from persetrain.prompts.verdict import choice_request
from persetrain.schema import McqExample

PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"
OPTIONS = ["Grill a steak.", "Cook a lentil curry.", "Order fried chicken.", "Make a tuna salad."]


def mcq(ex_id: str, gold: int = 1, options: list[str] = OPTIONS) -> McqExample:
    return McqExample(id=ex_id, preference="I am vegan.", question="What should I cook?", options=options, gold=gold)


def _context(tmp_path: Path) -> JudgeContext:
    return JudgeContext(data=tmp_path, split="test", system="judge", out=tmp_path)


def _generation(text: str) -> Generation:
    return Generation(text=text, finish_reason="stop", cost=Cost(calls=1, prompt_tokens=9, completion_tokens=5))


def test_the_last_verdict_line_is_the_choice_and_anything_else_is_unparsed():
    texts = [
        "The curry has no animal products.\nVerdict: B",
        "I would cook the lentil curry, option B.",
        "Verdict: A\nOn reflection the curry is better.",
    ]
    first, *unread = [read_verdict(mcq(k), _generation(t), "judge") for k, t in zip("abc", texts, strict=True)]
    assert (first.choice, first.parsed, first.details) == ("1", True, {"scores": [0.0, 10.0, 0.0, 0.0], "parsed": "B"})
    assert first.explanation == texts[0] and first.cost.calls == 1 and first.evaluator == "judge"
    for j, text in zip(unread, texts[1:], strict=True):
        assert (j.choice, j.parsed, j.details) == (None, False, {"scores": None, "parsed": None})
        assert j.explanation == text


def test_it_refuses_what_it_cannot_letter(tiny_llama_dir, tmp_path):
    engine = load_engine(str(tiny_llama_dir))
    with pytest.raises(ValueError, match="at least two"):
        Verdict().judge([mcq("a", 0, ["only"])], engine, _context(tmp_path))
    with pytest.raises(ValueError, match="at most 10 options"):
        Verdict().judge([mcq("a", 0, [f"o{k}" for k in range(11)])], engine, _context(tmp_path))
    with pytest.raises(ValueError, match="needs a model"):
        Verdict().judge([mcq("a")], None, _context(tmp_path))


def test_it_asks_the_think_prompt_and_keeps_the_generated_text(tiny_llama_dir, tmp_path):
    """Asked again by hand, every request is a hit in the engine's cache (keyed on the whole request and params)."""
    examples = [mcq("a"), mcq("b", gold=2)]
    engine = load_engine(str(tiny_llama_dir), cache_path=tmp_path / "cache.sqlite")
    try:
        judgments = Verdict(VerdictConfig(max_new_tokens=12)).judge(examples, engine, _context(tmp_path))
        hits = engine.cache_hits
        requests = [choice_request(ex.preference, ex.question, ex.options, "think") for ex in examples]
        direct = engine.generate(requests, GenerationParams(max_new_tokens=12, temperature=0.0))
        assert engine.cache_hits - hits == len(examples)
    finally:
        engine.close()
    for j, g in zip(judgments, direct, strict=True):
        assert j.explanation == g.text and j.cost.calls == 1 and j.cost.completion_tokens > 0
        assert j.choice is None and not j.parsed  # random weights never end on a verdict line


def test_meta_eval_probes_run_on_it(tiny_llama_dir, tmp_path):
    out = tmp_path / "meta"
    system = SystemSpec("verdict", "verdict", str(tiny_llama_dir), {"max_new_tokens": 8})
    config = MetaEvalConfig(
        data=str(PREFEVAL), out=str(out), systems=[system], max_examples=3, probes=["flip", "blind", "swap"]
    )
    metrics = meta_evaluate(config)
    result = metrics["systems"]["verdict"]
    assert metrics["n_examples"] == 3 and 0 <= result["flip_rate"] <= 1
    assert set(result["agreement"]) == {"accuracy", "mse", "ndcg"}
    for probe in ("flip", "blind", "swap"):
        judged = [json.loads(line) for line in (out / "judgments" / probe / "verdict.jsonl").read_text().splitlines()]
        assert len(judged) == 3 and all(j["explanation"] for j in judged)
