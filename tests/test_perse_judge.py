"""The PerSE judge: output parsing, position-bias cancellation, unparsed outputs kept in the metrics."""

from __future__ import annotations

import pytest
from numerics import close

from persetrain.engine import load_engine
from persetrain.evaluation import per_reviewer_sample
from persetrain.evaluators.perse import PerSEConfig, calibrate, judge_pairwise, judge_scalar, parse_scalar_output
from persetrain.evaluators.registry import SystemSpec
from persetrain.schema import Judgment, PairwiseExample, PairwiseProfileItem, ProfileReview, ScalarExample
from persetrain.tasks import scalar_metrics


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[Review] A slow, lovely film. [Score] 8", ("A slow, lovely film.", 8)),
        ("[Review] Meh. [Score]: 3/10", ("Meh.", 3)),
        ("I liked it. Score: 7", ("I liked it. Score: 7", 7)),
        ("Overall 9 out of 10 for me.", ("Overall 9 out of 10 for me.", 9)),
        ("[Review] Great. [Score] 11", ("Great.", None)),  # off the scale: not a score
        ("[Review] No number here at all.", ("No number here at all.", None)),
    ],
)
def test_parse_scalar_output(text, expected):
    assert parse_scalar_output(text) == expected


def _scalar(i: int) -> ScalarExample:
    profile = [
        ProfileReview(plot_id=f"p{k}", plot=f"A plot about harbour number {k}.", review="Fine.", score=k + 3)
        for k in range(3)
    ]
    return ScalarExample(
        id=f"s{i}",
        reviewer_id="r1",
        profile=profile,
        query_plot_id=f"q{i}",
        query_plot=f"A lighthouse keeper finds letter number {i}.",
        review="Lovely.",
        score=i + 2,
    )


def _pairwise(i: int) -> PairwiseExample:
    item = PairwiseProfileItem(
        premise="A town floods.", plot_a="They leave.", plot_b="They stay.", aspect="Ending", preferred="B"
    )
    return PairwiseExample(
        id=f"d{i}",
        annotator_id="a1",
        aspect="Ending",
        profile=[item],
        premise="A ship sinks.",
        plot_a=f"Everyone is saved {i}.",
        plot_b=f"Nobody is saved {i}.",
        preferred="A",
    )


def test_pairwise_order_swap_is_symmetric(tiny_llama_dir):
    """Averaging both orders makes the answer antisymmetric: swapping the plots flips P(A) to 1 - P(A)."""
    engine = load_engine(str(tiny_llama_dir))
    examples = [_pairwise(i) for i in range(3)]
    swapped = [ex.model_copy(update={"plot_a": ex.plot_b, "plot_b": ex.plot_a, "preferred": "B"}) for ex in examples]
    ours, theirs = judge_pairwise(engine, examples), judge_pairwise(engine, swapped)
    for a, b in zip(ours, theirs, strict=True):
        assert a.probs["A"] + b.probs["A"] == close(1.0, abs=1e-6)
        assert a.choice != b.choice or a.probs["A"] == close(0.5, abs=1e-6)
        assert a.cost.calls == 2


def test_scalar_judge_gives_both_scores_and_keeps_unparsed(tiny_llama_dir):
    engine = load_engine(str(tiny_llama_dir))
    examples = [_scalar(i) for i in range(4)]
    out = judge_scalar(engine, examples, PerSEConfig(max_new_tokens=6, temperature=0.8), name="tiny")
    assert set(out) == {"tiny", "tiny-expected"}
    assert all(1.0 <= j.score <= 10.0 and abs(sum(j.probs.values()) - 1) < 1e-6 for j in out["tiny-expected"])
    # A random tiny model writes no "[Score] n": every text judgment is unparsed, and the metrics say so.
    text = scalar_metrics(examples, out["tiny"])
    assert text["n"] == 4 and text["n_unparsed"] == sum(not j.parsed for j in out["tiny"])
    assert scalar_metrics(examples, out["tiny-expected"])["n_unparsed"] == 0


