"""The local transformers backend.

Three things make it more than a loop over ``model.generate``:

* **Shared-prefix KV reuse for scoring.** Evaluators score many requests that share a long head
  (system prompt + user history + the response under judgment) and differ in a short tail (one
  rubric rule, one aspect question). ``choice_probs`` sorts the token sequences, groups those
  sharing a prefix, runs each prefix once and continues its tails from its KV states, packed end
  to end in one row under a block-diagonal mask (``_packed``). On a CPU, where batching alone buys
  nothing, the speed-up follows the token-count ratio.
* **Automatic prefix caching** (``prefix_cache.py``). Generation leaves each sequence's KV states
  behind, and scoring starts from the longest cached prefix: a judge that writes a review and then
  scores it pays for its prompt once.
* **Exact closed-set probabilities.** Choices are scored from the next-token distribution in a
  forward pass (multi-token choices by their full sequence log-probability), never by sampling.
  A choice that is a token-prefix of another ("1" and "10") is scored as "this choice and then
  stop", i.e. its probability excludes the mass of continuing into the longer choice, so the
  renormalised set is a proper partition of outcomes (the math, shared with the ``openai``
  backend, is in ``choices.py``).

Generation is a plain decode loop (left padding, KV cache, rows dropped from the batch as they
finish) because it needs three things ``generate()`` does not give together: a private RNG per
request (results independent of batch composition), stop strings checked on decoded text, and an
xgrammar matcher per row for structured output.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import DynamicCache

from persetrain.console import warn
from persetrain.engine.base import Backend, OnDone
from persetrain.engine.choices import choice_logprobs, common_prefix, normalized, split_choices
from persetrain.engine.prefix_cache import LayerStates, PrefixCache
from persetrain.engine.structured import GrammarFactory
from persetrain.engine.types import ChatRequest, ChoiceProbs, Cost, Generation, GenerationParams
from persetrain.models import cache_argument, load_model, resolve

Truncation = Literal["left", "error"]

#: The most padding a batch of continued prefixes may compute, as a share of its real tokens (see _fits).
PADDING = 0.1


class ContextOverflowError(ValueError):
    """A request longer than the model's context window with truncation set to ``error``."""


@dataclass
class _Row:
    """One sequence to score: ``tokens``, and the positions whose next-token logits are needed."""

    tokens: list[int]
    first_needed: int  # logits are read at positions first_needed .. len(tokens) - 1
    request: int


