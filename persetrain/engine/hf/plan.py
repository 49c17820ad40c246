"""Planning the forward passes: which rows share a prefix, and which rows make one batch.

Everything here is arithmetic on token counts, decided before any forward pass runs. The padding rule
(:func:`within_padding`) is the one the engine's scoring batches and GRPO's log-prob chunks both obey.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from persetrain.engine.choices import common_prefix

#: The most padding a batch may compute, as a share of its real tokens (see within_padding).
PADDING = 0.1


def within_padding(widths: Sequence[int], padding: float = PADDING) -> bool:
    """Whether rows of ``widths`` tokens, padded to the longest, compute at most ``padding`` of their real
    tokens as padding.

    Why the bound: PREF's stage 3 continues 16 prefixes of four lengths, four of each; as one batch a sixth
    of its computed tokens were padding, and on a CPU four rows to a batch already run as fast per token as
    sixteen. In GRPO, one rollout that runs to a 192-token limit next to three of 45 tokens would more than
    double the completion tokens computed.
    """
    return len(widths) * max(widths) <= (1 + padding) * sum(widths)


def length_chunks(rows: list[int], lengths: list[int], most: int, padding: float = PADDING) -> list[list[int]]:
    """``rows`` by completion length, in chunks of at most ``most`` whose padding to their longest stays
    within ``padding`` of their tokens (a chunk always takes one row)."""
    chunks: list[list[int]] = []
    for row in sorted(rows, key=lambda r: lengths[r]):
        chunk = chunks[-1] if chunks else []
        # rows come shortest first, so ``row`` is the chunk's longest
        if chunk and len(chunk) < most and within_padding([lengths[r] for r in [*chunk, row]], padding):
            chunk.append(row)
        else:
            chunks.append([row])
    return chunks


@dataclass(frozen=True)
class Row:
    """One sequence to score: ``tokens``, and the positions whose next-token logits are needed."""

    tokens: list[int]
    first_needed: int  # logits are read at positions first_needed .. len(tokens) - 1
    request: int


@dataclass(frozen=True)
class PrefixGroup:
    """Rows (indices into the call's rows) scored from their first ``prefix_len`` tokens' states, computed
    once; a prefix length of 0 means the rows run whole."""

    prefix_len: int
    members: list[int]


@dataclass(frozen=True)
class Shape:
    """A row of a batch that continues a prefix: the tokens it computes and the prefix length it attends over."""

    tokens: int
    prefix_len: int


@dataclass(frozen=True)
class BatchLimits:
    """The backend's batch limits: at most ``max_tokens`` computed tokens and ``max_rows`` rows a batch."""

    max_tokens: int
    max_rows: int

    def admits(self, rows: int, width: int, max_tokens: int) -> bool:
        """Whether a row of ``width`` tokens joins a batch of ``rows`` rows that are no wider: rows x width within
        ``max_tokens`` and at most ``max_rows`` rows (a batch always takes one row)."""
        return rows == 0 or (rows < self.max_rows and (rows + 1) * width <= max_tokens)

    def batches(self, members: list[int], length: Callable[[int], int], max_tokens: int) -> list[list[int]]:
        """``members`` (sorted by ``length``) cut into consecutive batches that :meth:`admits` each row of."""
        batches: list[list[int]] = []
        current: list[int] = []
        for k in members:  # members are sorted by length, so the last one sets the padded width
            if not self.admits(len(current), length(k), max_tokens):
                batches.append(current)
                current = []
            current.append(k)
        if current:
            batches.append(current)
        return batches

    def fits(self, shapes: Sequence[Shape]) -> bool:
        """Whether rows of these shapes make one batch: rows, padded tokens, and padded attended positions (the KV
        states held) within the limits, and at most ``PADDING`` of the computed tokens padding
        (:func:`within_padding`)."""
        widths = [shape.tokens for shape in shapes]
        width, past = max(widths), max(shape.prefix_len for shape in shapes)
        return (
            len(shapes) <= self.max_rows
            and len(shapes) * width <= self.max_tokens
            and len(shapes) * (past + width) <= 2 * self.max_tokens
            and within_padding(widths)
        )

    def held(self, groups: list[PrefixGroup]) -> list[list[PrefixGroup]]:
        """The groups cut into chunks whose prefix states are computed and held together: at most
        ``max_tokens`` head tokens a chunk, and at least one group."""
        chunks: list[list[PrefixGroup]] = []
        held = 0
        for group in groups:
            if not chunks or held + group.prefix_len > self.max_tokens:
                chunks.append([])
                held = 0
            chunks[-1].append(group)
            held += group.prefix_len
        return chunks


def prefix_groups(
    rows: list[Row], min_shared: int, cached_length: Callable[[list[int]], int], sharing: bool = True
) -> list[PrefixGroup]:
    """Group row indices that share a token prefix (``sharing`` False: one group of prefix length 0).

    Rows are sorted so that sequences with a common head are adjacent; a group takes the next
    row while they share at least ``min_shared`` tokens, the tokens the row saves are no
    fewer than those the shorter shared head makes the group's members recompute, and they share
    no less than either row finds in the prefix cache (``cached_length``: how many leading tokens of a
    sequence the cache holds). A prefix stops before the first position whose logits any member needs,
    so every member has a tail.

    Why the prefix-cache condition: two PerSE prompts of one reviewer can share half their
    profile. Merged, they would be scored from their common half, recomputing both long tails
    (~11 s on a CPU), though each has its whole context cached from its own generation (~0.5 s).
    For the same reason a row that joins no group but finds its head cached is a group of one.
    """
    cached: dict[int, int] = {}

    def cached_head(k: int) -> int:
        request = rows[k].request
        if request not in cached:
            cached[request] = min(cached_length(rows[k].tokens), rows[k].first_needed)
        return cached[request]

    order = sorted(range(len(rows)), key=lambda k: rows[k].tokens)
    if not sharing:
        return [PrefixGroup(0, order)]
    groups: list[PrefixGroup] = []
    singles: list[int] = []

    def close(shared: int, members: list[int]) -> None:
        shared = min([shared] + [rows[k].first_needed for k in members])
        if len(members) > 1 and shared >= min_shared:
            groups.append(PrefixGroup(shared, members))
        elif len(members) == 1 and cached_head(members[0]) >= min_shared:
            groups.append(PrefixGroup(cached_head(members[0]), members))  # a group of one, from its cached head
        else:
            singles.extend(members)

    members, shared = [order[0]], len(rows[order[0]].tokens)
    for k in order[1:]:
        lcp = common_prefix(rows[members[0]].tokens, rows[k].tokens)
        # Join only when it saves more than it costs: the new row skips ``lcp`` tokens, but every
        # member already in the group recomputes the ``shared - lcp`` tokens the cut drops (for a
        # group of one: the cut may not drop more than half its head). So rows that share only a
        # system prompt with this group but a long history among themselves form their own group,
        # and ten rubric checks of one text are not merged with the checks of the next text.
        saved, cost = lcp, (shared - lcp) * len(members)
        if saved >= cost and lcp >= max(min_shared, cached_head(members[0]), cached_head(k)):
            members.append(k)
            shared = min(shared, lcp)
        else:
            close(shared, members)
            members, shared = [k], len(rows[k].tokens)
    close(shared, members)
    if singles:
        groups.append(PrefixGroup(0, singles))
    return groups