def test_metrics_count_missing_judgments():
    examples = [_scalar(i) for i in range(5)]
    judgments = {"partial": [Judgment(example_id=f"s{i}", evaluator="partial", score=float(i + 2)) for i in range(3)]}
    metrics = scalar_metrics(examples, judgments["partial"])
    assert metrics["n"] == 5 and metrics["n_unparsed"] == 2


def test_system_spec_parsing():
    assert SystemSpec.parse("mf") == SystemSpec("mf", "mf")
    assert SystemSpec.parse("perse:embedded:smollm2-135m-instruct") == SystemSpec(
        "embedded:smollm2-135m-instruct", "perse", "embedded:smollm2-135m-instruct"
    )
    assert SystemSpec.parse("trained=perse:runs/demo/judge") == SystemSpec("trained", "perse", "runs/demo/judge")
    assert SystemSpec.parse("bleu") == SystemSpec("bleu", "bleu")
    with pytest.raises(ValueError, match="unknown evaluator 'gpt4'; registered evaluators: .*perse"):
        SystemSpec.parse("gpt4").build()
    with pytest.raises(ValueError, match="needs a model"):
        SystemSpec.parse("perse").build()
    with pytest.raises(ValueError, match="uses no model"):
        SystemSpec.parse("mf:some-model").build()
    with pytest.raises(ValueError, match="unknown option.*temprature.*PerSEConfig has: temperature"):
        SystemSpec("j", "perse", "m", {"temprature": 0.1}).build()
    assert SystemSpec("j", "perse", "m", {"temperature": "0", "review": "false"}).build().config == PerSEConfig(
        temperature=0.0, review=False
    )


def test_judge_scores_are_calibrated_onto_the_dataset_scale():
    """Amazon: the judge answers on 1-10, the gold is 1-5 stars; metrics see calibrated scores."""
    examples = [
        _scalar(i % 5).model_copy(update={"score": i % 5 + 1, "score_max": 5, "id": f"a{i}"}) for i in range(20)
    ]
    judge_says = [2 * (i % 5) + 1 for i in range(20)]  # 1, 3, 5, 7, 9: ordered like the gold
    found = [
        Judgment(example_id=ex.id, evaluator="j", score=float(s), parsed=i != 0)
        for i, (ex, s) in enumerate(zip(examples, judge_says, strict=True))
    ]
    linear, record = calibrate(found, examples, "linear")
    assert record["method"] == "linear" and record["scale"] == [1, 5]
    assert [j.score for j in linear[1:5]] == [pytest.approx(1 + (s - 1) * 4 / 9) for s in judge_says[1:5]]
    assert linear[0].score == 1.0 and not linear[0].parsed  # an unparsed judgment stays unparsed
    quantile, _ = calibrate(found, examples, "quantile")
    assert all(1 <= j.score <= 5 for j in quantile)
    metrics = scalar_metrics(examples, quantile)
    assert metrics["n_unparsed"] == 1 and metrics["spearman"] > 0.8  # the unparsed one sits at the midpoint
    ten_point = [_scalar(i) for i in range(3)]
    same = [Judgment(example_id=ex.id, evaluator="j", score=7.0) for ex in ten_point]
    assert calibrate(same, ten_point, "quantile") == (same, None)
    nothing_parsed = [j.model_copy(update={"parsed": False}) for j in found[:-1]] + found[-1:]
    _, record = calibrate(nothing_parsed, examples, "quantile")  # one fold has nothing to fit on
    assert record["linear_folds"] >= 1
    with pytest.raises(ValueError, match="unknown calibration"):
        calibrate(found, examples, "isotonic")


def test_per_reviewer_sample_spreads_the_budget_over_reviewers():
    examples = [
        _scalar(i % 5).model_copy(update={"id": f"r{r}:q{i}", "reviewer_id": f"r{r}"})
        for r in range(4)
        for i in range(6)
    ]
    picked = per_reviewer_sample(examples, 2)
    assert len(picked) == 8 and {ex.reviewer_id for ex in picked} == {"r0", "r1", "r2", "r3"}
    assert picked == [ex for ex in examples if ex in picked]  # original order kept
    assert per_reviewer_sample(examples, 2) == picked  # deterministic
