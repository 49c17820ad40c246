"""``HFBackend``: prompts and tokens, and the backend's calls, each handed to the module that does the work."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from persetrain.console import warn
from persetrain.engine.base import Backend, OnDone
from persetrain.engine.choices import split_choices
from persetrain.engine.hf.decode import Decoder
from persetrain.engine.hf.pack import Forward
from persetrain.engine.hf.plan import BatchLimits, PrefixGroup, Row, prefix_groups
from persetrain.engine.hf.score import ChoiceRows, Scorer, choice_result, read_paths
from persetrain.engine.prefix_cache import PrefixCache
from persetrain.engine.structured import GrammarFactory
from persetrain.engine.types import ChatRequest, GenerationParams
from persetrain.models import load_model, resolve

Truncation = Literal["left", "error"]


def render_prompt(tokenizer, request: ChatRequest) -> str:
    """The text a model is asked: the chat template with the assistant's generation prompt, then the request's
    assistant prefix. GRPO renders a prompt that ends with an assistant prefix by this same function
    (``persetrain.train.grpo``), less the prefix's trailing space (which the tokenizer joins to the next word), so a
    policy is trained after exactly the tokens the engine later reads a choice after."""
    text = tokenizer.apply_chat_template(request.chat_messages(), tokenize=False, add_generation_prompt=True)
    return text + request.assistant_prefix


class ContextOverflowError(ValueError):
    """A request longer than the model's context window with truncation set to ``error``."""


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
        self.limits = BatchLimits(max_tokens=max_batch_tokens, max_rows=max_batch_rows)
        self.min_shared_prefix = min_shared_prefix
        self.prefix_sharing = prefix_sharing
        # Generation leaves its sequences' KV states here and scoring starts from them (0 disables).
        self.prefix_cache = PrefixCache(prefix_cache_bytes, min_tokens=min_shared_prefix)
        self.context_window = int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)
        self.eos_ids = self._eos_ids()
        self._grammars = GrammarFactory(self.tokenizer, self.model.config.vocab_size)

    # ----------------------------------------------------------------- prompts and tokens
    def render(self, request: ChatRequest) -> str:
        return render_prompt(self.tokenizer, request)

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
        message = (
            f"{where} has {len(tokens)} tokens but the context window leaves room for {budget} "
            f"(window {self.context_window})"
        )
        if self.truncation == "error":
            raise ContextOverflowError(message + "; shorten it or set truncation='left'")
        warn(message + f"; dropping the first {len(tokens) - budget} tokens")
        return tokens[len(tokens) - budget :]

    def _eos_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured])
        return {i for i in ids if i is not None}

    def _forward(self) -> Forward:
        """The model as scoring runs it, built per call: it reads ``self.model`` as it is now."""
        return Forward(self.model, self.tokenizer.pad_token_id, self.device)

    # ------------------------------------------------------------------------- scoring
    def choice_probs(self, requests: Sequence[ChatRequest], choices: Sequence[str], on_done: OnDone) -> None:
        planned = self._choice_rows(requests, choices)
        rows = planned.rows
        row_logprobs: dict[int, torch.Tensor] = {}
        rows_of: dict[int, list[int]] = {i: [] for i in range(len(requests))}
        for index, row in enumerate(rows):
            rows_of[row.request].append(index)
        pending = {i: len(members) for i, members in rows_of.items()}

        scorer = Scorer(self._forward(), self.limits, self.prefix_cache, self.min_shared_prefix)
        for index, logprobs in scorer.score(rows, self._prefix_groups(rows)):
            row_logprobs[index] = logprobs
            request = rows[index].request
            pending[request] -= 1
            if pending[request] == 0:
                per_row = [row_logprobs.pop(k) for k in rows_of[request]]
                on_done(
                    request,
                    choice_result(
                        per_row,
                        planned.paths[request],
                        planned.choice_tokens[request],
                        choices,
                        len(planned.contexts[request]),
                    ),
                )

    def _choice_rows(self, requests: Sequence[ChatRequest], choices: Sequence[str]) -> ChoiceRows:
        """The rows that score ``choices`` after each request: the context, extended by each path of
        :func:`read_paths` (one row for "0".."10", whose only multi-token choice starts with "1")."""
        rows: list[Row] = []
        all_choice_tokens: list[list[list[int]]] = []
        all_paths: list[list[list[int]]] = []
        contexts: list[list[int]] = []
        for i, request in enumerate(requests):
            text = self.render(request)
            prompt, *with_choices = self.encode_many([text] + [text + c for c in choices])
            common, per_choice = split_choices(prompt, with_choices, choices)
            longest = max(len(t) for t in per_choice)
            context = self._fit(prompt[:common], self.context_window - longest, request)
            paths = read_paths(per_choice)
            contexts.append(context)
            all_choice_tokens.append(per_choice)
            all_paths.append(paths)
            rows.extend(Row(context + path, len(context) - 1, i) for path in paths)
        return ChoiceRows(rows, all_choice_tokens, all_paths, contexts)

    def _prefix_groups(self, rows: list[Row]) -> list[PrefixGroup]:
        """The rows grouped by shared prefix (``plan.prefix_groups``), under this backend's settings and cache."""
        return prefix_groups(rows, self.min_shared_prefix, self.prefix_cache.match_length, self.prefix_sharing)

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
        fwd = self._forward()
        ids = torch.tensor([tokens], device=self.device)
        logprobs = fwd.logprobs(fwd.hidden(ids, None, 0)[0, start - 1 :])
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
                raise ValueError(
                    f"max_new_tokens={p.max_new_tokens} leaves no room in the "
                    f"context window of {self.context_window} tokens"
                )
            prompts.append(self._fit(self.encode(self.render(request)), budget, request))
        # Rows of one batch share the decoding settings; each row may still carry its own grammar.
        groups: dict[GenerationParams, list[int]] = {}
        for i, p in enumerate(params):
            groups.setdefault(p.model_copy(update={"json_schema": None, "regex": None}), []).append(i)
        decoder = Decoder(
            self.model, self.tokenizer, self.device, self.eos_ids, self.limits, self._grammars, self.prefix_cache
        )
        for shared, members in groups.items():
            decoder.decode(sorted(members, key=lambda i: len(prompts[i])), prompts, requests, shared, params, on_done)
