"""Generation: a continuously batched decode loop.

Generation is a plain decode loop (left padding, KV cache, rows dropped from the batch as they
finish) because it needs three things ``generate()`` does not give together: a private RNG per
request (results independent of batch composition), stop strings checked on decoded text, and an
xgrammar matcher per row for structured output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from persetrain.engine.base import OnDone
from persetrain.engine.hf.kv import Batch, join, prefill_left_padded, row_states, select_rows, step
from persetrain.engine.hf.plan import BatchLimits
from persetrain.engine.hf.sampling import pick, request_generator
from persetrain.engine.prefix_cache import PrefixCache
from persetrain.engine.structured import GrammarFactory
from persetrain.engine.types import ChatRequest, Cost, Generation, GenerationParams


@dataclass
class Decoding:
    """A request in the running batch: its prompt, what it has generated, and how it samples."""

    request: int
    prompt: list[int]
    generator: torch.Generator | None  # None: greedy
    matcher: Any = None  # its xgrammar matcher, if it has a grammar
    generated: list[int] = field(default_factory=list)  # the end-of-sequence token excluded
    sampled: int = 0  # tokens drawn, the end-of-sequence token included


@dataclass(frozen=True)
class Decoder:
    """What decoding needs of the backend: the model and tokenizer, batch limits, grammars, the prefix cache."""

    model: Any
    tokenizer: Any
    device: torch.device
    eos_ids: set[int]
    limits: BatchLimits
    grammars: GrammarFactory
    prefix_cache: PrefixCache

    @torch.inference_mode()
    def decode(
        self,
        order: list[int],
        prompts: list[list[int]],
        requests: Sequence[ChatRequest],
        params: GenerationParams,
        row_params: Sequence[GenerationParams],
        on_done: OnDone,
    ) -> None:
        """Generate for requests ``order`` (sorted by prompt length), continuously batched.

        A request joins the running batch as soon as it fits next to the running ones (by ``BatchLimits.admits``:
        rows x (longest prompt + max_new_tokens) <= ``max_batch_tokens``, at most ``max_batch_rows``) and
        leaves it when it ends, so one long generation no longer holds a finished batch: the embedded model's
        PARL rubric sets of one batch ran 45 to 311 tokens. Requests admitted together are prefilled together,
        left-padded; their cache and the running one are left-padded to one width and joined. Sampling is
        seeded per request and grammars are per request, so a request's text does not depend on what it was
        batched with (``tests/test_engine.py``).
        """
        pending = list(reversed(order))  # popped from the end: shortest prompts first
        generators = (
            {i: request_generator(params, requests[i], self.device) for i in order} if params.temperature > 0 else None
        )
        matchers = self.grammars.matchers([row_params[i] for i in order])
        grammar = dict(zip(order, matchers, strict=True)) if matchers is not None else {}
        active: list[Decoding] = []  # batch row b decodes active[b]
        batch: Batch | None = None  # full layers, as in Forward.packed: _remember keeps whole sequences
        while pending or active:
            joining: list[int] = []
            while pending and self.limits.admits(
                len(active) + len(joining), len(prompts[pending[-1]]) + params.max_new_tokens, self.limits.max_tokens
            ):
                joining.append(pending.pop())
            if joining:
                new = prefill_left_padded(
                    self.model, [prompts[i] for i in joining], self.tokenizer.pad_token_id, self.device
                )
                batch = new if batch is None else join(batch, new)
                active += [
                    Decoding(i, prompts[i], generators[i] if generators else None, grammar.get(i)) for i in joining
                ]
            logits = batch.logits
            if matchers is not None:
                logits = self.grammars.mask(logits, [row.matcher for row in active])
            chosen = pick(logits, [row.generator for row in active] if generators else None, params)
            keep: list[int] = []
            for b, (row, token) in enumerate(zip(active, chosen, strict=True)):
                if not self._ended(row, token, params, batch, b, on_done):
                    keep.append(b)
            if len(keep) < len(active):
                batch = select_rows(batch, keep)
                active = [active[b] for b in keep]
            if not active:
                batch = None
                continue
            batch = step(self.model, batch, torch.tensor([[row.generated[-1]] for row in active], device=self.device))

    def _ended(
        self, row: Decoding, token: int, params: GenerationParams, batch: Batch, b: int, on_done: OnDone
    ) -> bool:
        """Take ``row``'s drawn ``token``; when the row ends, remember its states (batch row ``b``) and hand on its
        generation."""
        row.sampled += 1
        if row.matcher is not None and not row.matcher.is_terminated():
            row.matcher.accept_token(token)
        finish = None
        if token in self.eos_ids:
            finish = "stop"
        else:
            row.generated.append(token)
            if params.stop and first_stop(self.tokenizer.decode(row.generated), params.stop) is not None:
                finish = "stop"
            elif row.sampled == params.max_new_tokens:
                finish = "length"
        if finish is None:
            return False
        self._remember(batch, b, row)  # for a later call on the same text
        on_done(row.request, self._generation(row, finish, params))
        return True

    def _generation(self, row: Decoding, finish: str, params: GenerationParams) -> Generation:
        text = self.tokenizer.decode(row.generated, skip_special_tokens=True)
        cut = first_stop(text, params.stop) if params.stop else None
        return Generation(
            text=text[:cut] if cut is not None else text,
            finish_reason=finish,
            cost=Cost(calls=1, prompt_tokens=len(row.prompt), completion_tokens=row.sampled),
        )

    def _remember(self, batch: Batch, b: int, row: Decoding) -> None:
        """Put batch row ``b``'s states (its left padding cut off) into the prefix cache."""
        if self.prefix_cache.max_bytes <= 0:
            return
        start, total = batch.pads[b], batch.cache.get_seq_length()
        tokens = (row.prompt + row.generated)[: total - start]
        self.prefix_cache.put(tokens, row_states(batch.cache, b, start, total))


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Where the first of ``stops`` begins in ``text`` (None: none occurs)."""
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None
