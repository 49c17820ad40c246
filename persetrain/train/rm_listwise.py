"""Listwise reward-model training data and losses: a question's options ranked from one packed forward.

A PrefEval question is one context (the person's preference + the question, ~60 tokens) and four short
options (~20 tokens each). TRL's ``RewardTrainer`` reads pairs: the three (gold, distractor) pairs of a
question cost six sequences of context + option, 6 x 80 = 480 tokens, the context computed six times.
Here the question's rows are tokenized as one context and its options, batched and scored by
``persetrain.reward_batches`` (the context once, 60 + 4 x 20 = 140 tokens for the same four rewards),
and ranked by the losses below. ``tests/test_rm.py`` checks that losses and gradients equal the per-pair
path's.
"""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F
from datasets import Dataset

from persetrain.reward_inputs import encode

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
