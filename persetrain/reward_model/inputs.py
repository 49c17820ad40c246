"""How a (context, candidate) pair becomes the token ids a sequence-classification reward model reads.

Training (``persetrain rm``) and scoring (the ``rm`` evaluator) must feed a checkpoint the same ids, and
the listwise trainer computes a question's context once for all its options, so the ids are built as
``context ids + candidate ids`` and never by tokenizing the joined text. The prompts end the context
with a line break (``persetrain.prompts.preference.rm_context``), where byte-level BPE splits anyway,
so for a decoder the two agree with tokenizing ``context + candidate`` as TRL's ``RewardTrainer`` does;
a candidate ends with the EOS token, which TRL appends too.

Encoders (BERT, MiniLM, RoBERTa: tokenizers with a ``[CLS]`` token) read the pair in their own
sentence-pair form, ``[CLS] context [SEP] candidate [SEP]`` with segment ids 0 / 1, and attend in both
directions, so their context cannot be computed once for several candidates.
"""

from __future__ import annotations

from dataclasses import dataclass


def is_encoder(tokenizer) -> bool:
    """Whether the tokenizer is a bidirectional encoder's: it opens every sequence with a ``[CLS]`` token."""
    return tokenizer.cls_token_id is not None and tokenizer.sep_token_id is not None


@dataclass(frozen=True)
class EncodedCandidates:
    """One context and its candidates, as ids: ``context + candidates[i]`` is candidate i's full input."""

    context: list[int]
    candidates: list[list[int]]

    def row(self, i: int) -> list[int]:
        return self.context + self.candidates[i]

    def segments(self, i: int) -> list[int]:
        """Segment (token type) ids of candidate i's row: 0 over the context, 1 over the candidate."""
        return [0] * len(self.context) + [1] * len(self.candidates[i])


def encode(tokenizer, context: str, candidates: list[str], max_length: int | None = None) -> EncodedCandidates:
    """Ids of ``context`` and of each candidate, so that ``context + candidate`` fits ``max_length``.

    A candidate is never cut: the context loses its *oldest* tokens (the start of a long profile),
    keeping the request and the special tokens it opens with.
    """
    context_ids = tokenizer(context)["input_ids"]
    end = tokenizer.sep_token_id if is_encoder(tokenizer) else tokenizer.eos_token_id
    tails = [
        tokenizer(c, add_special_tokens=False)["input_ids"] + ([end] if end is not None else []) for c in candidates
    ]
    if max_length is not None:
        room = max_length - max(len(t) for t in tails)
        if room < len(context_ids):
            head = 1 if is_encoder(tokenizer) or context_ids[:1] == [tokenizer.bos_token_id] else 0
            keep = max(room - head, 0)
            context_ids = context_ids[:head] + (context_ids[len(context_ids) - keep :] if keep else [])
    return EncodedCandidates(context_ids, tails)
