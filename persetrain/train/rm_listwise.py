"""Listwise reward-model training data and losses: a question's options ranked from one packed forward.

A PrefEval question is one context (the person's preference + the question, ~60 tokens) and four short
options (~20 tokens each). TRL's ``RewardTrainer`` reads pairs: the three (gold, distractor) pairs of a
question cost six sequences of context + option, 6 x 80 = 480 tokens, the context computed six times.
Here the question's rows are tokenized as one context and its options, batched and scored by
``persetrain.reward_model.batches`` (the context once, 60 + 4 x 20 = 140 tokens for the same four rewards),
and ranked by the losses below. ``tests/test_rm.py`` checks that losses and gradients equal the per-pair
path's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from datasets import Dataset

from persetrain.person import other_persons
from persetrain.reward_model.inputs import encode

#: The tokenized columns of a listwise row (what the collator reads).
LISTWISE_COLUMNS = ("context_ids", "option_ids", "gold", "swap_context_ids")


def tokenize_listwise(
    dataset: Dataset,
    tokenizer,
    max_length: int | None,
    name: str,
    swap_seed: int | None = None,
    persons: int = 1,
) -> Dataset:
    """``prompt`` / ``options`` / ``gold`` rows as context ids and option ids (``persetrain.reward_model.inputs``).

    With ``swap_seed``, each row also gets ``swap_context_ids``: its own request under ``persons`` other rows'
    persons (:func:`swapped_prompts`), the contexts the person-contrast term scores the gold option in.
    """
    swaps = swapped_prompts(dataset, swap_seed, persons) if swap_seed is not None else None

    def tokenize(row: dict, i: int) -> dict:
        encoded = encode(tokenizer, row["prompt"], list(row["options"]), max_length)
        out = {"context_ids": encoded.context, "option_ids": encoded.candidates}
        if swaps is not None:
            gold = [row["options"][row["gold"]]]
            out["swap_context_ids"] = [encode(tokenizer, swap, gold, max_length).context for swap in swaps[i]]
        return out

    return dataset.map(tokenize, with_indices=True, desc=f"Tokenizing {name} dataset")


def swapped_prompts(dataset: Dataset, seed: int, persons: int = 1) -> list[list[str]]:
    """Each row's request under ``persons`` other rows' persons (:func:`persetrain.person.other_persons`: the
    same topic first). The person is the part of ``prompt`` before ``prompt_blind`` (the same request without the
    person), so this works for any wording ``persetrain prepare preference`` writes.
    """
    if "prompt_blind" not in dataset.column_names:
        raise ValueError(
            "the person-contrast term needs a 'prompt_blind' column (persetrain prepare preference "
            "writes it) to tell the person from the request"
        )
    prompts, blinds = dataset["prompt"], dataset["prompt_blind"]
    topics = dataset["topic"] if "topic" in dataset.column_names else [""] * len(prompts)
    texts = [p.removesuffix(b) for p, b in zip(prompts, blinds, strict=True)]
    try:
        drawn = other_persons(texts, topics, seed, persons)
    except ValueError as e:
        raise ValueError(f"the person-contrast term: {e}") from None
    return [[person + blind for person in mine] for mine, blind in zip(drawn, blinds, strict=True)]


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
    """``-log softmax([r(own person, gold), r(other person k, gold) for k])[0]``, averaged over questions:
    ``own_gold`` is ``[B]``, ``swapped_gold`` ``[B, K]``. With one other person it is
    ``-log sigmoid(r(own, gold) - r(other, gold))``.

    The ranking loss alone can be met from the options (the gold one often stands apart from three that
    share what the person avoids), so a judge learns the dataset and ignores the person. This term asks
    the gold answer to fit its own person better than others with the same request - the softmax over the
    persons is the question "whose answer is this?" - and only a judge that reads the person can lower it.
    """
    logits = torch.cat([own_gold[:, None], swapped_gold], dim=1)
    return F.cross_entropy(logits, torch.zeros_like(own_gold, dtype=torch.long))
