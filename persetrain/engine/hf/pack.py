"""The forward passes of scoring: whole rows right-padded, or tails packed end to end after their prefixes.

Scoring reads no logits it does not need: these passes return the decoder's final hidden states, and
:meth:`Forward.logprobs` runs the LM head only at the positions a caller reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from persetrain.engine.hf.kv import cache_kwargs, right_padded
from persetrain.engine.hf.plan import Shape
from persetrain.engine.prefix_cache import LayerStates
from persetrain.prefix_pack import attention_mask, chains_visible


@dataclass(frozen=True)
class Pack:
    """Tails that continue one prefix's states, run end to end in one row (``states`` None: prefix length 0)."""

    tails: list[list[int]]
    states: LayerStates | None
    prefix_len: int

    @property
    def shape(self) -> Shape:
        return Shape(sum(map(len, self.tails)), self.prefix_len)


@dataclass(frozen=True)
class Packed:
    """What a batch of packs computed: the final hidden states of every tail of every pack, the batch's KV cache,
    and its padded prefix width ``past`` (the cache holds each row's prefix, then its new tokens from ``past`` on)."""

    hidden: list[list[torch.Tensor]]
    cache: DynamicCache
    past: int


@dataclass(frozen=True)
class Forward:
    """A causal LM as scoring runs it, with the padding token and the device its inputs go to."""

    model: Any
    pad_id: int
    device: torch.device

    def hidden(self, input_ids: torch.Tensor, cache: DynamicCache | None, offset: int) -> torch.Tensor:
        """Final hidden states of the decoder (no LM head: logits are computed only where needed)."""
        positions = torch.arange(offset, offset + input_ids.shape[1], device=self.device)
        out = self.model.base_model(
            input_ids=input_ids,
            position_ids=positions.unsqueeze(0).expand(input_ids.shape[0], -1),
            **cache_kwargs(self.model.base_model, cache),
        )
        return out.last_hidden_state

    def logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token log-probabilities from final hidden states (the model's logit soft-capping applied)."""
        logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return torch.log_softmax(logits, dim=-1)

    def padded(self, rows: list[list[int]]) -> list[torch.Tensor]:
        """Final hidden states of whole rows, as one right-padded batch."""
        width = max(len(t) for t in rows)
        # Right padding needs no attention mask under causal attention: real positions
        # never look at the pad positions after them.
        ids = torch.tensor([t + [self.pad_id] * (width - len(t)) for t in rows], device=self.device)
        return list(self.hidden(ids, None, 0))

    def packed(self, packs: list[Pack]) -> Packed:
        """Final hidden states of every tail of every pack (see :class:`Packed`), from which
        ``heads.py`` also reads the states of a head computed as a one-tail pack.

        Each pack is one row: its tails lie end to end under a block-diagonal causal mask that lets each
        see its prefix and its own earlier tokens only, and positions restart after the prefix for each.
        Rows of one batch continue different prefixes: the states are right-padded to the longest and
        the padding masked out. Against a batch of padded rows over the prefix states copied once per
        tail, nothing is padded within a pack and the prefix is copied once per pack; but every token
        also attends over the other tails' positions, masked out. Measured on the embedded model, best
        of 3: ten 30-token tails after a 500-token prefix 0.73 s packed vs 1.05 s as a padded batch;
        thirty 40-token tails after a 300-token prefix 2.82 s in packs of at most 300 tokens, 3.21 s in
        one pack, 2.97 s padded. Hence packs no longer than the prefix. The mask replaces the model's
        own, so it applies the model's sliding window itself (``persetrain.prefix_pack.attention_mask``).
        """
        lengths = [[len(t) for t in pack.tails] for pack in packs]
        width = max(sum(n) for n in lengths)
        past = max(pack.prefix_len for pack in packs)
        device = self.device
        ids = torch.full((len(packs), width), self.pad_id, device=device)
        positions = torch.zeros((len(packs), width), dtype=torch.long, device=device)
        visible = torch.zeros((len(packs), 1, width, past + width), dtype=torch.bool, device=device)
        diagonal = torch.arange(width, device=device)
        visible[:, 0, diagonal, past + diagonal] = True  # padding positions see themselves: no all-masked row
        for row, (pack, n) in enumerate(zip(packs, lengths, strict=True)):
            total = sum(n)
            own, offset = chains_visible(n, device)
            ids[row, :total] = torch.tensor([token for tail in pack.tails for token in tail], device=device)
            positions[row, :total] = offset + pack.prefix_len
            visible[row, 0, :total, : pack.prefix_len] = True
            visible[row, 0, :total, past : past + total] |= own
        cache = right_padded([pack.states for pack in packs], [pack.prefix_len for pack in packs], past)
        keys = torch.cat([torch.arange(past, device=device).expand(len(packs), -1), positions], dim=1)
        out = self.model.base_model(
            input_ids=ids,
            position_ids=positions,
            attention_mask=attention_mask(visible, positions, keys, self.model.config, self.model.dtype),
            **cache_kwargs(self.model.base_model, cache),
        )
        return Packed(
            [list(out.last_hidden_state[row, : sum(n)].split(n)) for row, n in enumerate(lengths)], cache, past
        )