class HFBackend(Backend):
    def __init__(
        self,
        model_spec: str,
        device: str | None = None,
        truncation: Truncation = "left",
        max_batch_tokens: int = 8192,
        max_batch_rows: int = 32,
        min_shared_prefix: int = 32,
        prefix_sharing: bool = True,
        prefix_cache_bytes: int = 2 << 30,
    ):
        self.model, self.tokenizer = load_model(model_spec, device=device)
        self.device = next(self.model.parameters()).device
        self.fingerprint = f"hf:{resolve(model_spec).fingerprint}"
        self.truncation = truncation
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_rows = max_batch_rows
        self.min_shared_prefix = min_shared_prefix
        self.prefix_sharing = prefix_sharing
        # Generation leaves its sequences' KV states here and scoring starts from them (0 disables).
        self.prefix_cache = PrefixCache(prefix_cache_bytes, min_tokens=min_shared_prefix)
        self.context_window = int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)
        self.eos_ids = self._eos_ids()
        self._grammars = GrammarFactory(self.tokenizer, self.model.config.vocab_size)

    # ----------------------------------------------------------------- prompts and tokens
    def render(self, request: ChatRequest) -> str:
        messages = [m.model_dump() for m in request.messages]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text + request.assistant_prefix

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """``encode`` of each text in one call: the tokenizer runs a batch on all cores, and a
        choice_probs request encodes its prompt once per choice (11 times for a 0..10 score)."""
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def _fit(self, tokens: list[int], budget: int, request: ChatRequest) -> list[int]:
        if len(tokens) <= budget:
            return tokens
        where = f"request {request.id!r}" if request.id else "a request"
        message = (f"{where} has {len(tokens)} tokens but the context window leaves room for {budget} "
                   f"(window {self.context_window})")
        if self.truncation == "error":
            raise ContextOverflowError(message + "; shorten it or set truncation='left'")
        warn(message + f"; dropping the first {len(tokens) - budget} tokens")
        return tokens[len(tokens) - budget :]

    def _eos_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured])
        return {i for i in ids if i is not None}

    # ------------------------------------------------------------------- forward passes
    def _hidden(self, input_ids: torch.Tensor, cache: DynamicCache | None, offset: int) -> torch.Tensor:
        """Final hidden states of the decoder (no LM head: logits are computed only where needed)."""
        positions = torch.arange(offset, offset + input_ids.shape[1], device=self.device)
        out = self.model.base_model(
            input_ids=input_ids,
            position_ids=positions.unsqueeze(0).expand(input_ids.shape[0], -1),
            **cache_argument(self.model.base_model, cache),
            use_cache=cache is not None,
        )
        return out.last_hidden_state

    def _logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.model.get_output_embeddings()(hidden).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return torch.log_softmax(logits, dim=-1)

    # ------------------------------------------------------------------------- scoring
    def choice_probs(self, requests: Sequence[ChatRequest], choices: Sequence[str], on_done: OnDone) -> None:
        rows, choice_tokens, paths, contexts = self._choice_rows(requests, choices)
        row_logprobs: dict[int, torch.Tensor] = {}
        rows_of: dict[int, list[int]] = {i: [] for i in range(len(requests))}
        for index, row in enumerate(rows):
            rows_of[row.request].append(index)
        pending = {i: len(members) for i, members in rows_of.items()}

        for index, logprobs in self._score_rows(rows):
            row_logprobs[index] = logprobs
            request = rows[index].request
            pending[request] -= 1
            if pending[request] == 0:
                per_row = [row_logprobs.pop(k) for k in rows_of[request]]
                on_done(request, self._choice_result(per_row, paths[request], choice_tokens[request],
                                                      choices, len(contexts[request])))

    def _choice_rows(self, requests, choices):
        """The rows that score ``choices`` after each request: the context, extended by each path of
        :func:`_read_paths` (one row for "0".."10", whose only multi-token choice starts with "1")."""
        rows: list[_Row] = []
        all_choice_tokens: list[list[list[int]]] = []
        all_paths: list[list[list[int]]] = []
        contexts: list[list[int]] = []
        for i, request in enumerate(requests):
            text = self.render(request)
            prompt, *with_choices = self.encode_many([text] + [text + c for c in choices])
            common, per_choice = split_choices(prompt, with_choices, choices)
            longest = max(len(t) for t in per_choice)
            context = self._fit(prompt[:common], self.context_window - longest, request)
            paths = _read_paths(per_choice)
            contexts.append(context)
            all_choice_tokens.append(per_choice)
            all_paths.append(paths)
            rows.extend(_Row(context + path, len(context) - 1, i) for path in paths)
        return rows, all_choice_tokens, all_paths, contexts

    def _prefix_groups(self, rows: list[_Row]) -> list[tuple[int, list[int]]]:
        """Group row indices that share a token prefix; return (prefix length, members) pairs.

        Rows are sorted so that sequences with a common head are adjacent; a group takes the next
        row while they share at least ``min_shared_prefix`` tokens, the tokens the row saves are no
        fewer than those the shorter shared head makes the group's members recompute, and they share
        no less than either row finds in the prefix cache. A prefix stops before the
        first position whose logits any member needs, so every member has a tail.

        Why the prefix-cache condition: two PerSE prompts of one reviewer can share half their
        profile. Merged, they would be scored from their common half, recomputing both long tails
        (~11 s on a CPU), though each has its whole context cached from its own generation (~0.5 s).
        For the same reason a row that joins no group but finds its head cached is a group of one.
        """
        cached: dict[int, int] = {}

        def cached_head(k: int) -> int:
            request = rows[k].request
            if request not in cached:
                cached[request] = min(self.prefix_cache.match_length(rows[k].tokens), rows[k].first_needed)
            return cached[request]

        order = sorted(range(len(rows)), key=lambda k: rows[k].tokens)
        if not self.prefix_sharing:
            return [(0, order)]
        groups: list[tuple[int, list[int]]] = []
        singles: list[int] = []

        def close(shared: int, members: list[int]) -> None:
            shared = min([shared] + [rows[k].first_needed for k in members])
            if len(members) > 1 and shared >= self.min_shared_prefix:
                groups.append((shared, members))
            elif len(members) == 1 and cached_head(members[0]) >= self.min_shared_prefix:
                groups.append((cached_head(members[0]), members))  # a group of one, from its cached head
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
            if saved >= cost and lcp >= max(self.min_shared_prefix, cached_head(members[0]), cached_head(k)):
                members.append(k)
                shared = min(shared, lcp)
            else:
                close(shared, members)
                members, shared = [k], len(rows[k].tokens)
        close(shared, members)
        if singles:
            groups.append((0, singles))
        return groups

    @torch.inference_mode()
    def _score_rows(self, rows: list[_Row]):
        """Yield (row index, log-probs at its needed positions) for every row, group by group.

        The prefix states of several groups are computed together (``_prefix_states``); each group's
        tails are then cut into packs that continue its prefix states (see ``_packed``), and packs of
        several groups run as one batch, because a forward pass over a few hundred tokens costs mostly
        the reading of the weights (on this CPU a 105-token row takes 2.3 ms a token alone, 1.6 ms in a
        batch of 16). The prefix states of the packs waiting for their batch are held until it runs.
        """
        waiting: list[tuple[list[int], list[list[int]], LayerStates, int]] = []
        shared: list[tuple[int, list[int]]] = []
        for prefix_len, members in self._prefix_groups(rows):
            members = sorted(members, key=lambda k: len(rows[k].tokens))
            if prefix_len:
                shared.append((prefix_len, members))
                continue
            for batch in self._batches(members, lambda k: len(rows[k].tokens), self.max_batch_tokens):
                yield from self._read(rows, batch, [0] * len(batch), self._padded([rows[k].tokens for k in batch]))
        for chunk in self._held(shared):
            heads = self._prefix_states([rows[members[0]].tokens[:prefix_len] for prefix_len, members in chunk])
            for (prefix_len, members), prefix_kv in zip(chunk, heads, strict=True):
                # A pack attends over all of its tails, masked out but computed: its tails hold no more
                # tokens than the prefix whose copies they save (see _packed).
                budget = min(prefix_len, self.max_batch_tokens)
                for pack in self._batches(members, lambda k, p=prefix_len: len(rows[k].tokens) - p, budget):
                    entry = (pack, [rows[k].tokens[prefix_len:] for k in pack], prefix_kv, prefix_len)
                    shapes = [(sum(map(len, tails)), past) for _, tails, _, past in [*waiting, entry]]
                    if waiting and not self._fits(shapes):
                        yield from self._run_packs(rows, waiting)
                        waiting = []
                    waiting.append(entry)
        if waiting:
            yield from self._run_packs(rows, waiting)

    def _held(self, groups: list[tuple[int, list[int]]]) -> list[list[tuple[int, list[int]]]]:
        """The groups cut into chunks whose prefix states are computed and held together: at most
        ``max_batch_tokens`` head tokens a chunk, and at least one group."""
        chunks: list[list[tuple[int, list[int]]]] = []
        held = 0
        for group in groups:
            if not chunks or held + group[0] > self.max_batch_tokens:
                chunks.append([])
                held = 0
            chunks[-1].append(group)
            held += group[0]
        return chunks

    def _prefix_states(self, heads: list[list[int]]) -> list[LayerStates]:
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
                ahead = common_prefix(heads[todo[n - 1]], heads[i]) if n and self.prefix_cache.max_bytes > 0 else 0
                waits = ahead - self.prefix_cache.match_length(heads[i]) >= self.min_shared_prefix
                (later if waits else wave).append(i)
            found = {i: self.prefix_cache.longest(heads[i]) for i in wave}
            new = {i: len(heads[i]) - found[i][0] for i in wave}
            batches: list[list[int]] = []
            for i in sorted(wave, key=new.__getitem__):
                if not batches or not self._fits([(new[k], found[k][0]) for k in [*batches[-1], i]]):
                    batches.append([])
                batches[-1].append(i)
            for batch in batches:
                computed = self._continue_heads([heads[i] for i in batch], [found[i] for i in batch])
                for i, head_kv in zip(batch, computed, strict=True):
                    states[i] = head_kv
            todo = later
        return states  # type: ignore[return-value]

    def _continue_heads(self, heads: list[list[int]], found: list[tuple[int, LayerStates | None]]) -> list[LayerStates]:
        """The states of ``heads``, each continued from its cached part (``found``: reused length, states)
        in one batch; each mostly new head is cached."""
        new = {k: row for row, k in enumerate(k for k, head in enumerate(heads) if found[k][0] < len(head))}
        if new:
            _, cache, past = self._packed([([heads[k][found[k][0] :]], found[k][1], found[k][0]) for k in new])
        states = []
        for k, (head, (reused, cached)) in enumerate(zip(heads, found, strict=True)):
            if k not in new:
                states.append(cached)
                continue
            row, end = new[k], past + len(head) - reused  # its cached part, then its new tokens after the padding
            head_kv = [(torch.cat([keys[:, :, :reused], keys[:, :, past:end]], dim=2),
                        torch.cat([values[:, :, :reused], values[:, :, past:end]], dim=2))
                       for keys, values in ((layer.keys[row : row + 1], layer.values[row : row + 1])
                                            for layer in cache.layers)]
            if reused < len(head) // 2:
                self.prefix_cache.put(head, head_kv, evict_unused=False)
            states.append(head_kv)
        return states

    def _fits(self, shapes: list[tuple[int, int]]) -> bool:
        """Whether rows of (new tokens, prefix length) make one batch: rows, padded tokens, and padded attended
        positions (the KV states held) within the backend's limits, and at most ``PADDING`` of the
        computed tokens padding.

        Why the padding bound: PREF's stage 3 continues 16 prefixes of four lengths, four of each;
        as one batch a sixth of its computed tokens were padding, and on a CPU four rows to a batch
        already run as fast per token as sixteen.
        """
        widths = [tokens for tokens, _ in shapes]
        width, past = max(widths), max(prefix_len for _, prefix_len in shapes)
        return (len(shapes) <= self.max_batch_rows and len(shapes) * width <= self.max_batch_tokens
                and len(shapes) * (past + width) <= 2 * self.max_batch_tokens
                and len(shapes) * width <= (1 + PADDING) * sum(widths))

    def _run_packs(self, rows: list[_Row], packs):
        hidden, _, _ = self._packed([(tails, kv, prefix_len) for _, tails, kv, prefix_len in packs])
        members = [k for pack, *_ in packs for k in pack]
        starts = [prefix_len for pack, _, _, prefix_len in packs for _ in pack]
        yield from self._read(rows, members, starts, [h for per_pack in hidden for h in per_pack])

    def _read(self, rows: list[_Row], members: list[int], starts: list[int], hidden: list[torch.Tensor]):
        """(row index, log-probs at its needed positions) from the hidden states of each row's tail.

        One LM-head call for all rows: at a few positions per row the head's cost is reading its
        weights (49152 x 576 for the embedded model, ~28 ms a call here), not the arithmetic.
        """
        needed = [states[rows[k].first_needed - start : len(rows[k].tokens) - start]
                  for k, start, states in zip(members, starts, hidden, strict=True)]
        logprobs = self._logprobs(torch.cat(needed)).split([len(n) for n in needed])
        yield from zip(members, logprobs, strict=True)

    def _padded(self, rows: list[list[int]]) -> list[torch.Tensor]:
        """Final hidden states of whole rows, as one right-padded batch."""
        width = max(len(t) for t in rows)
        pad = self.tokenizer.pad_token_id
        # Right padding needs no attention mask under causal attention: real positions
        # never look at the pad positions after them.
        ids = torch.tensor([t + [pad] * (width - len(t)) for t in rows], device=self.device)
        return list(self._hidden(ids, None, 0))

    def _packed(self, packs: list[tuple[list[list[int]], LayerStates | None, int]]
                ) -> tuple[list[list[torch.Tensor]], DynamicCache, int]:
        """Final hidden states of every tail of every pack; a pack is tails that continue one prefix's states
        (none: prefix length 0). Also the batch's KV cache and its padded prefix width, from which
        ``_continue_heads`` reads the states of a head computed as a one-tail pack.

        Each pack is one row: its tails lie end to end under a block-diagonal causal mask that lets each
        see its prefix and its own earlier tokens only, and positions restart after the prefix for each.
        Rows of one batch continue different prefixes: the states are right-padded to the longest and
        the padding masked out. Against a batch of padded rows over the prefix states copied once per
        tail, nothing is padded within a pack and the prefix is copied once per pack; but every token
        also attends over the other tails' positions, masked out. Measured on the embedded model, best
        of 3: ten 30-token tails after a 500-token prefix 0.73 s packed vs 1.05 s as a padded batch;
        thirty 40-token tails after a 300-token prefix 2.82 s in packs of at most 300 tokens, 3.21 s in
        one pack, 2.97 s padded. Hence packs no longer than the prefix. The mask replaces the model's
        own, so it applies the model's sliding window itself (``_windowed``).
        """
        lengths = [[len(t) for t in tails] for tails, _, _ in packs]
        width = max(sum(n) for n in lengths)
        past = max(prefix_len for *_, prefix_len in packs)
        dtype, device = self.model.dtype, self.device
        ids = torch.full((len(packs), width), self.tokenizer.pad_token_id, device=device)
        positions = torch.zeros((len(packs), width), dtype=torch.long, device=device)
        mask = torch.full((len(packs), 1, width, past + width), torch.finfo(dtype).min, dtype=dtype, device=device)
        diagonal = torch.arange(width, device=device)
        mask[:, 0, diagonal, past + diagonal] = 0  # padding positions see themselves: no all-masked row
        for row, ((tails, _, prefix_len), n) in enumerate(zip(packs, lengths, strict=True)):
            total = sum(n)
            segment = torch.repeat_interleave(torch.arange(len(tails), device=device), torch.tensor(n, device=device))
            offset = torch.cat([torch.arange(k, device=device) for k in n])
            visible = (segment[:, None] == segment[None, :]) & (offset[:, None] >= offset[None, :])
            ids[row, :total] = torch.tensor([token for tail in tails for token in tail], device=device)
            positions[row, :total] = offset + prefix_len
            mask[row, 0, :total, :prefix_len] = 0
            mask[row, 0, :total, past : past + total].masked_fill_(visible, 0)
        states = []
        template = next((kv for _, kv, prefix_len in packs if prefix_len), None)
        for layer in range(len(template) if template else 0):
            keys, values = template[layer]
            shape = (len(packs), keys.shape[1], past, keys.shape[3])
            padded_keys, padded_values = keys.new_zeros(shape), values.new_zeros(shape)
            for row, (_, kv, prefix_len) in enumerate(packs):
                if prefix_len:
                    padded_keys[row, :, :prefix_len] = kv[layer][0][0]
                    padded_values[row, :, :prefix_len] = kv[layer][1][0]
            states.append((padded_keys, padded_values))
        # No config: every layer keeps all its positions, the windowed ones too (the mask applies the window),
        # so that a head's states can be read back whole for the prefix cache.
        cache = DynamicCache(ddp_cache_data=states or None)
        out = self.model.base_model(input_ids=ids, position_ids=positions,
                                    attention_mask=self._windowed(mask, positions),
                                    **cache_argument(self.model.base_model, cache), use_cache=True)
        return [list(out.last_hidden_state[row, : sum(n)].split(n)) for row, n in enumerate(lengths)], cache, past

    def _windowed(self, mask: torch.Tensor, positions: torch.Tensor) -> torch.Tensor | dict[str, torch.Tensor]:
        """``mask`` (over the padded prefix, then the new tokens at ``positions``) with the model's sliding
        window applied: a token sees no key ``sliding_window`` or more positions back. Models whose
        layers mix windowed and full attention (``layer_types``) get one mask per layer type."""
        config = self.model.config
        window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
        if not window:
            return mask
        past = mask.shape[-1] - positions.shape[1]
        keys = torch.cat([torch.arange(past, device=self.device).expand(len(positions), -1), positions], dim=1)
        too_far = positions[:, None, :, None] - keys[:, None, None, :] >= window
        sliding = mask.masked_fill(too_far, torch.finfo(mask.dtype).min)
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            return {"full_attention": mask, "sliding_attention": sliding}
        return sliding

    def _batches(self, members: list[int], length, max_tokens: int) -> list[list[int]]:
        batches: list[list[int]] = []
        current: list[int] = []
        for k in members:  # members are sorted by length, so the last one sets the padded width
            if current and (len(current) >= self.max_batch_rows or (len(current) + 1) * length(k) > max_tokens):
                batches.append(current)
                current = []
            current.append(k)
        if current:
            batches.append(current)
        return batches

    @staticmethod
    def _choice_result(per_row, paths, choice_tokens, choices, prompt_tokens) -> ChoiceProbs:
        """Choice probabilities from the rows' log-probs (row r, index j: after context + paths[r][:j])."""

        def logprob(prefix: list[int], token: int) -> float:
            return next(lp[len(prefix), token].item() for path, lp in zip(paths, per_row, strict=True)
                        if path[: len(prefix)] == prefix)

        return normalized(choice_logprobs(choice_tokens, logprob, choices),
                          Cost(calls=1, prompt_tokens=prompt_tokens + sum(len(p) for p in paths), completion_tokens=0))

    def check_grammar(self, params: GenerationParams) -> None:
        """Compile the schema or regex of ``params`` now, so a bad one fails before decoding starts."""
        self._grammars.matcher(params)

    # ------------------------------------------------------- raw log-probs (for serving)
    @torch.inference_mode()
    def token_logprobs(self, tokens: list[int], start: int, top_k: int = 0) -> list[dict]:
        """Log-probabilities for positions ``start..len(tokens)``, for ``persetrain serve``.

        Entry ``p`` (for ``start <= p < len(tokens)``) holds the log-probability of ``tokens[p]``
        given what precedes it and its ``rank`` in the vocabulary, plus the ``top_k`` most likely
        tokens there; the final entry (``p == len(tokens)``) describes the next token after the
        sequence and has no actual token. This is what OpenAI-style ``logprobs``/``top_logprobs``
        and vLLM's ``prompt_logprobs`` report, computed from one forward pass.
        """
        if start < 1:
            raise ValueError("the first token has no conditional log-probability; start at 1 or later")
        ids = torch.tensor([tokens], device=self.device)
        logprobs = self._logprobs(self._hidden(ids, None, 0)[0, start - 1 :])
        entries = []
        for offset, dist in enumerate(logprobs):
            p = start + offset
            entry: dict = {"position": p}
            if p < len(tokens):
                logprob = dist[tokens[p]]
                # rank (1 = most likely) is part of vLLM's prompt_logprobs format
                entry.update(token_id=tokens[p], logprob=logprob.item(), rank=int((dist > logprob).sum()) + 1)
            if top_k:
                values, indices = dist.topk(top_k)
                entry["top"] = list(zip(indices.tolist(), values.tolist(), strict=True))
            entries.append(entry)
        return entries

    # ---------------------------------------------------------------------- generation
    def generate(self, requests: Sequence[ChatRequest], params: Sequence[GenerationParams], on_done: OnDone) -> None:
        prompts = []
        for request, p in zip(requests, params, strict=True):
            budget = self.context_window - p.max_new_tokens
            if budget <= 0:
                raise ValueError(f"max_new_tokens={p.max_new_tokens} leaves no room in the "
                                 f"context window of {self.context_window} tokens")
            prompts.append(self._fit(self.encode(self.render(request)), budget, request))
        # Rows of one batch share the decoding settings; each row may still carry its own grammar.
        groups: dict[GenerationParams, list[int]] = {}
        for i, p in enumerate(params):
            groups.setdefault(p.model_copy(update={"json_schema": None, "regex": None}), []).append(i)
        for shared, members in groups.items():
            self._decode(sorted(members, key=lambda i: len(prompts[i])), prompts, requests, shared, params, on_done)

    @torch.inference_mode()
    def _decode(self, order: list[int], prompts: list[list[int]], requests: Sequence[ChatRequest],
                params: GenerationParams, row_params: Sequence[GenerationParams], on_done: OnDone) -> None:
        """Generate for requests ``order`` (sorted by prompt length), continuously batched.

        A request joins the running batch as soon as it fits next to the running ones (by ``_batches``' rule:
        rows x (longest prompt + max_new_tokens) <= ``max_batch_tokens``, at most ``max_batch_rows``) and
        leaves it when it ends, so one long generation no longer holds a finished batch: the embedded model's
        PARL rubric sets of one batch ran 45 to 311 tokens. Requests admitted together are prefilled together,
        left-padded; their cache and the running one are left-padded to one width and joined. Sampling is
        seeded per request and grammars are per request, so a request's text does not depend on what it was
        batched with (``tests/test_engine.py``).
        """
        pending = list(reversed(order))  # popped from the end: shortest prompts first
        active: list[int] = []  # batch row b holds request active[b]...
        pads: list[int] = []  # ...after pads[b] positions of left padding in the cache
        generated: dict[int, list[int]] = {}
        sampled: dict[int, int] = {}  # tokens drawn, the end-of-sequence token included
        generators = {i: self._generator(params, requests[i]) for i in order} if params.temperature > 0 else None
        matchers = self._grammars.matchers([row_params[i] for i in order])
        matcher = dict(zip(order, matchers, strict=True)) if matchers is not None else None
        cache, mask, logits = DynamicCache(), None, None  # full layers, as in _packed: _remember keeps whole sequences

        def fits(k: int, rows: int) -> bool:  # request k next to `rows` rows, the longest prompt so far
            return rows == 0 or (rows < self.max_batch_rows and
                                 (rows + 1) * (len(prompts[k]) + params.max_new_tokens) <= self.max_batch_tokens)

        while pending or active:
            joining: list[int] = []
            while pending and fits(pending[-1], len(active) + len(joining)):
                joining.append(pending.pop())
            if joining:
                cache, mask, logits, pads = self._join(cache, mask, logits, pads, [prompts[i] for i in joining])
                active += joining
                generated.update({i: [] for i in joining})
                sampled.update({i: 0 for i in joining})
            if matcher is not None:
                logits = self._grammars.mask(logits, [matcher[i] for i in active])
            chosen = self._pick(logits, [generators[i] for i in active] if generators else None, params)
            keep: list[int] = []
            for b, i in enumerate(active):
                token = chosen[b]
                sampled[i] += 1
                if matcher is not None and matcher[i] is not None and not matcher[i].is_terminated():
                    matcher[i].accept_token(token)
                finish = None
                if token in self.eos_ids:
                    finish = "stop"
                else:
                    generated[i].append(token)
                    if params.stop and _first_stop(self.tokenizer.decode(generated[i]), params.stop) is not None:
                        finish = "stop"
                    elif sampled[i] == params.max_new_tokens:
                        finish = "length"
                if finish is None:
                    keep.append(b)
                    continue
                self._remember(cache, b, prompts[i], generated[i], pads[b])  # for a later call on the same text
                on_done(i, self._generation(prompts[i], generated[i], sampled[i], finish, params))
            if len(keep) < len(active):
                index = torch.tensor(keep, device=self.device, dtype=torch.long)
                cache.batch_select_indices(index)
                mask = mask[index]
                active, pads = [active[b] for b in keep], [pads[b] for b in keep]
            if not active:
                cache, mask = DynamicCache(), None
                continue
            last = torch.tensor([[generated[i][-1]] for i in active], device=self.device)
            positions = mask.sum(-1, keepdim=True)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            out = self.model(input_ids=last, attention_mask=mask, position_ids=positions,
                             **cache_argument(self.model, cache), use_cache=True)
            logits = out.logits[:, -1].float()

    def _join(self, cache: DynamicCache, mask: torch.Tensor | None, logits: torch.Tensor | None, pads: list[int],
              prompts: list[list[int]]) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, list[int]]:
        """Prefill ``prompts`` (left-padded) and join them to the running batch (none when ``mask`` is None).

        Returns the joined cache, attention mask, next-token logits and left padding per row, new rows last."""
        width, pad = max(len(p) for p in prompts), self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        new_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        new_cache = DynamicCache()
        out = self.model(input_ids=ids, attention_mask=new_mask, position_ids=(new_mask.cumsum(-1) - 1).clamp(min=0),
                         **cache_argument(self.model, new_cache), use_cache=True, logits_to_keep=1)
        new_logits = out.logits[:, -1].float()
        if mask is None:
            return new_cache, new_mask, new_logits, [width - len(p) for p in prompts]
        running = mask.size(1)
        joined = max(running, width)

        def left(x: torch.Tensor, to: int, dim: int) -> torch.Tensor:
            if x.size(dim) == to:
                return x
            shape = list(x.shape)
            shape[dim] = to - x.size(dim)
            return torch.cat([x.new_zeros(shape), x], dim=dim)

        layers = [(torch.cat([left(a.keys, joined, 2), left(b.keys, joined, 2)]),
                   torch.cat([left(a.values, joined, 2), left(b.values, joined, 2)]))
                  for a, b in zip(cache.layers, new_cache.layers, strict=True)]
        return (DynamicCache(ddp_cache_data=layers),
                torch.cat([left(mask, joined, 1), left(new_mask, joined, 1)]),
                torch.cat([logits, new_logits]),
                [b + joined - running for b in pads] + [joined - len(p) for p in prompts])

    def _generation(self, prompt: list[int], generated: list[int], sampled: int, finish: str,
                    params: GenerationParams) -> Generation:
        text = self.tokenizer.decode(generated, skip_special_tokens=True)
        cut = _first_stop(text, params.stop) if params.stop else None
        return Generation(text=text[:cut] if cut is not None else text, finish_reason=finish,
                          cost=Cost(calls=1, prompt_tokens=len(prompt), completion_tokens=sampled))

    def _remember(self, cache: DynamicCache, b: int, prompt: list[int], generated: list[int], start: int) -> None:
        """Put batch row ``b``'s states (its ``start`` positions of left padding cut off) into the prefix cache."""
        if self.prefix_cache.max_bytes <= 0:
            return
        total = cache.get_seq_length()
        tokens = (prompt + generated)[: total - start]
        self.prefix_cache.put(tokens, [(layer.keys[b : b + 1, :, start:total], layer.values[b : b + 1, :, start:total])
                                       for layer in cache.layers])

    def _generator(self, params: GenerationParams, request: ChatRequest) -> torch.Generator:
        digest = hashlib.sha256(
            json.dumps([params.seed, request.model_dump(mode="json", exclude={"id"})], sort_keys=True).encode()
        ).digest()
        return torch.Generator(device=self.device).manual_seed(int.from_bytes(digest[:8], "little") >> 1)

    @staticmethod
    def _pick(logits: torch.Tensor, generators, params: GenerationParams) -> list[int]:
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


def _read_paths(choice_tokens: list[list[int]]) -> list[list[int]]:
    """The fewest token paths after the context whose rows give every distribution the choices need.

    A choice t needs the next-token distribution after each of its proper prefixes, and after t itself
    when a longer choice extends it. A row of context + path gives the distributions after every prefix
    of path, so only the maximal needed paths get rows: [] alone for single-token choices, ["1"] for
    "0".."10" (one row instead of one per choice: PREF's stage 3 scores 11 choices per candidate).
    """
    needed = {tuple(t[:p]) for t in choice_tokens for p in range(len(t))}
    needed |= {tuple(t) for t in choice_tokens
               if any(len(o) > len(t) and o[: len(t)] == t for o in choice_tokens)}
    return [list(p) for p in sorted(needed)
            if not any(len(q) > len(p) and q[: len(p)] == p for q in needed)]


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None
