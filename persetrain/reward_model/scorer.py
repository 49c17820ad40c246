"""A trained reward model, loaded once and read as a scorer: ``context + candidate`` in, one number out.

A reward-model checkpoint is a transformers ``*ForSequenceClassification`` directory with one label
(what TRL's ``RewardTrainer`` and ``persetrain rm`` save), on any backbone: a decoder such as SmolLM2,
which reads the score at the last non-pad token, or an encoder such as MiniLM, which reads it at
``[CLS]``. ``RewardModelScorer`` is the one place that runs it, so the ``rm`` evaluator and the methods
that take a trained scorer (PREF's stage 3, AuPEL's comparisons) read a checkpoint the same way.

The ids are built as ``persetrain rm`` builds them at training time (``persetrain.reward_model.inputs``): for a
decoder the context's ids, then the candidate's and EOS - what TRL's standard format gives for
``prompt + completion + eos_token`` -, for an encoder its sentence-pair form ``[CLS] context [SEP]
candidate [SEP]`` with segment ids. A text longer than ``max_length`` loses tokens from the left of the
*context* (the oldest part of a profile, then of the request): the candidate is what is scored, so it
is kept whole as long as it fits at all. A decoder computes a context once for all its candidates,
as the listwise trainer does (a multiple-choice question's context is most of its tokens), in two passes
batched by their own lengths: the contexts, then the candidates over the contexts' cached states; every
pass is cut into the batches that compute the fewest padded tokens (``FORWARD_TOKENS`` per pass).
Under ``torch.no_grad`` a text's score depends neither on the batch nor on the candidates that share
its context (the tests check both against each text's plain forward).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from persetrain.console import progress
from persetrain.engine.hf.kv import right_padded, row_states
from persetrain.engine.prefix_cache import LayerStates
from persetrain.io import InputError
from persetrain.models import (
    SEQUENCE_CLASSIFICATION,
    _from_pretrained,
    best_device,
    best_dtype,
    cache_argument,
    resolve,
)
from persetrain.reward_model.batches import ListwiseCollator, option_rewards, pad_right
from persetrain.reward_model.inputs import encode, is_encoder

#: What one forward pass costs beyond its tokens, in tokens: measured on SmolLM2-135M on a 2-core CPU, a pass of
#: n rows takes about 0.04 s + tokens / 780 per second, so a pass is worth computing about 32 padding tokens less.
FORWARD_TOKENS = 32
#: Contexts whose cached states are held at once, in batches of ``batch_tokens``: the memory bound of scoring
#: (SmolLM2-135M keeps 46 KB of states per token in fp32, an 8B Llama 128 KB in bf16).
CHUNK_BATCHES = 4
#: One context's ids and its candidates' ``(index in the caller's order, ids)``: what one forward shares.
Group = tuple[list[int], list[tuple[int, list[int]]]]


def _config_of(spec: str) -> tuple[str, dict]:
    """Where a local or Hub spec's config lives and what it says (embedded and GGUF specs are causal LMs)."""
    resolved = resolve(spec)
    if resolved.kind != "local":
        from transformers import AutoConfig

        return spec, _from_pretrained(AutoConfig, spec).to_dict()
    path = Path(resolved.location) / "config.json"
    try:
        return str(path), json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(path, f"not a readable model config ({err})") from None


def _labels(config: dict) -> int:
    return int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)


def check_reward_model(spec: str) -> None:
    """Refuse, before any weights load, a checkpoint that is not a one-label sequence classifier."""
    if resolve(spec).kind in {"embedded", "gguf"}:
        raise InputError(
            spec,
            "is a causal language model, not a reward model (a *ForSequenceClassification "
            "checkpoint with one label); read it with the verifier evaluator",
            field="architectures",
        )
    path, config = _config_of(spec)
    architectures = config.get("architectures") or []
    if not any(a.endswith(SEQUENCE_CLASSIFICATION) for a in architectures):
        raise InputError(
            path,
            f"{architectures or 'no architectures'}: not a reward model (expected a "
            f"*{SEQUENCE_CLASSIFICATION} checkpoint with one label, as `persetrain rm` writes); a "
            "causal LM is read with the verifier evaluator",
            field="architectures",
        )
    if _labels(config) != 1:
        raise InputError(
            path,
            f"a sequence classifier with {_labels(config)} labels; a reward model has one "
            "(num_labels=1: a scalar score)",
            field="num_labels",
        )


@dataclass(frozen=True)
class Scored:
    """One scored text: the reward, the tokens the model read, and whether the context was cut to fit."""

    score: float
    tokens: int
    truncated: bool


