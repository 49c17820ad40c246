"""KV caches: prefilling prompts into a ``DynamicCache``, a decode step, and cutting, padding and joining cache rows.

Every forward pass that reads or writes a cache passes it through :func:`cache_kwargs`, under the keyword
the model's forward knows (``persetrain.models.cache_argument``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from persetrain.engine.prefix_cache import LayerStates
from persetrain.models import cache_argument


def cache_kwargs(model, cache: DynamicCache | None) -> dict:
    """The keywords that run ``model`` over ``cache``, writing the new states into it (None: no cache)."""
    return {**cache_argument(model, cache), "use_cache": cache is not None}


def prefill(model, tokens: list[int], config, device) -> DynamicCache:
    """A cache holding ``tokens``' states (the LM head runs at the last position only)."""
    cache = DynamicCache(config=config)
    model(input_ids=torch.tensor([tokens], device=device), **cache_kwargs(model, cache), logits_to_keep=1)
    return cache


@dataclass(frozen=True)
class Batch:
    """Left-padded rows in a KV cache: the cache (written in place by each step), its attention mask, each
    row's next-token logits and each row's left padding in the cache."""

    cache: DynamicCache
    mask: torch.Tensor
    logits: torch.Tensor
    pads: list[int]


def prefill_left_padded(model, prompts: list[list[int]], pad_id: int, device) -> Batch:
    """``prompts`` prefilled as one left-padded batch. The cache has no config: every layer keeps all its
    positions, so that a row's whole sequence can be read back for the prefix cache."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    cache = DynamicCache()
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
        **cache_kwargs(model, cache),
        logits_to_keep=1,
    )
    return Batch(cache, mask, out.logits[:, -1].float(), [width - len(p) for p in prompts])


def prefill_rows(model, tokens: list[int], rows: int, device) -> Batch:
    """``tokens`` prefilled once and repeated over ``rows`` batch rows: the rollouts of one GRPO prompt. No
    config, as in :func:`prefill_left_padded`, so that batches of different prompts :func:`join`."""
    cache = DynamicCache()
    out = model(input_ids=torch.tensor([tokens], device=device), **cache_kwargs(model, cache), logits_to_keep=1)
    cache.batch_repeat_interleave(rows)
    mask = torch.ones((rows, len(tokens)), dtype=torch.long, device=device)
    return Batch(cache, mask, out.logits[:, -1].float().repeat(rows, 1), [0] * rows)


def step(model, batch: Batch, tokens: torch.Tensor) -> Batch:
    """Each row's next token (``tokens``, one column) through the model: the batch one position on, with the
    next-token logits. A row's position is its own length, whatever its left padding."""
    positions = batch.mask.sum(-1, keepdim=True)
    mask = torch.cat([batch.mask, torch.ones_like(batch.mask[:, :1])], dim=1)
    out = model(input_ids=tokens, attention_mask=mask, position_ids=positions, **cache_kwargs(model, batch.cache))
    return Batch(batch.cache, mask, out.logits[:, -1].float(), batch.pads)


def left_pad(x: torch.Tensor, to: int, dim: int) -> torch.Tensor:
    """``x`` zero-padded on the left of dimension ``dim`` to size ``to``."""
    if x.size(dim) == to:
        return x
    shape = list(x.shape)
    shape[dim] = to - x.size(dim)
    return torch.cat([x.new_zeros(shape), x], dim=dim)


def join(running: Batch, new: Batch) -> Batch:
    """The rows of ``running`` then those of ``new``, both left-padded to the wider of the two."""
    width = max(running.mask.size(1), new.mask.size(1))
    layers = [
        (
            torch.cat([left_pad(a.keys, width, 2), left_pad(b.keys, width, 2)]),
            torch.cat([left_pad(a.values, width, 2), left_pad(b.values, width, 2)]),
        )
        for a, b in zip(running.cache.layers, new.cache.layers, strict=True)
    ]
    return Batch(
        DynamicCache(ddp_cache_data=layers),
        torch.cat([left_pad(running.mask, width, 1), left_pad(new.mask, width, 1)]),
        torch.cat([running.logits, new.logits]),
        [p + width - running.mask.size(1) for p in running.pads] + [p + width - new.mask.size(1) for p in new.pads],
    )


def select_rows(batch: Batch, keep: list[int]) -> Batch:
    """The rows ``keep`` of ``batch`` (its cache cut in place)."""
    index = torch.tensor(keep, device=batch.mask.device, dtype=torch.long)
    batch.cache.batch_select_indices(index)
    return Batch(batch.cache, batch.mask[index], batch.logits[index], [batch.pads[b] for b in keep])


def row_states(cache: DynamicCache, row: int, start: int, end: int) -> LayerStates:
    """The states of batch row ``row`` at positions ``start..end-1``, per layer (views, one row each)."""
    return [
        (layer.keys[row : row + 1, :, start:end], layer.values[row : row + 1, :, start:end]) for layer in cache.layers
    ]


def cat_states(first: LayerStates, second: LayerStates) -> LayerStates:
    """``first``'s positions followed by ``second``'s, per layer."""
    return [
        (torch.cat([k1, k2], dim=2), torch.cat([v1, v2], dim=2))
        for (k1, v1), (k2, v2) in zip(first, second, strict=True)
    ]


def right_padded(states: Sequence[LayerStates | None], lengths: Sequence[int], width: int) -> DynamicCache:
    """One cache whose row r holds ``states[r]``'s first ``lengths[r]`` positions, zero-padded on the right to
    ``width`` (rows of length 0 hold zeros only; an empty cache when every row has length 0).

    No config: every layer keeps all its positions, the windowed ones too (the caller's mask applies the
    window), so that a head's states can be read back whole for the prefix cache.
    """
    template = next((kv for kv, n in zip(states, lengths, strict=True) if n), None)
    layers = []
    for layer in range(len(template) if template else 0):
        keys, values = template[layer]
        shape = (len(states), keys.shape[1], width, keys.shape[3])
        padded_keys, padded_values = keys.new_zeros(shape), values.new_zeros(shape)
        for row, (kv, n) in enumerate(zip(states, lengths, strict=True)):
            if n:
                padded_keys[row, :, :n] = kv[layer][0][0]
                padded_values[row, :, :n] = kv[layer][1][0]
        layers.append((padded_keys, padded_values))
    return DynamicCache(ddp_cache_data=layers or None)
