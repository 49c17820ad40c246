"""Elo ratings, their vectorised bootstrap, and consistency / sensitivity (persetrain.metrics.elo)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binomtest

from persetrain.metrics.elo import (
    binomial_p,
    bootstrap_elo,
    consistency_sensitivity,
    elo_reference,
    elo_sequences,
    expected,
)


def test_expected_score_by_hand():
    assert expected(1000, 1000) == 0.5
    assert expected(1400, 1000) == pytest.approx(10 / 11)  # 1 / (1 + 10^(-1))
    assert expected(1000, 1400) == pytest.approx(1 / 11)


def test_elo_updates_by_hand():
    # Game 1: equal ratings, player 0 wins: E = 0.5, each moves K * 0.5 = 2.
    assert elo_reference([(0, 1, 1.0)], 2) == [1002.0, 998.0]
    # Game 2: player 1 (998) beats player 0 (1002): E = 1 / (1 + 10^(4/400)), gain 4 * (1 - E).
    gain = 4 * (1 - 1 / (1 + 10 ** (4 / 400)))
    ratings = elo_reference([(0, 1, 1.0), (1, 0, 1.0)], 2)
    assert ratings == pytest.approx([1002 - gain, 998 + gain])
    assert gain == pytest.approx(2.0230, abs=1e-4)
    # A draw between equals changes nothing; ratings always sum to the start total.
    assert elo_reference([(0, 1, 0.5)], 2) == [1000.0, 1000.0]
    assert sum(elo_reference([(0, 2, 1.0), (1, 2, 0.0), (0, 1, 0.5)], 3)) == pytest.approx(3000)


def test_vectorised_sequences_equal_the_plain_loop():
    rng = np.random.default_rng(1)
    players, n_games, n_seq = 4, 300, 25
    a = rng.integers(0, players, (n_games, n_seq))
    b = (a + rng.integers(1, players, (n_games, n_seq))) % players
    s = rng.choice([0.0, 0.5, 1.0], (n_games, n_seq))
    fast = elo_sequences(a, b, s, players)
    for i in range(n_seq):
        slow = elo_reference(list(zip(a[:, i], b[:, i], s[:, i], strict=True)), players)
        np.testing.assert_allclose(fast[i], slow, rtol=0, atol=1e-9)


def test_bootstrap_rows_are_elo_of_permuted_orders():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 3, 60)
    b = (a + rng.integers(1, 3, 60)) % 3
    s = rng.choice([0.0, 0.5, 1.0], 60)
    boot = bootstrap_elo(a, b, s, 3, n_boot=50, seed=7)
    # Each bootstrap row is the plain loop over some permutation of the same games: the same
    # multiset of games gives ratings summing to 3000, and a row equals the loop on its own order.
    order = np.random.default_rng(7).permuted(np.broadcast_to(np.arange(60, dtype=np.int32)[:, None], (60, 50)), axis=0)
    for i in (0, 17, 49):
        games = list(zip(a[order[:, i]], b[order[:, i]], s[order[:, i]], strict=True))
        np.testing.assert_allclose(boot["ratings"][i], elo_reference(games, 3), atol=1e-9)
    assert np.all(boot["low"] <= boot["median"]) and np.all(boot["median"] <= boot["high"])


def test_bootstrap_ranks_a_dominant_player_first_and_refuses_bad_games():
    games = [(0, 1, 1.0), (0, 2, 1.0), (1, 2, 0.5)] * 30
    a, b, s = zip(*games, strict=True)
    boot = bootstrap_elo(a, b, s, 3, n_boot=200)
    assert boot["median"][0] > boot["high"][1] and boot["median"][0] > boot["high"][2]
    with pytest.raises(ValueError, match="two distinct players"):
        bootstrap_elo([0], [0], [1.0], 2)
    with pytest.raises(ValueError, match="two distinct players"):
        bootstrap_elo([0], [3], [1.0], 2)


def test_binomial_p_matches_scipy():
    for wins in range(0, 13):
        for losses in range(0, 13):
            expected_p = 1.0 if wins + losses == 0 else binomtest(wins, wins + losses, 0.5).pvalue
            assert binomial_p(np.array([wins]), np.array([losses]))[0] == pytest.approx(expected_p, rel=1e-9)


def test_consistency_and_sensitivity_on_known_cases():
    sizes = [3, 5, 6, 10]
    # All wins: a sample of N is conclusive once 2 * 0.5^N < 0.05, i.e. from N = 6 on, and then always agrees.
    always = consistency_sensitivity([1.0] * 40, sizes, draws=200)
    assert always["n"] == sizes
    assert always["sensitivity"] == [0.0, 0.0, 1.0, 1.0] and always["consistency"] == [0.0, 0.0, 1.0, 1.0]
    # Only ties: nothing is ever decided, and two undecided samples do not count as agreeing.
    ties = consistency_sensitivity([0.5] * 40, sizes, draws=200)
    assert ties["sensitivity"] == [0.0] * 4 and ties["consistency"] == [0.0] * 4
    # Sizes that cannot give two disjoint samples are left out.
    assert consistency_sensitivity([1.0] * 10, [4, 5, 6], draws=10)["n"] == [4, 5]
    # A coin-flip comparison is rarely conclusive and rarely consistent; a 90% win rate mostly is at N = 30.
    rng = np.random.default_rng(0)
    coin = consistency_sensitivity(rng.choice([0.0, 1.0], 200), [30], draws=2000)
    strong = consistency_sensitivity(np.where(rng.random(200) < 0.9, 1.0, 0.0), [30], draws=2000)
    assert coin["sensitivity"][0] < 0.15 and strong["sensitivity"][0] > 0.95
    assert strong["consistency"][0] > 0.9 and math.isclose(sum(coin["n"]), 30)
