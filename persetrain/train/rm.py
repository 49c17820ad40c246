"""Reward models of a person's preferences with TRL's ``RewardTrainer``, in TRL's script pattern.

One parser and one ``main`` serve every way of starting a run::

    persetrain rm --config recipes/rm/<recipe>.yaml [--key value ...]
    python -m persetrain.train.rm --config recipes/rm/<recipe>.yaml [--key value ...]
    accelerate launch --config_file accelerate_configs/<config>.yaml -m persetrain.train.rm --config ...

A reward model is any ``*ForSequenceClassification`` backbone with one output (decoders such as the
embedded SmolLM2, encoders such as the packaged MiniLM). Two dataset shapes are trained, both written by
``persetrain prepare preference``; a user's own rows in TRL's preference layout (``dataset_path`` a file or
folder, or ``dataset_name`` a Hub id) become pairs through the same builder (``persetrain.train.user_rows``):

- **pairs** (``prompt`` / ``chosen`` / ``rejected``): TRL's own path, untouched - Bradley-Terry on each
  pair, the context computed once per pair side.
- **listwise** (``prompt`` / ``options`` / ``gold``): one row per question, every option scored in one
  packed forward (:mod:`persetrain.train.rm_listwise`) where a decoder computes the context once and each
  option attends to it. The loss is ``config.loss``: ``bradley_terry`` (the mean over every (gold,
  distractor) pair, equal to TRL's loss on the pairs dataset) or ``listwise`` (softmax cross-entropy over
  the options, the question's whole ranking in one term).

What this module adds to TRL, and why: precision from the hardware (never bf16 on a CPU), the listwise
path (a question's context is most of its tokens and TRL recomputes it for every pair), a checked backbone
(one line naming the model when it has no sequence-classification head, instead of a traceback from
``from_pretrained``), and the run directory every persetrain trainer writes (resolved config,
``metrics.jsonl``, automatic resume, ``merged/`` after LoRA).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import trl
from datasets import Dataset
from transformers import AutoConfig, AutoModelForSequenceClassification, TrainerCallback
from trl import RewardTrainer, get_peft_config, get_quantization_config

from persetrain.io import InputError
from persetrain.models import load_tokenizer, local_weights_dir
from persetrain.reward_model.batches import ListwiseCollator, option_rewards
from persetrain.train.configs import HardwarePrecision, ModelConfig, RunSwitches, ScriptArguments
from persetrain.train.recipe import RecipeParser
from persetrain.train.rm_listwise import LISTWISE_COLUMNS, person_contrast_loss, ranking_loss, tokenize_listwise
from persetrain.train.runner import RunResult, load_splits, prepare_model_init, run_as_script, run_trainer
from persetrain.train.user_rows import reward_rows

#: Losses of a listwise dataset (a pairs dataset always trains TRL's Bradley-Terry).
LOSSES = ("listwise", "bradley_terry")


@dataclass
class RMConfig(HardwarePrecision, RunSwitches, trl.RewardConfig):
    """TRL's ``RewardConfig`` (all of ``TrainingArguments``) plus the listwise loss and persetrain's switches.

    Re-defaulted: ``bf16`` / ``fp16`` / ``dataloader_pin_memory`` follow the hardware, and
    ``per_device_train_batch_size`` counts *questions* on a listwise dataset (pairs on a pairs dataset).
    """

    activation_checkpointing: bool = field(
        default=False,
        metadata={
            "help": "Recompute activations in the backward pass to save memory (TRL's RewardConfig turns it "
            "on). Off by default: a listwise batch computes each context once only without it, and "
            "on a CPU the recomputation costs a third more time. Paper-scale recipes turn it on."
        },
    )
    loss: str = field(
        default="listwise",
        metadata={
            "help": "Loss on a listwise dataset: 'listwise' (softmax over a question's options) or "
            "'bradley_terry' (mean over every (gold, distractor) pair, TRL's loss).",
            "choices": list(LOSSES),
        },
    )
    person_contrast: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the person-contrast term on a listwise dataset: the gold option must score "
            "higher under its own person than under another row's person with the same request "
            "(persetrain.train.rm_listwise.person_contrast_loss). 0 turns it off; it needs the "
            "'prompt_blind' column."
        },
    )
    contrast_persons: int = field(
        default=1,
        metadata={
            "help": "Other persons the person-contrast term scores each gold option under: a softmax over its own "
            "person and these (same topic first), drawn once per row with the run's seed."
        },
    )

    def __post_init__(self):
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, not {self.loss!r}")
        if self.contrast_persons < 1:
            raise ValueError(f"contrast_persons must be at least 1, not {self.contrast_persons}")
        super().__post_init__()


class ListwiseRewardTrainer(RewardTrainer):
    """``RewardTrainer`` that also trains on listwise rows (a context, its options, the gold one).

    A pairs dataset goes through TRL unchanged. A listwise dataset is tokenized into a context and its
    options (:func:`tokenize_listwise`), batched by :class:`ListwiseCollator`, and scored by one packed
    forward per batch (:func:`option_rewards`); the logged ``accuracy`` is the share of questions whose
    gold option scores highest, and ``margin`` the gold's mean lead over the distractors.
    """

    def __init__(self, *args, train_dataset=None, processing_class=None, **kwargs):
        self.listwise = train_dataset is not None and "options" in train_dataset.column_names
        if self.listwise and kwargs.get("data_collator") is None:
            checkpointing = kwargs["args"].activation_checkpointing
            kwargs["data_collator"] = ListwiseCollator(processing_class, share_context=not checkpointing)
        super().__init__(*args, train_dataset=train_dataset, processing_class=processing_class, **kwargs)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        if not self.listwise:
            return super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        swap_seed = args.seed if args.person_contrast > 0 else None
        return tokenize_listwise(
            dataset, processing_class, args.max_length, dataset_name, swap_seed, args.contrast_persons
        )

    def _set_signature_columns_if_needed(self):
        if not self.listwise:
            return super()._set_signature_columns_if_needed()
        if self._signature_columns is None:
            self._signature_columns = list(LISTWISE_COLUMNS)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if "option_mask" not in inputs:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train" if self.model.training else "eval"
        all_rewards = option_rewards(model, inputs)
        own = ~inputs["swapped"]
        rewards, gold, valid = all_rewards[own], inputs["gold"][own], inputs["option_mask"][own]
        loss = ranking_loss(rewards, gold, valid, self.args.loss)
        if self.args.center_rewards_coefficient is not None:
            loss = loss + self.args.center_rewards_coefficient * (rewards[valid] ** 2).mean()
        if inputs["swapped"].any():
            own_gold = rewards.gather(1, gold[:, None]).squeeze(1)
            swapped_gold = all_rewards[inputs["swapped"], 0].reshape(own_gold.size(0), -1)
            loss = loss + self.args.person_contrast * person_contrast_loss(own_gold, swapped_gold)
            margin = (own_gold[:, None] - swapped_gold).detach().mean()
            person_margin = self.accelerator.gather_for_metrics(margin)
            self._metrics[mode]["person_margin"].append(person_margin.mean().item())
        self._log_listwise_metrics(mode, {**inputs, "gold": gold, "option_mask": valid}, rewards.detach())
        return (loss, {"rewards": rewards}) if return_outputs else loss

    def _log_listwise_metrics(self, mode: str, inputs: dict, rewards: torch.Tensor) -> None:
        """TRL's reward metrics (tokens, reward range, accuracy, margin), per question instead of per pair."""
        gather = self.accelerator.gather_for_metrics
        if mode == "train":
            counted = ("context_mask", "option_attention", "pair_mask")
            tokens = sum(inputs[key].sum() for key in counted if key in inputs)
            self._total_train_tokens += int(gather(tokens).sum())
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        valid = inputs["option_mask"]
        masked = rewards.masked_fill(~valid, float("-inf"))
        gold = rewards.gather(1, inputs["gold"][:, None]).squeeze(1)
        distractors = valid.clone()
        distractors.scatter_(1, inputs["gold"][:, None], False)
        margin = ((gold[:, None] - rewards) * distractors).sum(1) / distractors.sum(1).clamp(min=1)
        values = rewards[valid]
        self._metrics[mode]["min_reward"].append(gather(values.min()).min().item())
        self._metrics[mode]["mean_reward"].append(gather(values.mean()).mean().item())
        self._metrics[mode]["max_reward"].append(gather(values.max()).max().item())
        accuracy = (masked.argmax(1) == inputs["gold"]).float().mean()
        self._metrics[mode]["accuracy"].append(gather(accuracy).mean().item())
        self._metrics[mode]["margin"].append(gather(margin.mean()).mean().item())


