"""The KV states of the prefixes (heads) that scoring continues, reusing and filling the prefix cache."""

from __future__ import annotations

from dataclasses import dataclass

from persetrain.engine.choices import common_prefix
from persetrain.engine.hf.kv import cat_states, row_states
from persetrain.engine.hf.pack import Forward, Pack
from persetrain.engine.hf.plan import BatchLimits, Shape
from persetrain.engine.prefix_cache import LayerStates, PrefixCache


@dataclass(frozen=True)
class Found:
    """What the prefix cache holds of a head: its first ``reused`` tokens' states (None when it holds none)."""

    reused: int
    states: LayerStates | None


def prefix_states(
    fwd: Forward, heads: list[list[int]], cache: PrefixCache, limits: BatchLimits, min_shared: int
) -> list[LayerStates]:
    """KV states of every head, each from its longest cached prefix on, many heads to a forward pass.

    Heads that share a long prefix with each other but not with the cache run in waves: PREF's four
    orders of one question's candidates share the question and the preference; the first order
    computes that part and caches it, and the other three continue it in the next wave instead of
    computing it three more times. A mostly new head is cached for a later call on the same head,
    but not at the expense of entries that no call has used yet (see prefix_cache.py).

    Why batched: PREF's stage 3 has 16 heads of ~230 tokens for 4 questions, and one at a time
    they ran at 2.6 ms a token on this CPU against 2.0 ms four to a batch.
    """
    states: list[LayerStates | None] = [None] * len(heads)
    todo = sorted(range(len(heads)), key=lambda i: heads[i])
    while todo:
        wave, later = [], []
        for n, i in enumerate(todo):
            # sorted: the head before this one is the pending head it shares the most with
            ahead = common_prefix(heads[todo[n - 1]], heads[i]) if n and cache.max_bytes > 0 else 0
            waits = ahead - cache.match_length(heads[i]) >= min_shared
            (later if waits else wave).append(i)
        found = {i: Found(*cache.longest(heads[i])) for i in wave}
        new = {i: len(heads[i]) - found[i].reused for i in wave}
        batches: list[list[int]] = []
        for i in sorted(wave, key=new.__getitem__):
            if not batches or not limits.fits([Shape(new[k], found[k].reused) for k in [*batches[-1], i]]):
                batches.append([])
            batches[-1].append(i)
        for batch in batches:
            computed = _continue_heads(fwd, [heads[i] for i in batch], [found[i] for i in batch], cache)
            for i, head_kv in zip(batch, computed, strict=True):
                states[i] = head_kv
        todo = later
    return states  # type: ignore[return-value]


def _continue_heads(fwd: Forward, heads: list[list[int]], found: list[Found], cache: PrefixCache) -> list[LayerStates]:
    """The states of ``heads``, each continued from its cached part in one batch; each mostly new head is cached."""
    new = {k: row for row, k in enumerate(k for k, head in enumerate(heads) if found[k].reused < len(head))}
    if new:
        out = fwd.packed([Pack([heads[k][found[k].reused :]], found[k].states, found[k].reused) for k in new])
    states = []
    for k, (head, cached) in enumerate(zip(heads, found, strict=True)):
        if k not in new:
            states.append(cached.states)
            continue
        # its cached part, then its new tokens after the padding
        row, end = new[k], out.past + len(head) - cached.reused
        head_kv = cat_states(row_states(out.cache, row, 0, cached.reused), row_states(out.cache, row, out.past, end))
        if cached.reused < len(head) // 2:
            cache.put(head, head_kv, evict_unused=False)
        states.append(head_kv)
    return states