class RewardModelScorer:
    """Scores ``context + candidate`` texts with a reward-model checkpoint, in length-sorted batches."""

    def __init__(
        self,
        spec: str,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
        batch_tokens: int = 8192,
        max_length: int | None = None,
    ):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        check_reward_model(spec)
        self.spec = spec
        self.device = torch.device(device) if device is not None else best_device()
        self.tokenizer = _from_pretrained(AutoTokenizer, spec)
        if self.tokenizer.pad_token is None:  # as TRL's RewardTrainer sets it for training
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = (
            _from_pretrained(AutoModelForSequenceClassification, spec, dtype=dtype or best_dtype(self.device))
            .to(self.device)
            .eval()
        )
        if self.model.config.pad_token_id is None:  # a decoder finds its last real token by the pad id
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        limit = getattr(self.model.config, "max_position_embeddings", None) or self.tokenizer.model_max_length
        self.max_length = min(max_length or limit, limit)
        self.batch_tokens = batch_tokens

    def encode(self, context: str, candidate: str) -> tuple[list[int], bool]:
        """The token ids the model reads for one text, cut to ``max_length``; and whether anything was cut."""
        [(context_ids, [(_, ids)])], cut = self._groups([context], [candidate])
        return context_ids + ids, bool(cut)

    def _groups(self, contexts: Sequence[str], candidates: Sequence[str]) -> tuple[list[Group], set[int]]:
        """The texts as groups of one context's ids and its candidates' ``(index, ids)``, built as training builds
        them (``persetrain.reward_model.inputs``), and the indices whose context was cut to fit.

        A decoder's group holds every candidate of one context that fits whole: the context is computed once
        for all of them. A candidate that does not fit is a group of its own, its context losing the oldest
        tokens first (a candidate longer than the limit keeps its start). An encoder attends both ways, so
        each of its texts is a group of one.
        """
        shared = not is_encoder(self.tokenizer)
        by_context: dict[str, list[int]] = {}
        for i, context in enumerate(contexts):
            by_context.setdefault(context if shared else str(i), []).append(i)
        groups, cut = [], set()
        for indices in by_context.values():
            context = contexts[indices[0]]
            whole = encode(self.tokenizer, context, [candidates[i] for i in indices])
            fitting = []
            for i, tail in zip(indices, whole.candidates, strict=True):
                if len(whole.context) + len(tail) <= self.max_length:
                    fitting.append((i, tail))
                    continue
                fitted = encode(self.tokenizer, context, [candidates[i]], self.max_length)
                tail = fitted.candidates[0][: self.max_length - len(fitted.context)]
                # A decoder with no BOS may keep no context at all: the row splits anywhere, the forward needs one
                groups.append((fitted.context, [(i, tail)]) if fitted.context else (tail[:1], [(i, tail[1:])]))
                cut.add(i)
            if fitting:
                groups.append((whole.context, fitting))
        return groups, cut

    @torch.no_grad()
    def score_detailed(
        self, contexts: Sequence[str], candidates: Sequence[str], description: str = "reward model"
    ) -> list[Scored]:
        """One ``Scored`` per (context, candidate) pair, in the given order.

        A decoder runs the listwise trainer's forward (``persetrain.reward_model.batches.option_rewards``) in its two
        halves, each batched by its own lengths: the contexts, sorted by length, then every candidate of a chunk
        of questions, sorted by length, attending to its context's cached states. Batching whole questions
        pads each candidate row to the longest candidate of the batch and each context to the longest context;
        splitting the halves leaves almost no padding in what the linear layers compute (padding in the cache
        costs attention only). An encoder scores one whole row per text, sorted by length.
        """
        if len(contexts) != len(candidates):
            raise ValueError(f"{len(contexts)} contexts for {len(candidates)} candidates")
        groups, cut = self._groups(contexts, candidates)
        rewards: dict[int, float] = {}
        with progress() as bar:
            task = bar.add_task(description, total=len(contexts))
            if is_encoder(self.tokenizer):
                self._encoder_rewards(groups, rewards, lambda n: bar.advance(task, n))
            else:
                for chunk in self._chunks(groups):
                    self._decoder_rewards(chunk, rewards, lambda n: bar.advance(task, n))
        tokens = {i: len(context) + len(ids) for context, options in groups for i, ids in options}
        return [Scored(rewards[i], tokens[i], i in cut) for i in range(len(contexts))]

    def score(
        self, contexts: Sequence[str], candidates: Sequence[str], description: str = "reward model"
    ) -> list[float]:
        """The reward of each ``context + candidate``."""
        return [s.score for s in self.score_detailed(contexts, candidates, description)]

    def _chunks(self, groups: list[Group]) -> list[list[Group]]:
        """Groups in chunks whose contexts' cached states stay within ``CHUNK_BATCHES`` batches of tokens."""
        chunks: list[list[Group]] = [[]]
        held = 0
        for group in groups:
            if chunks[-1] and held + len(group[0]) > CHUNK_BATCHES * self.batch_tokens:
                chunks.append([])
                held = 0
            chunks[-1].append(group)
            held += len(group[0])
        return chunks

    def _batches(self, rows: list[tuple[int, int]]) -> list[list[int]]:
        """Indices of ``rows`` (``(computed length, cached length)``, sorted by the first) in consecutive batches
        that cost the fewest computed tokens, padding included, plus ``FORWARD_TOKENS`` per forward pass; a
        batch holds at most ``batch_tokens``, cache included, unless it is a single row. An exact partition
        (dynamic programming over the sorted rows): padding and the count of passes both cost time on a CPU.
        """
        cost = [0.0] + [math.inf] * len(rows)
        start = [0] * (len(rows) + 1)
        for end in range(1, len(rows) + 1):
            width, cache = rows[end - 1][0], 0
            for first in range(end - 1, -1, -1):
                cache = max(cache, rows[first][1])
                if first < end - 1 and (end - first) * (width + cache) > self.batch_tokens:
                    break
                total = cost[first] + (end - first) * width + FORWARD_TOKENS
                if total < cost[end]:
                    cost[end], start[end] = total, first
        batches, end = [], len(rows)
        while end:
            batches.append(list(range(start[end], end)))
            end = start[end]
        return batches[::-1]

    def _decoder_rewards(self, groups: list[Group], rewards: dict[int, float], advance: Callable[[int], None]) -> None:
        """Every candidate's reward: the contexts' states first, then the candidates over them."""
        pad = self.tokenizer.pad_token_id
        states: list[LayerStates | None] = [None] * len(groups)
        order = sorted(range(len(groups)), key=lambda g: len(groups[g][0]))
        for batch in self._batches([(len(groups[g][0]), 0) for g in order]):
            members = [order[b] for b in batch]
            ids, mask = (t.to(self.device) for t in pad_right([groups[g][0] for g in members], pad))
            positions = torch.arange(ids.size(1), device=self.device).expand_as(ids)
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
            cache = out.cache if hasattr(out, "cache") else out.past_key_values
            for row, g in enumerate(members):
                states[g] = row_states(cache, row, 0, len(groups[g][0]))
        candidates = sorted(
            ((g, i, ids) for g, (_, options) in enumerate(groups) for i, ids in options),
            key=lambda c: (len(c[2]), len(groups[c[0]][0])),
        )
        for batch in self._batches([(len(ids), len(groups[g][0])) for g, _, ids in candidates]):
            members = [candidates[b] for b in batch]
            lengths = [len(groups[g][0]) for g, _, _ in members]
            width = max(lengths)
            cache = right_padded([states[g] for g, _, _ in members], lengths, width)
            ids, option_mask = (t.to(self.device) for t in pad_right([c[2] for c in members], pad))
            offsets = torch.tensor(lengths, device=self.device)[:, None]
            context_mask = (torch.arange(width, device=self.device) < offsets).long()
            positions = offsets + torch.arange(ids.size(1), device=self.device)
            out = self.model(
                input_ids=ids,
                attention_mask=torch.cat([context_mask, option_mask], dim=1),
                position_ids=positions,
                use_cache=False,
                **cache_argument(self.model, cache),
            )
            for (_, i, _), reward in zip(members, out.logits[:, 0].float().tolist(), strict=True):
                rewards[i] = reward
            advance(len(members))

    def _encoder_rewards(self, groups: list[Group], rewards: dict[int, float], advance: Callable[[int], None]) -> None:
        """Every text's reward, one ``[CLS] context [SEP] candidate [SEP]`` row each, in length-sorted batches."""
        lengths = [len(context) + len(ids) for context, [(_, ids)] in groups]
        order = sorted(range(len(groups)), key=lengths.__getitem__)
        for batch in self._batches([(lengths[g], 0) for g in order]):
            members = [groups[order[b]] for b in batch]
            rows = ListwiseCollator(self.tokenizer)(
                [{"context_ids": c, "option_ids": [x], "gold": 0} for c, [(_, x)] in members]
            )
            scores = option_rewards(self.model, {k: v.to(self.device) for k, v in rows.items()})
            for row, (_, [(i, _)]) in enumerate(members):
                rewards[i] = scores[row, 0].item()
            advance(len(members))
