"""Elo ratings from pairwise games, and the consistency / sensitivity of a comparison (AuPEL).

AuPEL (Appendix A.1) turns win / tie / loss outcomes into Elo ratings: every player starts at
1000, K = 4, ``E = 1 / (1 + 10 ** ((R_opp - R) / 400))`` and ``R += K (S - E)`` with S = 1 / 0.5 / 0.
Elo depends on the order the games are played in, so the order is bootstrapped (1,000 random
permutations) and the median rating with a 95% interval is reported.

The bootstrap is vectorised across permutations: one pass over the game positions updates the
ratings of every permutation at once (a step is a handful of numpy operations on arrays of
length ``n_boot``), which makes 1,000 bootstraps over 10,000 games a fraction of a second.
``elo_reference`` is the plain-Python sequential update the vectorised path is tested against.

Consistency and sensitivity (section 5.2) ask how many test cases a comparison of two systems
needs: draw two disjoint samples of N cases, 5,000 times; a sample is *conclusive* when a
two-sided binomial test of wins against losses (ties left out) gives p < 0.05. Sensitivity is the
share of samples that are conclusive; consistency the share of draws whose two samples are both
conclusive and name the same winner (two inconclusive samples are not counted as agreeing, so
that a metric which never decides anything is not "consistent").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import binom

START = 1000.0
K = 4.0
SCALE = 400.0

#: Outcome of a game for its first player.
WIN, TIE, LOSS = 1.0, 0.5, 0.0


def expected(rating: float, opponent: float) -> float:
    """Expected score of a player against an opponent."""
    return 1.0 / (1.0 + 10.0 ** ((opponent - rating) / SCALE))


def elo_reference(
    games: Sequence[tuple[int, int, float]], n_players: int, k: float = K, start: float = START
) -> list[float]:
    """Ratings after playing ``games`` (first player, second player, first player's score) in order."""
    ratings = [start] * n_players
    for a, b, s in games:
        e = expected(ratings[a], ratings[b])
        delta = k * (s - e)
        ratings[a] += delta
        ratings[b] -= delta
    return ratings


def elo_sequences(
    a: np.ndarray, b: np.ndarray, s: np.ndarray, n_players: int, k: float = K, start: float = START
) -> np.ndarray:
    """Ratings after each of many game sequences, all updated in one pass over the positions.

    ``a``, ``b``, ``s`` have shape (n_games, n_sequences): the players and the first player's score
    of game t in sequence i (position-major, so each step reads contiguous rows). Returns
    (n_sequences, n_players).
    """
    n_games, n_seq = a.shape
    ratings = np.full(n_seq * n_players, start)
    base = (np.arange(n_seq) * n_players).astype(a.dtype)
    fa, fb = a + base, b + base  # flat indices into ``ratings``
    ra, rb, delta = np.empty(n_seq), np.empty(n_seq), np.empty(n_seq)
    c = np.log(10.0) / SCALE  # 10 ** (x / 400) == exp(c * x)
    for t in range(n_games):
        ia, ib = fa[t], fb[t]
        np.take(ratings, ia, out=ra)
        np.take(ratings, ib, out=rb)
        np.subtract(rb, ra, out=delta)
        delta *= c
        np.exp(delta, out=delta)
        delta += 1.0
        np.reciprocal(delta, out=delta)  # E, the first player's expected score
        np.subtract(s[t], delta, out=delta)
        delta *= k
        ratings[ia] = ra + delta
        ratings[ib] = rb - delta
    return ratings.reshape(n_seq, n_players)


def bootstrap_elo(
    a: Sequence[int],
    b: Sequence[int],
    s: Sequence[float],
    n_players: int,
    n_boot: int = 1000,
    seed: int = 0,
    k: float = K,
    start: float = START,
) -> dict:
    """Median and 95% interval of each player's rating over ``n_boot`` random orders of the games.

    Returns ``{"median", "low", "high"}`` arrays of length ``n_players`` and the raw ``ratings``
    (n_boot, n_players). Every game needs two distinct players.
    """
    a, b, s = np.asarray(a, dtype=np.int32), np.asarray(b, dtype=np.int32), np.asarray(s, dtype=float)
    if not len(a) == len(b) == len(s):
        raise ValueError(f"games have {len(a)} first players, {len(b)} second players and {len(s)} scores")
    if len(a) and (np.any(a == b) or min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= n_players):
        raise ValueError(f"every game needs two distinct players in 0..{n_players - 1}")
    rng = np.random.default_rng(seed)
    # Column i is the i-th random order of the games (a Fisher-Yates shuffle per column).
    order = rng.permuted(np.broadcast_to(np.arange(len(a), dtype=np.int32)[:, None], (len(a), n_boot)), axis=0)
    ratings = elo_sequences(a[order], b[order], s[order], n_players, k=k, start=start)
    low, median, high = np.percentile(ratings, [2.5, 50, 97.5], axis=0)
    return {"median": median, "low": low, "high": high, "ratings": ratings}


def binomial_p(wins: np.ndarray, losses: np.ndarray) -> np.ndarray:
    """Two-sided exact binomial test of wins against losses under p = 0.5, elementwise.

    Under p = 0.5 the distribution is symmetric, so scipy's two-sided ``binomtest`` p-value is twice
    the smaller tail, capped at 1 (``tests/test_elo.py`` checks the two agree); this form evaluates
    a whole array of samples at once. No decided game (wins = losses = 0) gives p = 1.
    """
    wins, losses = np.asarray(wins), np.asarray(losses)
    n = wins + losses
    low = np.minimum(wins, losses)
    return np.minimum(1.0, 2.0 * binom.cdf(low, n, 0.5))


def consistency_sensitivity(
    outcomes: Sequence[float], sizes: Sequence[int], draws: int = 5000, alpha: float = 0.05, seed: int = 0
) -> dict:
    """Consistency and sensitivity of one comparison at each sample size N.

    ``outcomes`` holds one score per test case for the first system (1 win, 0.5 tie, 0 loss).
    Sizes with 2N above the number of cases cannot be drawn disjointly and are left out.
    """
    outcomes = np.asarray(outcomes, dtype=float)
    win, loss = outcomes == WIN, outcomes == LOSS
    rng = np.random.default_rng(seed)
    result: dict = {"n": [], "consistency": [], "sensitivity": []}
    for size in sizes:
        if size < 1 or 2 * size > len(outcomes):
            continue
        order = np.argsort(rng.random((draws, len(outcomes))), axis=1)[:, : 2 * size]
        first, second = order[:, :size], order[:, size:]
        verdicts = []
        for sample in (first, second):
            w, lo = win[sample].sum(axis=1), loss[sample].sum(axis=1)
            conclusive = binomial_p(w, lo) < alpha
            verdicts.append(np.where(conclusive, np.sign(w - lo), 0))
        agree = (verdicts[0] != 0) & (verdicts[0] == verdicts[1])
        result["n"].append(int(size))
        result["consistency"].append(float(agree.mean()))
        result["sensitivity"].append(float((verdicts[0] != 0).mean()))
    return result
