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
is kept whole as long as it fits at all. Rows are sorted by length and padded on the right into
batches of at most ``batch_tokens`` padded tokens; under ``torch.no_grad`` a row's score does not
depend on which rows share its batch (the tests check batched == one at a time).
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
from persetrain.reward_inputs import encode, is_encoder

SEQUENCE_CLASSIFICATION = "ForSequenceClassification"


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
        ids, _, cut = self._encode(context, candidate)
        return ids, cut

    def _encode(self, context: str, candidate: str) -> tuple[list[int], list[int], bool]:
        """Ids, segment ids and the cut flag, built as training builds them (``persetrain.reward_inputs``):
        the context loses its oldest tokens first; a candidate longer than the limit keeps its start."""
        whole = encode(self.tokenizer, context, [candidate])
        if len(whole.row(0)) <= self.max_length:
            return whole.row(0), whole.segments(0), False
        fitted = encode(self.tokenizer, context, [candidate], self.max_length)
        return fitted.row(0)[: self.max_length], fitted.segments(0)[: self.max_length], True

    @torch.no_grad()
    def score_detailed(
        self, contexts: Sequence[str], candidates: Sequence[str], description: str = "reward model"
    ) -> list[Scored]:
        """One ``Scored`` per (context, candidate) pair, in the given order."""
        if len(contexts) != len(candidates):
            raise ValueError(f"{len(contexts)} contexts for {len(candidates)} candidates")
        rows = [self._encode(c, x) for c, x in zip(contexts, candidates, strict=True)]
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        scores: list[float] = [0.0] * len(rows)
        with progress() as bar:
            task = bar.add_task(description, total=len(rows))
            start = 0
            while start < len(order):
                width = len(rows[order[start]][0])  # the longest row of the batch (rows sorted longest first)
                batch = order[start : start + max(1, self.batch_tokens // max(width, 1))]
                for i, value in zip(
                    batch, self._forward([rows[i][0] for i in batch], [rows[i][1] for i in batch]), strict=True
                ):
                    scores[i] = value
                start += len(batch)
                bar.advance(task, len(batch))
        return [Scored(score, len(ids), cut) for score, (ids, _, cut) in zip(scores, rows, strict=True)]

    def score(
        self, contexts: Sequence[str], candidates: Sequence[str], description: str = "reward model"
    ) -> list[float]:
        """The reward of each ``context + candidate``."""
        return [s.score for s in self.score_detailed(contexts, candidates, description)]

    def _forward(self, rows: list[list[int]], segments: list[list[int]]) -> list[float]:
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=self.device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows], device=self.device)
        extra = {}
        if is_encoder(self.tokenizer):  # the sentence-pair form it was trained on: segment 1 is the candidate
            extra["token_type_ids"] = torch.tensor([s + [0] * (width - len(s)) for s in segments], device=self.device)
        logits = self.model(input_ids=ids, attention_mask=mask, **extra).logits
        return logits[:, 0].float().tolist()
