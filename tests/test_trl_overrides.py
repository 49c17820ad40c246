"""The shared-prompt GRPO trainer against TRL's own by behaviour: the same steps through TRL's public ``train()``.

``persetrain.train.trl_compat`` compares the overridden private methods' parameter names at import; a release can
keep the names and still change what TRL passes them or expects back. Here both trainers train the tiny random
LLaMA for two steps from the same weights, data and seed, and must log the same losses, rewards, KL and gradient
norms and end with the same weights, while the overrides are seen to run (every rollout and log-prob pass that has
a repeated prompt takes persetrain's path, counted below TRL's). Both trainers sample every rollout token with one
``torch.multinomial`` over the same rows in the same order (no rollout of the tiny model ends before the limit), so
from the same seed they draw the same tokens; greedy rollouts would not do, as a group of identical rollouts has a
zero policy gradient, and Adam turns the rounding noise of TRL's zero into a step. The reward alternates over the
batch, so that every group has a spread.
``make test-latest`` runs this file on the newest TRL to say whether the pin in pyproject.toml can move to it.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from datasets import Dataset
from numerics import close, tensor_tolerance
from trl import GRPOTrainer

from persetrain.models import load_tokenizer
from persetrain.train.grpo import GRPOConfig
from persetrain.train.grpo_trainer import SharedPromptGRPOTrainer
from persetrain.train.trl_compat import pin_verdict

#: Logged per step by TRL; each must agree between the two trainers.
COMPARED = ("loss", "grad_norm", "reward", "reward_std", "kl", "entropy", "completions/mean_length")
OVERRIDDEN = ("_generate_single_turn", "_get_per_token_logps_and_entropies")


def alternating_reward(completions, **columns) -> list[float]:
    """1, 0, 1, ... over the batch: a reward spread within each group whatever the rollouts say."""
    return [float(i % 2) for i in range(len(completions))]


class TRLPathCounts(GRPOTrainer):
    """TRL's trainer, counting the calls that reach its own rollout and log-prob methods."""

    def __init__(self, *args, **kwargs):
        self.trl_calls: Counter = Counter()
        super().__init__(*args, **kwargs)

    def _generate_single_turn(self, *args, **kwargs):
        self.trl_calls["_generate_single_turn"] += 1
        return super()._generate_single_turn(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        self.trl_calls["_get_per_token_logps_and_entropies"] += 1
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)


class SharedPromptCounts(SharedPromptGRPOTrainer, TRLPathCounts):
    """persetrain's trainer, whose fallbacks to TRL's path (``super()``) are counted by :class:`TRLPathCounts`."""

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        self.trl_calls["shared"] += 1
        return super()._get_per_token_logps_and_entropies(*args, **kwargs)


def _train(trainer_class: type, model_dir, tmp_path, per_device: int, accumulation: int):
    tokenizer = load_tokenizer(str(model_dir))
    prompts = [f"Write a headline about topic {k}, in the voice of user {k % 3}." for k in range(4)]
    args = GRPOConfig(
        output_dir=str(tmp_path / trainer_class.__name__),
        report_to="none",
        disable_tqdm=True,
        save_strategy="no",
        logging_steps=1,
        max_steps=2,
        num_generations=2,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        max_completion_length=6,
        beta=0.001,
        learning_rate=1e-3,
        activation_checkpointing=False,
        shuffle_dataset=False,
        seed=0,
    )
    trainer = trainer_class(
        model=str(model_dir),
        reward_funcs=[alternating_reward],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
    )
    trainer.train()
    steps = [r for r in trainer.state.log_history if "loss" in r]
    return trainer, steps


@pytest.mark.parametrize(
    ("per_device", "accumulation", "trl_logps_calls"),
    [
        (4, 1, 0),  # a micro-batch of 2 prompts x 2 rollouts: every pass takes the shared path
        # one row a micro-batch: the loss's log-probs take TRL's path (2 a step), the rollouts ours
        pytest.param(1, 2, 4, marks=pytest.mark.slow),
    ],
    ids=["shared-prompts", "one-row-micro-batches"],
)
@pytest.mark.usefixtures("fp32_compute")  # bf16's rounding would let the two paths' samples part on a GPU
def test_the_overridden_trainer_trains_as_trls_own(tiny_llama_dir, tmp_path, per_device, accumulation, trl_logps_calls):
    ours, our_steps = _train(SharedPromptCounts, tiny_llama_dir, tmp_path, per_device, accumulation)
    theirs, their_steps = _train(TRLPathCounts, tiny_llama_dir, tmp_path, per_device, accumulation)

    assert ours.trl_calls["_generate_single_turn"] == 0 and theirs.trl_calls["_generate_single_turn"] > 0
    assert ours.trl_calls["_get_per_token_logps_and_entropies"] == trl_logps_calls
    assert ours.trl_calls["shared"] > trl_logps_calls  # the other passes (reference, and the loss's) ran ours
    assert len(our_steps) == len(their_steps) == 2
    for mine, trls in zip(our_steps, their_steps, strict=True):
        for key in COMPARED:
            assert mine[key] == close(trls[key], abs=1e-7, rel=1e-4), (key, mine["step"])
    assert their_steps[0]["grad_norm"] > 0.1  # a real gradient, not rounding noise around zero
    assert their_steps[-1]["kl"] > 0  # the second step's policy has moved from the reference
    for (name, mine), (_, trls) in zip(ours.model.named_parameters(), theirs.model.named_parameters(), strict=True):
        assert torch.allclose(mine, trls, **tensor_tolerance(1e-5, 1e-4)), name


def test_the_pin_verdict_says_whether_the_newest_trl_may_enter_the_pin():
    """``make test-latest``'s last line, for a release inside the pin and for the next minor passing or failing."""
    pin = "trl>=1.16,<1.17"
    inside = "trl 1.16.2 is inside the pin trl<1.17,>=1.16: the override checks pass on it"
    assert pin_verdict("1.16.2", True, pin) == inside
    assert pin_verdict("1.17.0", True, pin).endswith("the pin trl<1.17,>=1.16 can move its upper bound to <1.18")
    assert pin_verdict("1.17.0", False, pin).endswith("keep the pin trl<1.17,>=1.16")
