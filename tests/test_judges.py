"""Baseline judges (GEMBA, G-Eval, LLM-as-a-judge) on the tiny model, and the lexical metrics as evaluators."""

from __future__ import annotations

from pathlib import Path

import pytest

from persetrain.engine import load_engine
from persetrain.evaluators.base import JudgeContext
from persetrain.evaluators.llm_judge import GEMBAConfig, GEvalConfig, truncate
from persetrain.evaluators.registry import get_evaluator
from persetrain.metrics.text_similarity import meteor, sentence_bleu
from persetrain.schema import McqExample, ReferenceExample

REVIEW = "The blender is loud but crushes ice in seconds; I use it every morning for smoothies."
EXAMPLES = [
    ReferenceExample(
        id="r1",
        user_id="u",
        input="Review this blender.",
        reference=REVIEW,
        profile=["I love kitchen gadgets that save time."],
        outputs={"gold": REVIEW, "other": "Shipping was slow and the box was damaged."},
    ),
]
MCQ = [
    McqExample(
        id="m1",
        preference="I avoid gluten.",
        question="Where should I eat in Rome?",
        options=["A gluten-free trattoria.", "A famous pizzeria.", "A fresh pasta bar."],
        gold=0,
    )
]


def context(tmp_path: Path, system: str) -> JudgeContext:
    return JudgeContext(data=tmp_path, split="test", system=system, out=tmp_path)


@pytest.mark.parametrize("name", ["bleu", "rouge-1", "rouge-l", "meteor", "bertscore"])
def test_lexical_metrics_rank_the_reference_itself_first(name, tmp_path):
    evaluator = get_evaluator(name)()
    judgments = evaluator.judge(EXAMPLES, None, context(tmp_path, name))
    scores = {j.target: j.score for j in judgments}
    assert set(scores) == {"gold", "other"} and scores["gold"] > scores["other"]
    # METEOR's fragmentation penalty never reaches 0: one chunk of n matches scores 1 - 0.5 / n^3
    assert scores["gold"] == pytest.approx(100.0 if name == "bleu" else 1.0, abs=1e-3)


def test_lexical_values_match_the_libraries_and_a_missing_reference_is_refused(tmp_path):
    hyp, ref = "the cat sat on the mat", "a cat was sitting on the mat"
    [j] = get_evaluator("bleu")().judge(
        [ReferenceExample(id="x", user_id="u", input="i", reference=ref, profile=["p"], outputs={"s": hyp})],
        None,
        context(tmp_path, "bleu"),
    )
    assert j.score == pytest.approx(sentence_bleu(hyp, ref))
    assert meteor([ref], [ref])[0] == pytest.approx(1 - 0.5 * (1 / 7) ** 3, abs=1e-3)
    no_ref = ReferenceExample(id="y", user_id="u", input="i", profile=["p"], outputs={"s": hyp})
    with pytest.raises(ValueError, match=r":y: field 'reference': .* this example has none"):
        get_evaluator("rouge-l")().judge([no_ref], None, context(tmp_path, "rouge-l"))


def test_llm_judges_on_both_task_kinds(tiny_llama_dir, tmp_path):
    engine = load_engine(str(tiny_llama_dir), cache_path=tmp_path / "cache.sqlite")
    for name, config, low, high in (
        ("gemba", GEMBAConfig(), 0, 4),
        ("gemba", GEMBAConfig(scoring="choice_probs"), 0, 4),
        ("llm-judge", None, 1, 5),
    ):
        evaluator = get_evaluator(name)(config)
        ref = evaluator.judge(EXAMPLES, engine, context(tmp_path, name))
        assert {j.target for j in ref} == {"gold", "other"}
        assert all(j.parsed and low <= j.score <= high and j.cost.calls == 1 for j in ref)
        [mcq] = evaluator.judge(MCQ, engine, context(tmp_path, name))
        assert mcq.parsed and len(mcq.details["scores"]) == 3 and all(0 <= s <= 10 for s in mcq.details["scores"])
        assert mcq.cost.calls == 3  # one call per option
    geval = get_evaluator("g-eval")(GEvalConfig(samples=3)).judge(MCQ, engine, context(tmp_path, "ge"))
    by_system = {j.evaluator: j for j in geval}
    assert set(by_system) == {"ge", "ge-exact"}
    assert by_system["ge"].cost.calls == 3 * 3 and by_system["ge-exact"].cost.calls == 3
    # the sampled score is the mean of the read samples
    assert "3 of 3 samples read" in by_system["ge"].explanation


def test_truncation_keeps_the_first_tokens(tiny_llama_dir):
    engine = load_engine(str(tiny_llama_dir))
    long = " ".join(f"word{k}" for k in range(600))
    cut = truncate(long, 512, engine)
    assert len(engine.backend.tokenizer(cut, add_special_tokens=False)["input_ids"]) <= 512
    assert long.startswith(cut.rstrip()[:100]) and truncate("short text", 512, engine) == "short text"
