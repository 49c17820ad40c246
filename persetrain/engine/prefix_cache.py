"""Automatic prefix caching: the KV states of recent token sequences, reused by later calls.

An evaluator that generates a text and then scores it (PerSE's expected score after its own
review) sends the same long prompt twice, and a judge asked several closed questions about one
text sends one head many times. Keeping the KV states of recently computed sequences, as vLLM's
automatic prefix caching and SGLang's radix cache do, lets the later call compute only the tokens
the earlier one did not. Entries are whole sequences; a lookup returns the states of the longest
token prefix shared with any entry (the state at position p depends on tokens 0..p only, so a
shared prefix of a longer entry is as good as an entry of its own). Entries are evicted least
recently used under a byte budget, with one exception that keeps a scan from thrashing: a caller
may put an entry only at the expense of entries that have already served a lookup
(``evict_unused=False``). Why: an evaluator generates N texts and then scores them in the same
order; when N entries do not fit, plain LRU makes every score call miss (each miss's own entry
evicts the one the next call needs), while keeping the unused entries makes the last that fit hit.

States computed in a differently shaped batch differ from a fresh forward pass by float rounding
(~1e-6 in probabilities), so results with and without the cache agree to that, not bit for bit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

#: Per layer: (keys, values), each shaped [1, kv_heads, tokens, head_dim].
LayerStates = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class _Entry:
    tokens: torch.Tensor  # 1-D int64
    states: LayerStates
    nbytes: int
    used: bool = False  # has served a lookup


class PrefixCache:
    """An LRU store of per-sequence KV states, looked up by longest common token prefix."""

    def __init__(self, max_bytes: int, min_tokens: int = 32):
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens  # shorter matches are not worth the copy
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self.bytes = 0
        self.hits = 0
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, tokens: list[int], states: LayerStates, evict_unused: bool = True) -> None:
        """Keep ``states`` (cloned, so the caller's batch tensors can be freed) for ``tokens``.

        With ``evict_unused=False`` room is made only by evicting entries that have served a lookup;
        when that is not enough, nothing is stored.
        """
        if self.max_bytes <= 0 or len(tokens) < self.min_tokens:
            return
        if any(k.shape[-2] != len(tokens) for k, _ in states):
            raise ValueError(f"states cover {states[0][0].shape[-2]} positions, the sequence has {len(tokens)}")
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in states)
        if nbytes > self.max_bytes:
            return
        if not evict_unused:
            evictable = sum(e.nbytes for e in self._entries.values() if e.used)
            if self.bytes - evictable + nbytes > self.max_bytes:
                return
        key_tokens = torch.tensor(tokens, dtype=torch.long)
        for key, entry in list(self._entries.items()):  # an entry that is a prefix of this one is redundant
            if len(entry.tokens) <= len(key_tokens) and _shared(entry.tokens, key_tokens) == len(entry.tokens):
                self._drop(key)
        while self.bytes + nbytes > self.max_bytes:  # least recently used first
            self._drop(next(k for k, e in self._entries.items() if evict_unused or e.used))
        states = [(k.detach().clone(), v.detach().clone()) for k, v in states]
        self._entries[self._next_key] = _Entry(key_tokens, states, nbytes)
        self._next_key += 1
        self.bytes += nbytes

    def longest(self, tokens: list[int], limit: int | None = None) -> tuple[int, LayerStates | None]:
        """(n, states of the first n tokens) for the longest cached prefix of ``tokens``, n <= limit."""
        best_key, best = self._best(tokens if limit is None else tokens[:limit])
        if best_key is None:
            return 0, None
        self._entries.move_to_end(best_key)
        self._entries[best_key].used = True
        self.hits += 1
        self.reused_tokens += best
        return best, [(k[:, :, :best], v[:, :, :best]) for k, v in self._entries[best_key].states]

    def match_length(self, tokens: list[int]) -> int:
        """How many leading tokens of ``tokens`` a lookup would reuse (0 below ``min_tokens``); unlike
        :meth:`longest` it changes nothing, so a planner can ask before it decides."""
        return self._best(tokens)[1]

    def _best(self, tokens: list[int]) -> tuple[int | None, int]:
        """(key, shared length) of the entry sharing the longest prefix with ``tokens``; (None, 0) when
        none shares ``min_tokens``."""
        query = torch.tensor(tokens, dtype=torch.long)
        best_key, best = None, 0
        for key, entry in self._entries.items():
            shared = _shared(entry.tokens, query)
            if shared > best:
                best_key, best = key, shared
        return (best_key, best) if best >= self.min_tokens else (None, 0)

    def clear(self) -> None:
        self._entries.clear()
        self.bytes = 0

    def _drop(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).nbytes


def _shared(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(len(a), len(b))
    differ = (a[:n] != b[:n]).nonzero()
    return n if len(differ) == 0 else int(differ[0])
