"""GRPO advantages taken over an item's rollouts (``advantage_group: item``) instead of each prompt's.

TRL's baseline is the mean reward of one prompt's ``num_generations`` rollouts. A yes / no judge is asked about each
candidate of a question in a prompt of its own, and a judge that answers one verdict whatever the candidate gets
rewards that are all equal inside each prompt's group (all right on the candidates where that verdict is the gold,
all wrong on the others): every advantage is 0, no gradient is left but the KL term's, and the state is absorbing,
the collapse the verdict recipes watch for (``persetrain.train.callbacks``). Taken over all the rollouts of an item
(the rows sharing ``item_id``: a question's candidates), the same judge is right on half of them and wrong on the
other half, so its verdict on each candidate is pushed towards that candidate's gold: the judge is paid for telling
the candidates of a question apart, which is what the evaluator reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from accelerate.utils import gather_object
from trl import GRPOTrainer
from trl.trainer.utils import nanstd

from persetrain.train import trl_compat
from persetrain.train.recipe import RecipeError

#: Where a baseline is taken: over each prompt's rollouts (TRL's) or over each item's.
ADVANTAGE_GROUPS = ("prompt", "item")

#: The TRL-private methods :class:`ItemAdvantages` wraps, and the leading parameters it was written against.
EXPECTED: dict[str, tuple[str, ...]] = {
    "_generate_and_score_completions": ("self", "inputs"),
    "_calculate_rewards": trl_compat.EXPECTED["_calculate_rewards"],
}


def item_advantages(rewards: torch.Tensor, items: Sequence, scale_rewards: str) -> torch.Tensor:
    """Each rollout's reward less the mean of its item's rollouts, scaled as TRL's ``scale_rewards`` says.

    ``rewards``: the weighted reward of each rollout of the generation batch (NaN where no reward function scored
    it: left out of every mean and given advantage 0, as TRL does), ``items`` the ``item_id`` of each. ``group``
    divides by the item's standard deviation, ``batch`` by the batch's, ``none`` by nothing (TRL's 1e-4 is added
    to a divisor, so an item whose rewards are all equal gets 0).
    """
    index: dict = {}
    groups = torch.tensor([index.setdefault(item, len(index)) for item in items], device=rewards.device)
    means = torch.stack([torch.nanmean(rewards[groups == g]) for g in range(len(index))])[groups]
    advantages = rewards - means
    if scale_rewards == "group":
        stds = torch.stack([nanstd(rewards[groups == g]) for g in range(len(index))])[groups]
        advantages = advantages / (stds + 1e-4)
    elif scale_rewards == "batch":
        advantages = advantages / (nanstd(rewards) + 1e-4)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be one of group, batch, none, not {scale_rewards!r}")
    return torch.nan_to_num(advantages, nan=0.0)


class ItemAdvantages:
    """Mixed in before a ``GRPOTrainer``: its training advantages are taken over items (:func:`item_advantages`).

    TRL computes rewards and advantages inside ``_generate_and_score_completions`` with no hook between them, so the
    rewards of every process (TRL gathers them before its own baseline) are kept as ``_calculate_rewards`` returns
    them, and the advantages TRL returns are replaced by the item-grouped ones of this process's rollouts. What TRL
    logs (``frac_reward_zero_std``, which the collapse watch reads) stays per prompt: a judge with one verdict for
    every candidate is still seen. Evaluation keeps TRL's advantages.
    """

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._batch_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._batch_rewards

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return output
        per_func = self._batch_rewards
        rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
        items = gather_object([row["item_id"] for row in inputs])
        advantages = item_advantages(rewards, items, self.scale_rewards)
        start = self.accelerator.process_index * len(inputs)
        output["advantages"] = advantages[start : start + len(inputs)].to(output["advantages"].device)
        return output


def with_item_advantages(trainer: type[GRPOTrainer]) -> type[GRPOTrainer]:
    """``trainer`` with :class:`ItemAdvantages` mixed in; a TRL whose private methods changed shape is refused, since
    falling back to TRL's baseline would change the objective the recipe asked for."""
    mismatches = trl_compat.signature_mismatches(GRPOTrainer, EXPECTED)
    if mismatches:
        raise RecipeError(f"advantage_group: item needs TRL's {'; '.join(mismatches)}")
    return type(f"ItemAdvantage{trainer.__name__}", (ItemAdvantages, trainer), {})
