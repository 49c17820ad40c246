"""Scoring closed choices: the rows a call needs, their log-probs group by group, and the choice probabilities."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from persetrain.engine.choices import choice_logprobs, normalized
from persetrain.engine.hf.heads import prefix_states
from persetrain.engine.hf.pack import Forward, Pack
from persetrain.engine.hf.plan import BatchLimits, PrefixGroup, Row
from persetrain.engine.prefix_cache import PrefixCache
from persetrain.engine.types import ChoiceProbs, Cost


@dataclass(frozen=True)
class ChoiceRows:
    """The rows that score a call's choices, and per request what reading their log-probs back needs."""

    rows: list[Row]
    choice_tokens: list[list[list[int]]]  # per request, per choice: its tokens after the context
    paths: list[list[list[int]]]  # per request: the paths after the context that have a row (read_paths)
    contexts: list[list[int]]  # per request: the context the paths continue


@dataclass(frozen=True)
class RowPack:
    """A pack waiting for its batch, and the rows (indices) whose tails it holds, in order."""

    members: list[int]
    pack: Pack


@dataclass(frozen=True)
class Scorer:
    """Log-probs of scoring rows, each group continuing its prefix's states (``heads.py``)."""

    fwd: Forward
    limits: BatchLimits
    prefix_cache: PrefixCache
    min_shared_prefix: int

    @torch.inference_mode()
    def score(self, rows: list[Row], groups: list[PrefixGroup]) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield (row index, log-probs at its needed positions) for every row, group by group.

        The prefix states of several groups are computed together (``prefix_states``); each group's
        tails are then cut into packs that continue its prefix states (see ``Forward.packed``), and packs of
        several groups run as one batch, because a forward pass over a few hundred tokens costs mostly
        the reading of the weights (on this CPU a 105-token row takes 2.3 ms a token alone, 1.6 ms in a
        batch of 16). The prefix states of the packs waiting for their batch are held until it runs.
        """
        waiting: list[RowPack] = []
        shared: list[PrefixGroup] = []
        for group in groups:
            members = sorted(group.members, key=lambda k: len(rows[k].tokens))
            if group.prefix_len:
                shared.append(PrefixGroup(group.prefix_len, members))
                continue
            for batch in self.limits.batches(members, lambda k: len(rows[k].tokens), self.limits.max_tokens):
                yield from self._read(rows, batch, [0] * len(batch), self.fwd.padded([rows[k].tokens for k in batch]))
        for chunk in self.limits.held(shared):
            heads = prefix_states(
                self.fwd,
                [rows[group.members[0]].tokens[: group.prefix_len] for group in chunk],
                self.prefix_cache,
                self.limits,
                self.min_shared_prefix,
            )
            for group, prefix_kv in zip(chunk, heads, strict=True):
                # A pack attends over all of its tails, masked out but computed: its tails hold no more
                # tokens than the prefix whose copies they save (see Forward.packed).
                prefix_len = group.prefix_len
                budget = min(prefix_len, self.limits.max_tokens)
                for members in self.limits.batches(
                    group.members, lambda k, p=prefix_len: len(rows[k].tokens) - p, budget
                ):
                    entry = RowPack(
                        members, Pack([rows[k].tokens[prefix_len:] for k in members], prefix_kv, prefix_len)
                    )
                    if waiting and not self.limits.fits([e.pack.shape for e in [*waiting, entry]]):
                        yield from self._run_packs(rows, waiting)
                        waiting = []
                    waiting.append(entry)
        if waiting:
            yield from self._run_packs(rows, waiting)

    def _run_packs(self, rows: list[Row], packs: list[RowPack]) -> Iterator[tuple[int, torch.Tensor]]:
        out = self.fwd.packed([p.pack for p in packs])
        members = [k for p in packs for k in p.members]
        starts = [p.pack.prefix_len for p in packs for _ in p.members]
        yield from self._read(rows, members, starts, [h for per_pack in out.hidden for h in per_pack])

    def _read(
        self, rows: list[Row], members: list[int], starts: list[int], hidden: list[torch.Tensor]
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """(row index, log-probs at its needed positions) from the hidden states of each row's tail.

        One LM-head call for all rows: at a few positions per row the head's cost is reading its
        weights (49152 x 576 for the embedded model, ~28 ms a call here), not the arithmetic.
        """
        needed = [
            states[rows[k].first_needed - start : len(rows[k].tokens) - start]
            for k, start, states in zip(members, starts, hidden, strict=True)
        ]
        logprobs = self.fwd.logprobs(torch.cat(needed)).split([len(n) for n in needed])
        yield from zip(members, logprobs, strict=True)


def read_paths(choice_tokens: list[list[int]]) -> list[list[int]]:
    """The fewest token paths after the context whose rows give every distribution the choices need.

    A choice t needs the next-token distribution after each of its proper prefixes, and after t itself
    when a longer choice extends it. A row of context + path gives the distributions after every prefix
    of path, so only the maximal needed paths get rows: [] alone for single-token choices, ["1"] for
    "0".."10" (one row instead of one per choice: PREF's stage 3 scores 11 choices per candidate).
    """
    needed = {tuple(t[:p]) for t in choice_tokens for p in range(len(t))}
    needed |= {tuple(t) for t in choice_tokens if any(len(o) > len(t) and o[: len(t)] == t for o in choice_tokens)}
    return [list(p) for p in sorted(needed) if not any(len(q) > len(p) and q[: len(p)] == p for q in needed)]


def choice_result(
    per_row: list[torch.Tensor], paths: list[list[int]], choice_tokens: list[list[int]], choices, prompt_tokens: int
) -> ChoiceProbs:
    """Choice probabilities from the rows' log-probs (row r, index j: after context + paths[r][:j])."""

    def logprob(prefix: list[int], token: int) -> float:
        return next(
            lp[len(prefix), token].item()
            for path, lp in zip(paths, per_row, strict=True)
            if path[: len(prefix)] == prefix
        )

    return normalized(
        choice_logprobs(choice_tokens, logprob, choices),
        Cost(calls=1, prompt_tokens=prompt_tokens + sum(len(p) for p in paths), completion_tokens=0),
    )
