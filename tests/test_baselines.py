"""Non-LLM PerSE baselines on synthetic reviewers with planted preferences."""

from __future__ import annotations

import numpy as np
import pytest

from persetrain.evaluators.baselines import (
    MATRIX_FACTORIZATION,
    REVIEWER_AVG,
    MFConfig,
    fit_biased_mf,
    matrix_factorization,
    reviewer_average,
    reviewer_majority,
    training_triples,
)
from persetrain.schema import PairwiseExample, PairwiseProfileItem, ProfileReview, ScalarExample


def scalar(ex_id: str, reviewer: str, profile: list[tuple[str, int]], query: str, score: int):
    return ScalarExample(
        id=ex_id,
        reviewer_id=reviewer,
        query_plot_id=query,
        query_plot=f"plot {query}",
        score=score,
        profile=[ProfileReview(plot_id=p, plot=f"plot {p}", review="", score=s) for p, s in profile],
    )


def rmse(pred, gold) -> float:
    return float(np.sqrt(np.mean((np.asarray(pred, float) - np.asarray(gold, float)) ** 2)))


def test_reviewer_average_is_the_profile_mean():
    [j] = reviewer_average([scalar("e1", "r1", [("a", 7), ("b", 8), ("c", 6)], "d", 9)])
    assert j.score == 7.0 and j.example_id == "e1" and j.evaluator == REVIEWER_AVG
    assert j.explanation == "mean of 3 profile scores (7, 8, 6)"


def test_reviewer_majority_prefers_same_aspect_and_breaks_ties_by_recency():
    def item(aspect, pref):
        return PairwiseProfileItem(premise="p", plot_a="x", plot_b="y", aspect=aspect, preferred=pref)

    def example(ex_id, aspect, profile):
        return PairwiseExample(
            id=ex_id,
            annotator_id="a1",
            aspect=aspect,
            profile=profile,
            premise="p",
            plot_a="x",
            plot_b="y",
            preferred="A",
        )

    judged = reviewer_majority(
        [
            example("k1", "Ending", [item("Ending", "B")]),
            example("same", "Ending", [item("Surprise", "A"), item("Surprise", "A"), item("Ending", "B")]),
            example("tie", "Surprise", [item("Surprise", "B"), item("Surprise", "A")]),
            example("other", "Ending", [item("Surprise", "A"), item("Surprise", "B"), item("Surprise", "A")]),
        ]
    )
    assert [j.choice for j in judged] == ["B", "B", "A", "A"]
    assert judged[1].explanation == "preferred B in 1 of 1 profile annotations on Ending"
    assert judged[3].explanation == "preferred A in 2 of 3 profile annotations"


def planted_ratings(n_users: int, n_items: int, rank: int, seed: int, density: float = 0.6, user_std: float = 1.0):
    """Ratings mu + b_u + b_i + (interaction of the given rank) + small noise, on a random mask."""
    rng = np.random.default_rng(seed)
    b_u, b_i = rng.normal(0, user_std, n_users), rng.normal(0, 1.0, n_items)
    inter = rng.normal(0, 1.0, (n_users, rank)) @ rng.normal(0, 1.0, (rank, n_items))
    full = 5.0 + b_u[:, None] + b_i[None, :] + inter + rng.normal(0, 0.2, (n_users, n_items))
    observed = rng.random((n_users, n_items)) < density
    return full, observed, b_u, b_i


def observed_triples(full: np.ndarray, observed: np.ndarray) -> list[tuple[str, str, float]]:
    return [(f"u{u}", f"i{i}", full[u, i]) for u, i in zip(*np.nonzero(observed), strict=True)]


def held_out_rmse(model, full: np.ndarray, observed: np.ndarray) -> tuple[float, float]:
    """RMSE of the model and of the global mean on the unobserved cells."""
    held = list(zip(*np.nonzero(~observed), strict=True))
    pred = []
    for u, i in held:
        uk, ik = model.user_index[f"u{u}"], model.item_index[f"i{i}"]
        pred.append(
            model.mean + model.user_bias[uk] + model.item_bias[ik] + model.user_factors[uk] @ model.item_factors[ik]
        )
    gold = [full[u, i] for u, i in held]
    return rmse(pred, gold), rmse([model.mean] * len(gold), gold)


