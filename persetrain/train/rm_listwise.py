"""Listwise reward-model training: every option of a question scored in one packed forward.

A PrefEval question is one context (the person's preference + the question, ~60 tokens) and four short
options (~20 tokens each). TRL's ``RewardTrainer`` reads pairs: the three (gold, distractor) pairs of a
question cost six sequences of context + option, 6 x 80 = 480 tokens, the context computed six times.
Here a decoder computes the context once, keeps its KV states, and runs the options as a batch that
attends to them: 60 + 4 x 20 = 140 tokens for the same four rewards and the same gradients (gradients
flow into the context through its cached keys and values). An encoder attends both ways, so its context
cannot be shared; it still scores the four options in one batch instead of six pair sides.

The rewards are the model's own pooled logits (the last non-padding token of each option, as
``*ForSequenceClassification`` pools), so PEFT, DDP and DeepSpeed wrappers, whose hooks run in
``forward``, work unchanged. ``tests/test_rm.py`` checks that losses and gradients equal the per-pair
path's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from datasets import Dataset

from persetrain.models import cache_argument
from persetrain.reward_inputs import encode, is_encoder

#: The tokenized columns of a listwise row (what the collator reads).
LISTWISE_COLUMNS = ("context_ids", "option_ids", "gold", "swap_context_ids")


def tokenize_listwise(
    dataset: Dataset, tokenizer, max_length: int | None, name: str, swap_seed: int | None = None
) -> Dataset:
    """``prompt`` / ``options`` / ``gold`` rows as context ids and option ids (``persetrain.reward_inputs``).

    With ``swap_seed``, each row also gets ``swap_context_ids``: its own request under another row's person
    (:func:`swapped_prompts`), the context the person-contrast term scores the gold option in.
    """
    swaps = swapped_prompts(dataset, swap_seed) if swap_seed is not None else None

    def tokenize(row: dict, i: int) -> dict:
        encoded = encode(tokenizer, row["prompt"], list(row["options"]), max_length)
        out = {"context_ids": encoded.context, "option_ids": encoded.candidates}
        if swaps is not None:
            out["swap_context_ids"] = encode(tokenizer, swaps[i], [row["options"][row["gold"]]], max_length).context
        return out

    return dataset.map(tokenize, with_indices=True, desc=f"Tokenizing {name} dataset")


def swapped_prompts(dataset: Dataset, seed: int) -> list[str]:
    """Each row's request under another row's person: a seeded draw among the rows with another person text,
    from the *same* topic where the dataset has topics and the topic has another person.

    Same-topic persons are the hard negatives: they share the topic's words (two diets, two hotel tastes),
    so only reading what this person wants tells them apart, where a person from another topic is told
    apart by its vocabulary alone. The person is the part of ``prompt`` before ``prompt_blind`` (the same
    request without the person), so this works for any wording ``persetrain prepare preference`` writes.
    """
    if "prompt_blind" not in dataset.column_names:
        raise ValueError(
            "the person-contrast term needs a 'prompt_blind' column (persetrain prepare preference "
            "writes it) to tell the person from the request"
        )
    prompts, blinds = dataset["prompt"], dataset["prompt_blind"]
    topics = dataset["topic"] if "topic" in dataset.column_names else [""] * len(prompts)
    persons = [p.removesuffix(b) for p, b in zip(prompts, blinds, strict=True)]
    rng = random.Random(seed)
    swaps = []
    for i, blind in enumerate(blinds):
        others = [j for j in range(len(persons)) if persons[j] != persons[i] and topics[j] == topics[i]]
        others = others or [j for j in range(len(persons)) if persons[j] != persons[i]]
        if not others:
            raise ValueError("the person-contrast term needs at least two different persons in the dataset")
        swaps.append(persons[rng.choice(others)] + blind)
    return swaps


@dataclass
class ListwiseCollator:
    """A batch of questions: contexts ``[B, Lc]`` and options ``[B * K, Lo]`` when the context is shared; else
    one whole row per option, ``[B * K, L]`` (an encoder's ``[CLS] context [SEP] option [SEP]`` with its
    segment ids). K is the most options in the batch.

    Questions with fewer options get one-token placeholder rows, masked out of the loss by
    ``option_mask`` ``[B, K]``. Padding is on the right: every context position keeps a query that
    attends to something (a left-padded row would attend to nothing), and a decoder's option positions
    continue from its own context's length.
    """

    tokenizer: object
    #: Compute each context once (a decoder without activation checkpointing, whose recomputation in the
    #: backward pass would append the context's states to the cache a second time); else one whole row each.
    share_context: bool = True

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        """Rows with ``swap_context_ids`` add one row each after the batch's questions: the swapped context
        with the gold option as its only option (``swapped`` marks them)."""
        pad = self.tokenizer.pad_token_id
        swapped = [False] * len(rows)
        if rows and "swap_context_ids" in rows[0]:
            rows = [
                *rows,
                *(
                    {"context_ids": r["swap_context_ids"], "option_ids": [r["option_ids"][r["gold"]]], "gold": 0}
                    for r in rows
                ),
            ]
            swapped += [True] * (len(rows) - len(swapped))
        k = max(len(row["option_ids"]) for row in rows)
        options = [[row["option_ids"][i] if i < len(row["option_ids"]) else [pad] for i in range(k)] for row in rows]
        batch = {
            "option_mask": torch.tensor([[i < len(row["option_ids"]) for i in range(k)] for row in rows]),
            "gold": torch.tensor([row["gold"] for row in rows]),
            "swapped": torch.tensor(swapped),
        }
        if is_encoder(self.tokenizer) or not self.share_context:
            pairs = [(row["context_ids"], option) for row, opts in zip(rows, options, strict=True) for option in opts]
            batch["pair_ids"], batch["pair_mask"] = _pad([c + o for c, o in pairs], pad)
            if is_encoder(self.tokenizer):
                batch["pair_types"], _ = _pad([[0] * len(c) + [1] * len(o) for c, o in pairs], 0)
            return batch
        batch["context_ids"], batch["context_mask"] = _pad([row["context_ids"] for row in rows], pad)
        batch["option_ids"], batch["option_attention"] = _pad([o for opts in options for o in opts], pad)
        return batch


def _pad(sequences: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def option_rewards(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The reward of every option, ``[B, K]``: a decoder's shared-context forward, or an encoder's pair rows."""
    b, k = batch["option_mask"].shape
    if "pair_ids" in batch:
        segments = {"token_type_ids": batch["pair_types"]} if "pair_types" in batch else {}
        out = model(input_ids=batch["pair_ids"], attention_mask=batch["pair_mask"], use_cache=False, **segments)
        return out.logits.reshape(b, k).float()
    context_mask = batch["context_mask"]
    positions = torch.arange(context_mask.size(1), device=context_mask.device).expand_as(context_mask)
    context = model(input_ids=batch["context_ids"], attention_mask=context_mask, position_ids=positions, use_cache=True)
    cache = context.cache if hasattr(context, "cache") else context.past_key_values
    cache.batch_repeat_interleave(k)
    option_ids = batch["option_ids"]
    lengths = context_mask.sum(1).repeat_interleave(k)
    option_positions = lengths[:, None] + torch.arange(option_ids.size(1), device=option_ids.device)
    attention = torch.cat([context_mask.repeat_interleave(k, 0), batch["option_attention"]], dim=1)
    out = model(
        input_ids=option_ids,
        attention_mask=attention,
        position_ids=option_positions,
        use_cache=False,
        **cache_argument(model, cache),
    )
    return out.logits.reshape(b, k).float()