def check_backbone(model_name_or_path: str) -> None:
    """Refuse, in one line, a backbone transformers has no sequence-classification head for."""
    location = local_weights_dir(model_name_or_path)
    config = AutoConfig.from_pretrained(location)
    if type(config) not in AutoModelForSequenceClassification._model_mapping:
        raise InputError(
            location,
            f"model_name_or_path: a {config.model_type!r} model has no sequence-"
            "classification head in transformers, so it cannot be a reward model",
        )


def make_parser(prog: str | None = None) -> RecipeParser:
    """The parser of every reward-model entry point (TRL's ``make_parser`` pattern)."""
    return RecipeParser(
        (ScriptArguments, RMConfig, ModelConfig),
        prog=prog or "persetrain rm",
        description="Train a reward model with TRL's RewardTrainer, on pairs or on listwise questions.",
        key_notes={
            "dataset_path": "The reward model reads listwise rows `prompt` / `options` / `gold` (persetrain prepare "
            "preference: <out>/listwise) or TRL's pairs `prompt` / `chosen` / `rejected` (<out>/pairs)."
        },
    )


def build_rm_trainer(
    script_args: ScriptArguments,
    training_args: RMConfig,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
) -> ListwiseRewardTrainer:
    """The trainer a run uses (data loaded, backbone checked); split from :func:`main` for the benchmarks."""
    check_backbone(model_args.model_name_or_path)
    train_dataset, eval_dataset = load_reward_splits(
        script_args, want_eval=training_args.eval_strategy != "no", seed=training_args.seed
    )
    prepare_model_init(training_args, model_args)
    # LoRA on a classifier: PEFT then also trains (and saves) the new score head, which a causal-LM
    # adapter, TRL's ModelConfig default, would leave at its random initialisation.
    if model_args.lora_task_type == "CAUSAL_LM":
        model_args.lora_task_type = "SEQ_CLS"
    return ListwiseRewardTrainer(
        model=str(local_weights_dir(model_args.model_name_or_path)),
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=load_tokenizer(model_args.model_name_or_path),
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
        callbacks=list(callbacks),
    )