def test_biased_mf_recovers_planted_biases_and_beats_the_global_mean():
    full, observed, b_u, b_i = planted_ratings(40, 30, rank=0, seed=0)
    model = fit_biased_mf(observed_triples(full, observed), MFConfig(n_factors=2, reg=0.01))
    fit_u = [model.user_bias[model.user_index[f"u{u}"]] for u in range(40)]
    fit_i = [model.item_bias[model.item_index[f"i{i}"]] for i in range(30)]
    assert np.corrcoef(fit_u, b_u)[0, 1] > 0.98 and np.corrcoef(fit_i, b_i)[0, 1] > 0.98
    mf_rmse, mean_rmse = held_out_rmse(model, full, observed)
    assert mf_rmse < 0.5 * mean_rmse


def test_latent_factors_capture_a_planted_interaction():
    full, observed, _, _ = planted_ratings(60, 40, rank=2, seed=1, density=0.7)
    triples = observed_triples(full, observed)
    with_factors = fit_biased_mf(triples, MFConfig(n_factors=2, reg=0.02, n_iters=30))
    biases_only = fit_biased_mf(triples, MFConfig(n_factors=0, reg=0.02, n_iters=30))
    factors_rmse, _ = held_out_rmse(with_factors, full, observed)
    biases_rmse, mean_rmse = held_out_rmse(biases_only, full, observed)
    assert factors_rmse < 0.6 * biases_rmse < 0.6 * mean_rmse


def synthetic_split(seed: int = 2):
    """Train and test reviewers (disjoint) with integer 1..10 scores and K = 3 profiles."""
    full, _, _, _ = planted_ratings(120, 40, rank=0, seed=seed, user_std=1.5)
    scores = np.clip(np.rint(full), 1, 10).astype(int)
    rng = np.random.default_rng(seed)

    def examples(users):
        out = []
        for u in users:
            items = rng.choice(40, size=8, replace=False)
            for q in range(len(items)):
                profile = [(f"i{i}", int(scores[u, i])) for i in np.delete(items, q)[:3]]
                out.append(scalar(f"u{u}-{q}", f"u{u}", profile, f"i{items[q]}", int(scores[u, items[q]])))
        return out

    return examples(range(80)), examples(range(80, 120))


def test_matrix_factorization_beats_reviewer_average_and_global_mean_on_new_reviewers():
    train, test = synthetic_split()
    mf = matrix_factorization(train, test)
    avg = reviewer_average(test)
    gold = [ex.score for ex in test]
    global_mean = np.mean([s for _, _, s in training_triples(train)])
    assert all(j.evaluator == MATRIX_FACTORIZATION for j in mf)
    assert [j.example_id for j in mf] == [ex.id for ex in test]
    assert all(1 <= j.score <= 10 for j in mf)
    mf_rmse = rmse([j.score for j in mf], gold)
    assert mf_rmse < rmse([j.score for j in avg], gold) < rmse([global_mean] * len(gold), gold)
    assert "from 3 profile reviews" in mf[0].explanation


def test_matrix_factorization_never_sees_another_examples_copy_of_the_gold_score():
    train, _ = synthetic_split()
    target = scalar("t1", "new", [("i1", 5), ("i2", 5), ("i3", 5)], "i4", 5)
    # the same reviewer's other example holds the query plot i4 in its profile with an extreme score
    leaky = scalar("t2", "new", [("i4", 10), ("i1", 5), ("i2", 5)], "i3", 5)
    alone = matrix_factorization(train, [target])[0].score
    together = matrix_factorization(train, [target, leaky])[0].score
    assert together == alone


def test_matrix_factorization_is_seeded_and_falls_back_to_biases_for_unseen_plots():
    train, test = synthetic_split()
    config = MFConfig(seed=5)
    first = [j.score for j in matrix_factorization(train, test[:10], config)]
    assert [j.score for j in matrix_factorization(train, test[:10], config)] == first
    unseen = scalar("u", "new", [("i1", 9), ("i2", 9), ("i3", 9)], "never-seen", 9)
    [j] = matrix_factorization(train, [unseen], config)
    assert "query plot unseen in training" in j.explanation
    model = fit_biased_mf(training_triples(train), config)
    assert j.score > model.mean  # a generous reviewer keeps their positive bias


def test_training_triples_count_each_review_once():
    train = [
        scalar("e1", "r", [("a", 7), ("b", 8)], "c", 6),
        scalar("e2", "r", [("c", 6), ("a", 7)], "b", 8),
    ]
    assert sorted(training_triples(train)) == [("r", "a", 7.0), ("r", "b", 8.0), ("r", "c", 6.0)]
    with pytest.raises(ValueError, match="at least one"):
        fit_biased_mf([])