def ranking_loss(rewards: torch.Tensor, gold: torch.Tensor, option_mask: torch.Tensor, loss: str) -> torch.Tensor:
    """The question-level loss from option rewards ``[B, K]``, averaged the way TRL averages its batch.

    ``bradley_terry``: ``-log sigmoid(r_gold - r_j)`` averaged over every (gold, distractor) pair of the
    batch - TRL's loss on the same pairs. ``listwise``: ``-log softmax(r)[gold]`` per question, averaged
    over questions (Plackett-Luce's first choice: the gold against all distractors at once).
    """
    if loss == "listwise":
        return F.cross_entropy(rewards.masked_fill(~option_mask, float("-inf")), gold)
    distractors = option_mask.clone()
    distractors.scatter_(1, gold[:, None], False)
    gold_reward = rewards.gather(1, gold[:, None])
    return -F.logsigmoid(gold_reward - rewards)[distractors].mean()


def person_contrast_loss(own_gold: torch.Tensor, swapped_gold: torch.Tensor) -> torch.Tensor:
    """``-log sigmoid(r(own person, gold) - r(other person, gold))``, averaged over questions.

    The ranking loss alone can be met from the options (the gold one often stands apart from three that
    share what the person avoids), so a judge learns the dataset and ignores the person. This term asks
    the gold answer to fit its own person better than someone else with the same request: only a judge
    that reads the person can lower it.
    """
    return -F.logsigmoid(own_gold - swapped_gold).mean()
