"""Metrics computed on inputs whose answers are known by hand or by an independent library call."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from persetrain.metrics import (
    accuracy,
    apply_calibration,
    bertscore,
    bootstrap_ci,
    corpus_bleu,
    correlations,
    fit_quantile_calibration,
    linear_calibration,
    pairwise_accuracy,
    rouge,
    sentence_bleu,
    similarity_summary,
)

GOLD = [3, 7, 5, 9, 1, 6, 8, 2]


# --- correlations ---------------------------------------------------------------------------------


def test_perfect_and_reversed_correlation():
    up = correlations([2 * g + 1 for g in GOLD], GOLD)
    down = correlations([-g for g in GOLD], GOLD)
    for method in ("pearson", "spearman", "kendall"):
        assert up[method] == pytest.approx(1.0)
        assert down[method] == pytest.approx(-1.0)
    assert up["n"] == up["n_used"] == len(GOLD) and up["n_unparsed"] == 0 and up["note"] == ""


def test_correlations_match_scipy_with_p_values():
    rng = np.random.default_rng(1)
    gold = rng.integers(1, 11, 200)
    pred = gold + rng.normal(0, 3, 200)
    got = correlations(pred.tolist(), gold.tolist())
    assert (got["pearson"], got["pearson_p"]) == pytest.approx(tuple(stats.pearsonr(pred, gold)))
    assert (got["spearman"], got["spearman_p"]) == pytest.approx(tuple(stats.spearmanr(pred, gold)))
    tau = stats.kendalltau(pred, gold, variant="b")
    assert (got["kendall"], got["kendall_p"]) == pytest.approx((tau.statistic, tau.pvalue))
    assert 0 < got["kendall"] < got["pearson"] < 1


def test_unparsed_predictions_default_to_scale_midpoint_and_are_counted():
    pred = [3, None, 5, 9, float("nan"), 6, 8, 2]
    got = correlations(pred, GOLD)
    filled = [5.5 if p is None or p != p else p for p in pred]
    assert got["n"] == 8 and got["n_unparsed"] == 2 and got["n_used"] == 8
    assert got["unparsed_policy"] == "midpoint" and got["unparsed_value"] == 5.5
    assert got["kendall"] == pytest.approx(stats.kendalltau(filled, GOLD).statistic)
    assert correlations(pred, GOLD, scale=(1, 5))["unparsed_value"] == 3.0


def test_drop_policy_reports_what_it_dropped():
    pred = [3, None, 5, 9, 1, 6, 8, 2]
    got = correlations(pred, GOLD, unparsed="drop")
    kept_gold = [g for p, g in zip(pred, GOLD, strict=True) if p is not None]
    assert got["n"] == 8 and got["n_unparsed"] == 1 and got["n_used"] == 7
    assert got["unparsed_value"] is None
    assert got["pearson"] == pytest.approx(stats.pearsonr([3, 5, 9, 1, 6, 8, 2], kept_gold)[0])


def test_constant_input_gives_nan_with_note_and_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        const_pred = correlations([5] * len(GOLD), GOLD)
        const_gold = correlations(GOLD, [4] * len(GOLD))
        one_pair = correlations([None, 3], [1, 2], unparsed="drop")
    assert all(
        math.isnan(const_pred[m]) and math.isnan(const_pred[f"{m}_p"]) for m in ("pearson", "spearman", "kendall")
    )
    assert "predictions are constant" in const_pred["note"]
    assert "gold scores are constant" in const_gold["note"]
    assert "fewer than 2" in one_pair["note"] and one_pair["n_unparsed"] == 1


def test_correlations_reject_bad_input():
    with pytest.raises(ValueError, match="items"):
        correlations([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="gold"):
        correlations([1, 2], [1, None])
    with pytest.raises(ValueError, match="policy"):
        correlations([1, 2], [1, 2], unparsed="zero")


def test_bootstrap_ci_brackets_the_estimate_and_is_seeded():
    rng = np.random.default_rng(2)
    gold = rng.integers(1, 11, 150).tolist()
    pred = (np.asarray(gold) + rng.normal(0, 3, 150)).tolist()
    point = correlations(pred, gold)["kendall"]
    low, high = bootstrap_ci(pred, gold, n_boot=300, seed=7)
    assert low < point < high and high - low < 0.3
    assert bootstrap_ci(pred, gold, n_boot=300, seed=7) == (low, high)
    narrow = bootstrap_ci(pred, gold, n_boot=300, seed=7, confidence=0.5)
    assert low < narrow[0] < narrow[1] < high
    assert bootstrap_ci(GOLD, GOLD, method="pearson", n_boot=50) == pytest.approx((1.0, 1.0))
    assert all(math.isnan(v) for v in bootstrap_ci([5] * 8, GOLD, n_boot=10))


# --- pairwise accuracy ----------------------------------------------------------------------------


def test_accuracy_counts_unparsed_as_wrong():
    got = accuracy(["A", None, "B", "B"], ["A", "A", "B", "A"])
    assert got == {"accuracy": 0.5, "n": 4, "n_correct": 2, "n_unparsed": 1}


def test_pairwise_accuracy_per_aspect_macro_and_micro_by_hand():
    aspects = ["Surprise", "Surprise", "Surprise", "Surprise", "Ending", "Ending"]
    gold = ["A", "B", "A", "B", "A", "B"]
    pred = ["A", "B", "A", None, "B", "B"]
    got = pairwise_accuracy(pred, gold, aspects)
    assert list(got["per_aspect"]) == ["Surprise", "Ending"]
    assert got["per_aspect"]["Surprise"] == {"accuracy": 0.75, "n": 4, "n_correct": 3, "n_unparsed": 1}
    assert got["per_aspect"]["Ending"]["accuracy"] == 0.5
    assert got["macro_accuracy"] == pytest.approx((0.75 + 0.5) / 2)
    assert got["micro_accuracy"] == pytest.approx(4 / 6)
    assert got["n"] == 6 and got["n_unparsed"] == 1
    with pytest.raises(ValueError, match="lengths"):
        pairwise_accuracy(pred, gold, aspects[:-1])


# --- text similarity ------------------------------------------------------------------------------

REVIEW = "The plot twists kept me guessing until the very last scene, and the ending was perfect."


def test_bleu_identical_is_100_and_disjoint_is_0():
    assert corpus_bleu([REVIEW, REVIEW], [REVIEW, REVIEW]) == pytest.approx(100.0)
    assert sentence_bleu(REVIEW, REVIEW) == pytest.approx(100.0)
    assert corpus_bleu(["alpha beta gamma delta epsilon"], [REVIEW]) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        corpus_bleu([REVIEW], [])


def test_rouge_by_hand():
    # unigram overlap {the, cat}: P = 2/3, R = 2/4, F = 4/7; LCS "the cat" gives the same here.
    got = rouge(["the cat sat"], ["the cat ran away"])
    assert got["rouge1"] == pytest.approx(4 / 7)
    assert got["rougeL"] == pytest.approx(4 / 7)
    assert rouge([REVIEW], [REVIEW]) == {"rouge1": pytest.approx(1.0), "rougeL": pytest.approx(1.0)}
    # ROUGE-L needs order, ROUGE-1 does not
    swapped = rouge(["away ran cat the"], ["the cat ran away"])
    assert swapped["rouge1"] == pytest.approx(1.0) and swapped["rougeL"] < 0.5


def test_bertscore_identical_paraphrase_unrelated_and_empty():
    ref = "The film was boring and far too long."
    hyps = [ref, "The movie was dull and much too lengthy.", "Stock markets fell sharply on Tuesday.", ""]
    got = bertscore(hyps, [ref] * 4)
    assert got["f1"][0] == pytest.approx(1.0, abs=1e-5)
    assert got["precision"][0] == pytest.approx(1.0, abs=1e-5)
    assert got["f1"][1] > got["f1"][2] + 0.1
    assert got["f1"][3] == 0.0
    p, r = got["precision"][1], got["recall"][1]
    assert got["f1"][1] == pytest.approx(2 * p * r / (p + r))


def test_bertscore_precision_and_recall_are_directional_and_batching_is_invisible():
    short, long = "A great ending.", "A great ending, but the middle of the story drags for an hour."
    one = bertscore([short, long], [long, short], batch_size=1)
    many = bertscore([short, long], [long, short], batch_size=8)
    assert one["f1"] == pytest.approx(many["f1"], abs=1e-5)
    # every token of the short text has a close match in the long one, not the other way round
    assert one["precision"][0] > one["recall"][0]
    assert one["recall"][1] > one["precision"][1]
    weighted = bertscore([short, long], [long, short], idf=True)
    assert weighted["f1"] != pytest.approx(one["f1"], abs=1e-4)
    # identical pairs score 1 under idf weights too (idf over the references: a token in only one has weight > 0;
    # bert-score gives 0 to a text whose every token is in all references, e.g. any text with idf over one reference)
    other = "Stock markets fell sharply on Tuesday."
    assert bertscore([long, other], [long, other], idf=True)["f1"] == pytest.approx([1.0, 1.0], abs=1e-5)


def test_similarity_summary_without_neural_model():
    got = similarity_summary([REVIEW], [REVIEW], with_bertscore=False)
    assert got == {"bleu": pytest.approx(100.0), "rouge1": pytest.approx(1.0), "rougeL": pytest.approx(1.0), "n": 1}


# --- calibration ----------------------------------------------------------------------------------


def test_linear_calibration_maps_ends_midpoint_and_clips():
    cal = linear_calibration((1, 10), (1, 5))
    out = apply_calibration(cal, [1, 10, 5.5, 0, 12, None])
    assert out[:5] == pytest.approx([1.0, 5.0, 3.0, 1.0, 5.0])
    assert out[5] is None
    grid = apply_calibration(cal, list(np.linspace(1, 10, 50)))
    assert all(b > a for a, b in zip(grid, grid[1:], strict=False))


def test_linear_calibration_rounds_half_up():
    cal = linear_calibration((0, 10), (0, 5), round_to_int=True)
    assert apply_calibration(cal, [5, 7, 1, 10]) == [3.0, 4.0, 1.0, 5.0]
    with pytest.raises(ValueError, match="increasing"):
        linear_calibration((10, 1), (1, 5))


def test_quantile_calibration_recovers_a_planted_monotone_map():
    gold = [g for g in range(1, 6) for _ in range(20)]
    judge = [2 * g for g in gold]  # a judge on 2..10 that ranks perfectly
    cal = fit_quantile_calibration(judge, gold, round_to_int=True)
    assert apply_calibration(cal, [2, 4, 6, 8, 10]) == [1.0, 2.0, 3.0, 4.0, 5.0]
    # outside the calibration predictions the map is clamped to the gold range
    assert apply_calibration(cal, [0, 1, 11]) == [1.0, 1.0, 5.0]
    assert json.loads(json.dumps(cal.to_dict()))["method"] == "quantile"


def test_quantile_calibration_is_monotone_and_restores_the_gold_distribution():
    rng = np.random.default_rng(3)
    gold = rng.integers(1, 6, 400)
    judge = np.clip(gold + 5 + rng.integers(-1, 2, 400), 1, 10)  # never below 5: needs shifting
    cal = fit_quantile_calibration(judge[:200].tolist() + [None], gold[:200].tolist() + [3])
    grid = apply_calibration(cal, list(np.linspace(0, 11, 60)))
    assert all(b >= a for a, b in zip(grid, grid[1:], strict=False))
    held_out = np.array(apply_calibration(cal, judge[200:].tolist()))
    assert abs(held_out.mean() - gold[200:].mean()) < 0.3
    assert abs(judge[200:].mean() - gold[200:].mean()) > 4
    assert len(cal.gold_sorted) == 200  # the unparsed pair was skipped
    with pytest.raises(ValueError, match="no parsed"):
        fit_quantile_calibration([None], [3])