#: The column sets a reward dataset may have, and what each is called in an error message.
REWARD_FORMATS: dict[str, tuple[str, ...]] = {
    "listwise (persetrain prepare preference: <out>/listwise)": ("prompt", "options", "gold"),
    "pairs (TRL's preference format: <out>/pairs)": ("chosen", "rejected"),
}


def load_reward_splits(script_args: ScriptArguments, want_eval: bool, seed: int) -> tuple[Dataset, Dataset | None]:
    """The splits (``persetrain.train.runner.load_splits``), each listwise row checked: a reward model learns
    from a question only with at least two options and a gold index among them."""
    splits = load_splits(
        script_args,
        REWARD_FORMATS,
        want_eval,
        seed,
        write_with="persetrain prepare preference --prefeval DIR --out OUT, or give rows in TRL's preference layout",
        keep=("prompt", "prompt_blind", "topic"),
        convert=reward_rows,
    )
    for split, ds in zip((script_args.dataset_train_split, script_args.dataset_test_split), splits, strict=True):
        if ds is None or "options" not in ds.column_names:
            continue
        for i, row in enumerate(ds.select_columns(["options", "gold"])):
            if len(row["options"]) < 2 or not 0 <= row["gold"] < len(row["options"]):
                raise InputError(
                    script_args.dataset_path,
                    f"split '{split}' row {i}: field 'options' needs at least 2 options and 'gold' an index among "
                    f"them (has {len(row['options'])} options, gold {row['gold']})",
                )
    return splits


def main(
    script_args: ScriptArguments,
    training_args: RMConfig,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
) -> RunResult:
    """Train, save the final model and tokenizer, and return where they are."""
    return run_trainer(build_rm_trainer, script_args, training_args, model_args, callbacks)


def run_rm(argv: Sequence[str] | None = None) -> RunResult:
    """Parse ``[--config recipe.yaml] [--key value ...]`` (``sys.argv[1:]`` when None) and train."""
    return main(*make_parser().parse_args_and_config(argv))


if __name__ == "__main__":
    run_as_script(run_rm)
