"""A trained reward model, loaded once and read as a scorer: ``context + candidate`` in, one number out.

A reward-model checkpoint is a transformers ``*ForSequenceClassification`` directory with one label
(what TRL's ``RewardTrainer`` and ``persetrain rm`` save), on any backbone: a decoder such as SmolLM2,
which reads the score at the last non-pad token, or an encoder such as MiniLM, which reads it at
``[CLS]``. ``RewardModelScorer`` is the one place that runs it, so the ``rm`` evaluator and the methods
that take a trained scorer (PREF's stage 3, AuPEL's comparisons) read a checkpoint the same way.

The ids are built as ``persetrain rm`` builds them at training time (``persetrain.reward_inputs``): for a
decoder the context's ids, then the candidate's and EOS - what TRL's standard format gives for
``prompt + completion + eos_token`` -, for an encoder its sentence-pair form ``[CLS] context [SEP]
candidate [SEP]`` with segment ids. A text longer than ``max_length`` loses tokens from the left of the
*context* (the oldest part of a profile, then of the request): the candidate is what is scored, so it
is kept whole as long as it fits at all. A decoder computes a context once for all its candidates,
as the listwise trainer does (a multiple-choice question's context is most of its tokens); groups are
sorted by their longest candidate and padded on the right into batches of at most ``batch_tokens`` padded
tokens and ``MAX_PADDED_SHARE`` x their real ones.
Under ``torch.no_grad`` a text's score depends neither on the batch nor on the candidates that share
its context (the tests check both against each text's plain forward).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from persetrain.console import progress
from persetrain.io import InputError
from persetrain.models import _from_pretrained, best_device, best_dtype, resolve
from persetrain.reward_batches import ListwiseCollator, option_rewards
from persetrain.reward_inputs import encode, is_encoder

SEQUENCE_CLASSIFICATION = "ForSequenceClassification"
#: The most padded tokens a scoring batch computes per real token. Measured on PrefEval's multiple choice
#: (113 questions, 12.8k real tokens): batches capped by size alone computed 22k tokens in 32 s, capped at
#: 1.25x 15-16k in 22-23 s.
MAX_PADDED_SHARE = 1.25
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


def check_language_model(spec: str) -> None:
    """Refuse a reward-model checkpoint where a causal LM's answer is read (the verifier's yes/no)."""
    if resolve(spec).kind != "local":
        return
    path, config = _config_of(spec)
    architectures = config.get("architectures") or []
    if any(a.endswith(SEQUENCE_CLASSIFICATION) for a in architectures):
        raise InputError(
            path,
            f"{architectures}: a reward model (a sequence classifier has no yes/no to read); "
            "a verifier is a causal LM - judge with this checkpoint through the rm evaluator",
            field="architectures",
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
        them (``persetrain.reward_inputs``), and the indices whose context was cut to fit.

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

        Groups are sorted by their longest candidate, then their context, and a batch grows while its padded
        tokens stay within ``batch_tokens`` and within ``MAX_PADDED_SHARE`` x its real ones: every candidate
        row is padded to the batch's longest, so padding, not batch size, decides the cost. A decoder's batch
        is the listwise trainer's forward (``persetrain.reward_batches.option_rewards``): each context once,
        its candidates attending to its cached states.
        """
        if len(contexts) != len(candidates):
            raise ValueError(f"{len(contexts)} contexts for {len(candidates)} candidates")
        groups, cut = self._groups(contexts, candidates)
        groups.sort(key=lambda g: (-max(len(ids) for _, ids in g[1]), -len(g[0])))
        scored: list[Scored | None] = [None] * len(contexts)
        with progress() as bar:
            task = bar.add_task(description, total=len(contexts))
            start = 0
            while start < len(groups):
                end = start + 1
                while end < len(groups) and self._fits(groups[start : end + 1]):
                    end += 1
                batch = groups[start:end]
                rewards = self._forward(batch)
                for row, (context_ids, options) in enumerate(batch):
                    for k, (i, ids) in enumerate(options):
                        scored[i] = Scored(rewards[row][k], len(context_ids) + len(ids), i in cut)
                    bar.advance(task, len(options))
                start = end
        return scored

    def score(
        self, contexts: Sequence[str], candidates: Sequence[str], description: str = "reward model"
    ) -> list[float]:
        """The reward of each ``context + candidate``."""
        return [s.score for s in self.score_detailed(contexts, candidates, description)]

    def _fits(self, groups: list[Group]) -> bool:
        padded = self._padded_tokens(groups)
        real = sum(len(context) + sum(len(ids) for _, ids in options) for context, options in groups)
        return padded <= self.batch_tokens and padded <= MAX_PADDED_SHARE * real

    def _padded_tokens(self, groups: list[Group]) -> int:
        """Tokens a batch of groups computes, padding included: contexts plus option rows when the context is
        shared, else one whole row per option."""
        context = max(len(c) for c, _ in groups)
        options = max(len(ids) for _, opts in groups for _, ids in opts)
        width = max(len(opts) for _, opts in groups)
        if is_encoder(self.tokenizer):
            return len(groups) * width * (context + options)
        return len(groups) * (context + width * options)

    def _forward(self, groups: list[Group]) -> list[list[float]]:
        """Each group's candidates' rewards, in its order."""
        collate = ListwiseCollator(self.tokenizer)
        batch = collate([{"context_ids": c, "option_ids": [ids for _, ids in opts], "gold": 0} for c, opts in groups])
        rewards = option_rewards(self.model, {k: v.to(self.device) for k, v in batch.items()})
        return [rewards[row, : len(opts)].tolist() for row, (_, opts) in enumerate(groups)]
