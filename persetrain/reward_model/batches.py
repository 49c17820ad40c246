"""A question's options as one batch for a reward model, and the one forward that scores them all.

A decoder computes the question's context once, keeps its KV states, and runs the options as a batch
that attends to them: a context of ~60 tokens and four options of ~20 cost 140 tokens instead of the
4 x 80 of one sequence per option, with the same rewards (and, in training, the same gradients: they flow
into the context through its cached keys and values). An encoder attends both ways, so its context cannot
be shared; it scores one whole row per option. Training (``persetrain.train.rm``) and scoring
(``persetrain.reward_model.scorer``) share this module, so a checkpoint is read the way it was trained.

A windowed decoder (Mistral, ...) gets the options' mask from ``persetrain.prefix_pack``, which applies its
sliding window by position, as it applies in a row of its own.

The rewards are the model's own pooled logits (the last non-padding token of each option, as
``*ForSequenceClassification`` pools), so PEFT, DDP and DeepSpeed wrappers, whose hooks run in
``forward``, work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from persetrain.models import cache_argument
from persetrain.prefix_pack import attention_mask, sliding_window
from persetrain.reward_model.inputs import is_encoder


@dataclass
class ListwiseCollator:
    """A batch of questions: contexts ``[B, Lc]`` and options ``[B * K, Lo]`` when the context is shared; else
    one whole row per real option, ``[N, L]`` (an encoder's ``[CLS] context [SEP] option [SEP]`` with its
    segment ids). K is the most options in the batch.

    Questions with fewer options are masked out of the loss by ``option_mask`` ``[B, K]``: whole rows hold
    only the real options (a swapped context's single one costs one row, not K), shared contexts get one-token
    placeholder options. Padding is on the right: every context position keeps a query that
    attends to something (a left-padded row would attend to nothing), and a decoder's option positions
    continue from its own context's length.
    """

    tokenizer: object
    #: Compute each context once (a decoder without activation checkpointing, whose recomputation in the
    #: backward pass would append the context's states to the cache a second time); else one whole row each.
    share_context: bool = True

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        """Rows with ``swap_context_ids`` add one row per swapped context after the batch's questions, question
        by question: the swapped context with the gold option as its only option (``swapped`` marks them)."""
        pad = self.tokenizer.pad_token_id
        swapped = [False] * len(rows)
        if rows and "swap_context_ids" in rows[0]:
            rows = [
                *rows,
                *(
                    {"context_ids": context, "option_ids": [r["option_ids"][r["gold"]]], "gold": 0}
                    for r in rows
                    for context in r["swap_context_ids"]
                ),
            ]
            swapped += [True] * (len(rows) - len(swapped))
        k = max(len(row["option_ids"]) for row in rows)
        batch = {
            "option_mask": torch.tensor([[i < len(row["option_ids"]) for i in range(k)] for row in rows]),
            "gold": torch.tensor([row["gold"] for row in rows]),
            "swapped": torch.tensor(swapped),
        }
        if is_encoder(self.tokenizer) or not self.share_context:
            pairs = [(row["context_ids"], option) for row in rows for option in row["option_ids"]]
            batch["pair_ids"], batch["pair_mask"] = pad_right([c + o for c, o in pairs], pad)
            if is_encoder(self.tokenizer):
                batch["pair_types"], _ = pad_right([[0] * len(c) + [1] * len(o) for c, o in pairs], 0)
            return batch
        options = [[row["option_ids"][i] if i < len(row["option_ids"]) else [pad] for i in range(k)] for row in rows]
        batch["context_ids"], batch["context_mask"] = pad_right([row["context_ids"] for row in rows], pad)
        batch["option_ids"], batch["option_attention"] = pad_right([o for opts in options for o in opts], pad)
        return batch


def pad_right(sequences: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``sequences`` right-padded with ``pad`` to the longest, and their attention mask."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def option_rewards(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The reward of every option, ``[B, K]``: a decoder's shared-context forward, or one whole row per real option
    (0 where ``option_mask`` is False)."""
    b, k = batch["option_mask"].shape
    if "pair_ids" in batch:
        segments = {"token_type_ids": batch["pair_types"]} if "pair_types" in batch else {}
        out = model(input_ids=batch["pair_ids"], attention_mask=batch["pair_mask"], use_cache=False, **segments)
        rewards = out.logits.new_zeros((b, k), dtype=torch.float32)
        return rewards.masked_scatter(batch["option_mask"], out.logits.float().reshape(-1))
    context_mask = batch["context_mask"]
    positions = torch.arange(context_mask.size(1), device=context_mask.device).expand_as(context_mask)
    windowed = sliding_window(_unwrapped(model).config)
    # a windowed model's own cache would keep only its windowed layers' last positions, padding included; a cache
    # without the model's config keeps every position, and the options' mask applies the window
    own_cache = cache_argument(model, DynamicCache()) if windowed else {}
    context = model(
        input_ids=batch["context_ids"], attention_mask=context_mask, position_ids=positions, use_cache=True, **own_cache
    )
    cache = context.cache if hasattr(context, "cache") else context.past_key_values
    cache.batch_repeat_interleave(k)
    option_ids = batch["option_ids"]
    lengths = context_mask.sum(1).repeat_interleave(k)
    option_positions = lengths[:, None] + torch.arange(option_ids.size(1), device=option_ids.device)
    attention = torch.cat([context_mask.repeat_interleave(k, 0), batch["option_attention"]], dim=1)
    if windowed:
        attention = _windowed_option_mask(model, context_mask.repeat_interleave(k, 0), batch, option_positions)
    out = model(
        input_ids=option_ids,
        attention_mask=attention,
        position_ids=option_positions,
        use_cache=False,
        **cache_argument(model, cache),
    )
    return out.logits.reshape(b, k).float()


def _unwrapped(model):
    """The model inside DDP-style wrappers (PEFT models answer for their base model themselves)."""
    while hasattr(model, "module"):
        model = model.module
    return model


def _windowed_option_mask(model, context_mask: torch.Tensor, batch: dict, option_positions: torch.Tensor):
    """The options' mask over their padded context and themselves, with the model's sliding window applied by
    position. The model's own mask would measure the window in cache slots, which counts a shorter context's
    padding as distance; this mask sees what each option sees in a row of its own."""
    options = batch["option_attention"].bool()
    width, n = context_mask.size(1), options.size(1)
    causal = torch.ones((n, n), dtype=torch.bool, device=options.device).tril()
    visible = torch.cat(
        [
            context_mask.bool()[:, None, None, :].expand(-1, 1, n, -1),
            causal[None, None] & options[:, None, None, :],
        ],
        dim=-1,
    )
    keys = torch.cat([torch.arange(width, device=options.device).expand(len(options), -1), option_positions], dim=1)
    unwrapped = _unwrapped(model)
    return attention_mask(visible, option_positions, keys, unwrapped.config, unwrapped.dtype)
