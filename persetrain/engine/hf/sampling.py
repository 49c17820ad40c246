"""Sampling the next token: the engine's seeded per-request draw, and ``generate``'s processors for GRPO.

Two callers, two contracts. The engine draws each request's tokens from a private generator seeded by the
request (:func:`request_generator`), so a text does not depend on what it was batched with, filtering by
:class:`GenerationParams`' temperature, top-k and top-p (:func:`pick`). GRPO's rollouts must sample as TRL's
``generate`` would for TRL's ``GenerationConfig``, so they take ``generate``'s own logits processors
(:func:`sampling_processors`).

The engine's draw is not built from those processors: its top-p drops a token when the more likely tokens
hold more than ``top_p`` of the mass and draws from the rest as it is, where ``TopPLogitsWarper`` drops it at
``top_p`` or more and renormalises; the two differ at the boundary and in rounding, so moving the engine onto
the warper would change its seeded texts.
"""

from __future__ import annotations

import hashlib
import json
import math

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from persetrain.engine.types import ChatRequest, GenerationParams


def sampling_processors(config: GenerationConfig) -> LogitsProcessorList:
    """``generate``'s logits processors for the generation config TRL builds, in ``generate``'s order."""
    processors = LogitsProcessorList()
    if config.repetition_penalty is not None and config.repetition_penalty != 1.0:
        processors.append(RepetitionPenaltyLogitsProcessor(config.repetition_penalty))
    if config.do_sample:
        if config.temperature is not None and config.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(config.temperature))
        if config.top_k:
            processors.append(TopKLogitsWarper(config.top_k))
        if config.top_p is not None and config.top_p < 1.0:
            processors.append(TopPLogitsWarper(config.top_p))
        if config.min_p is not None:
            processors.append(MinPLogitsWarper(config.min_p))
    return processors


def request_generator(params: GenerationParams, request: ChatRequest, device) -> torch.Generator:
    """The random generator of one request, seeded by ``params.seed`` and the request's content (not its id)."""
    digest = hashlib.sha256(
        json.dumps([params.seed, request.model_dump(mode="json", exclude={"id"})], sort_keys=True).encode()
    ).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def pick(logits: torch.Tensor, generators: list[torch.Generator] | None, params: GenerationParams) -> list[int]:
    """The next token of each row: greedy without generators, else drawn with row b's generator ``generators[b]``."""
    if generators is None:
        return logits.argmax(dim=-1).tolist()
    logits = logits / params.temperature
    if params.top_k:
        kth = torch.topk(logits, min(params.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, sorted_idx = probs.sort(dim=-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > params.top_p
        sorted_probs = sorted_probs.masked_fill(outside, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, sorted_idx, sorted_probs)
    return [torch.multinomial(probs[b], 1, generator=g).item() for b, g in enumerate(generators)]
