"""GRPO with TRL's ``GRPOTrainer``: the entry point of every GRPO run, a PARL rubric generator or an RL verdict judge.

``persetrain grpo --config recipes/parl/<recipe>.yaml [--key value ...]``, ``python -m persetrain.train.grpo``
and ``accelerate launch -m persetrain.train.grpo`` all go through :func:`make_parser` and :func:`main`, as TRL's
own ``trl/scripts/grpo.py`` does. ``--backend verl`` writes the equivalent verl config instead
(``persetrain.train.verl``).

The dataset is a user's preference rows in TRL's layout, written as the judge's verdict rows of ``persetrain
prepare verdict`` (``persetrain.train.user_rows``), or a prepared dataset, such as the rubric-induction dataset of
``persetrain prepare parl``: a conversational ``prompt`` (the
induction prompt for one user) plus the columns the reward reads (the user's history, target text and
negatives). TRL hands every column to the reward functions, which score each sampled rubric set with a judge
engine (``hf`` in-process, or ``openai`` against vLLM / ``persetrain serve``).

What this module adds to TRL, and why:

- **Precision from the hardware** (:class:`GRPOConfig`): TRL defaults to bf16, >10x slower than fp32 on a
  CPU without bf16 units.
- **A reward judge and named rewards** (``reward_funcs: [parl-a]``, :class:`persetrain.train.configs.RewardArguments`,
  a fourth argument dataclass next to TRL's three): the PARL reward needs an LLM judge that TRL knows nothing
  about; the judge is any persetrain engine spec (``reward_judge_*``), and the names are
  ``persetrain.rewards.registry``'s.
- **Unconstrained rollouts**: structured output during rollouts is refused, because the loss needs the
  log-probabilities of the tokens the policy itself would sample.
- **Each prompt computed once per batch** in the rollouts and the log-prob passes (policy, reference, old
  policy), not once per rollout: the prompt is most of each row. A rollout leaves the decoding batch when it
  ends, instead of being decoded on until the group's longest one ends. That trainer has nothing of PARL's
  in it: :class:`persetrain.train.grpo_trainer.SharedPromptGRPOTrainer`.
- **Per-sample reward parts** in ``<output_dir>/reward_parts.jsonl`` and the reward's wall time next to
  each step's in the metrics: what PARL training is judged by. :func:`reward_curve` reads a run's per-step
  reward, valid share and mean margin D back from the two files.
- **Rows shaped for TRL's batches** (:mod:`persetrain.train.grpo_rows`): overlong prompts dropped with their item,
  prefixed prompts rendered as the engine renders them, a verdict judge's item layout checked before any step.
- **The same run directory as** ``persetrain sft``: resolved config, ``metrics.jsonl``, automatic resume, and
  a final model that ``persetrain.models.load_model`` loads (``merged/`` after LoRA).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trl
from transformers import TrainerCallback
from trl import GRPOTrainer, get_peft_config, get_quantization_config

from persetrain.console import console
from persetrain.io import InputError, read_step_log
from persetrain.models import load_tokenizer, local_weights_dir
from persetrain.rewards.parl_trl import REWARD_PARTS_FILE
from persetrain.rewards.registry import build_rewards
from persetrain.rewards.verdict import VERDICT_REWARDS
from persetrain.train.callbacks import COLLAPSE_ACTIONS, CheckpointChoice, CollapseCallback, ValidationCallback
from persetrain.train.configs import (
    RENAMED_REWARD_KEYS,
    HardwarePrecision,
    ModelConfig,
    RewardArguments,
    RunSwitches,
    ScriptArguments,
)
from persetrain.train.grpo_rows import check_item_layout, drop_overlong_prompts, render_prefixed_prompts
from persetrain.train.grpo_trainer import GRPO_TRAINER
from persetrain.train.item_advantages import ADVANTAGE_GROUPS, with_item_advantages
from persetrain.train.recipe import RecipeError, RecipeParser
from persetrain.train.runner import METRICS_FILE, RunResult, load_splits, prepare_model_init, run_as_script, run_trainer
from persetrain.train.user_rows import verdict_view

#: What a run returns: the same record as ``persetrain sft``'s.
GRPOResult = RunResult


@dataclass
class GRPOConfig(HardwarePrecision, RunSwitches, trl.GRPOConfig):
    """TRL's ``GRPOConfig`` (all of ``TrainingArguments``) plus prompt filtering, the verl export, the collapse watch
    and checkpoint validation; the rewards are :class:`persetrain.train.configs.RewardArguments`.

    Re-defaulted: ``bf16`` / ``fp16`` / ``dataloader_pin_memory`` follow the hardware
    (``persetrain.train.configs.HardwarePrecision``; never bf16 on a CPU) instead of TRL's ``bf16=True``.
    The paper's objective (docs/methods.md, PARL) is ``loss_type: grpo`` with ``beta: 0.001``: TRL's KL term is
    the k3 estimator exp(ref - logp) - (ref - logp) - 1, which is verl's ``low_var_kl`` without its clamp
    to [-10, 10]. A ``num_generations`` that does not divide the generation batch is an error naming the
    keys that make up that batch.
    """

    max_prompt_length: int | None = field(
        default=None,
        metadata={
            "help": "Drop training prompts longer than this many tokens (verl's filter_overlong_prompts; "
            "TRL itself never truncates a prompt). The paper: 10240."
        },
    )
    verl_train_files: str | None = field(
        default=None,
        metadata={"help": "The verl backend's training data: the parquet file `persetrain prepare parl` exports."},
    )
    collapse_action: str = field(
        default="warn",
        metadata={
            "help": "What a collapse does (collapse_window logged steps in which, on average, at least "
            "collapse_equal_share of the groups had equal rewards): warn (logged, training goes on), stop (training "
            "stops), rollback (training stops and ends with the last checkpoint saved before the window began). "
            "Always written to metrics.jsonl (event: collapse) and the console, once.",
            "choices": list(COLLAPSE_ACTIONS),
        },
    )
    advantage_group: str = field(
        default="prompt",
        metadata={
            "help": "Over which rollouts a rollout's baseline is taken: prompt (TRL's: the prompt's num_generations) "
            "or item (every rollout of the rows sharing its item_id, a question's candidates: a judge that answers one "
            "verdict for every candidate still gets a gradient; persetrain.train.item_advantages).",
            "choices": list(ADVANTAGE_GROUPS),
        },
    )
    collapse_window: int = field(default=20, metadata={"help": "Logged steps a collapse is judged over."})
    collapse_equal_share: float = field(
        default=0.95,
        metadata={"help": "Mean share of groups with equal rewards (TRL's frac_reward_zero_std) that is a collapse."},
    )
    validation_evaluator: str | None = field(
        default=None,
        metadata={
            "help": "Judge every saved checkpoint with this evaluator (verifier, mcq-letter: the one that will read "
            "the judge) on validation_data, log validation/accuracy to metrics.jsonl and end the run with the best "
            "checkpoint saved before any collapse. Default: off."
        },
    )
    validation_data: str | None = field(
        default=None,
        metadata={
            "help": "The questions validation_evaluator judges (any dataset persetrain evaluate reads); default "
            "<dataset_path>/questions, the validation topics' questions `persetrain prepare verdict` writes."
        },
    )
    validation_split: str = field(default="validation", metadata={"help": "The split of validation_data judged."})
    validation_max_examples: int | None = field(
        default=None, metadata={"help": "Judge a seeded sample of this many validation questions (default: all)."}
    )
    end_with_chosen_checkpoint: bool = field(
        default=True,
        metadata={
            "help": "End the run with the checkpoint validation (or a collapse's rollback) chose, instead of the "
            "last step's weights."
        },
    )

    def __post_init__(self):
        try:
            super().__post_init__()
        except ValueError:
            # TRL sets the generation batch before it checks it; name the keys that make it up.
            batch = self.generation_batch_size
            if batch and batch % self.num_generations:
                raise ValueError(
                    f"num_generations ({self.num_generations}) must divide the generation batch ({batch} "
                    f"completions = per_device_train_batch_size {self.per_device_train_batch_size} x "
                    f"{self.world_size} process(es) x steps_per_generation {self.steps_per_generation}); "
                    "change num_generations, per_device_train_batch_size, gradient_accumulation_steps or "
                    "generation_batch_size"
                ) from None
            raise
        if self.advantage_group == "item" and self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError(
                "advantage_group: item takes the baseline of the summed rewards; it needs multi_objective_aggregation: "
                f"sum_then_normalize, not {self.multi_objective_aggregation}"
            )
        if self.vllm_structured_outputs_regex is not None:
            raise ValueError(
                "vllm_structured_outputs_regex: rollouts must be sampled unconstrained, so that the loss sees the "
                "log-probabilities of the policy's own tokens; structured output is for inference only"
            )


def make_parser(prog: str | None = None) -> RecipeParser:
    """The parser of every GRPO entry point (TRL's ``make_parser`` pattern)."""
    return RecipeParser(
        (ScriptArguments, GRPOConfig, ModelConfig, RewardArguments),
        prog=prog or "persetrain grpo",
        description="Train a rubric generator (PARL) or a verdict judge with TRL's GRPOTrainer.",
        key_notes={
            "dataset_path": "GRPO reads a conversational `prompt` and hands every other column to the reward "
            "functions (persetrain prepare parl: the user's history, text and negatives; persetrain prepare verdict)."
        },
        renamed_keys=RENAMED_REWARD_KEYS,
    )


# ------------------------------------------------------------------------------------------- rewards
def _reward_judge(reward_args: RewardArguments, training_args: GRPOConfig):
    """The engine of ``reward_judge_*``, with a request cache under the output directory (one file per process)."""
    from persetrain.engine import load_engine

    if reward_args.reward_judge_backend == "openai" and not reward_args.reward_judge_base_url:
        raise RecipeError("reward_judge_base_url is required with reward_judge_backend: openai")
    cache = Path(reward_args.reward_judge_cache or Path(training_args.output_dir) / "judge-cache.sqlite")
    if training_args.world_size > 1:
        # One file per process: SQLite's WAL mode needs every process that opens a database on one host, and the
        # ranks of a multi-node run share the output directory over a network filesystem.
        cache = cache.with_name(f"{cache.stem}.rank{training_args.process_index}{cache.suffix}")
    return load_engine(
        reward_args.reward_judge_model,
        backend=reward_args.reward_judge_backend,
        cache_path=cache,
        base_url=reward_args.reward_judge_base_url,
    )


def build_reward_funcs(reward_args: RewardArguments, training_args: GRPOConfig) -> list[Callable]:
    """The recipe's ``reward_funcs`` as TRL reward functions (``persetrain.rewards.registry``); one reward judge
    serves them all, loaded only when one of them scores with it."""
    try:
        funcs = build_rewards(
            reward_args.reward_funcs, lambda: _reward_judge(reward_args, training_args), Path(training_args.output_dir)
        )
    except ValueError as err:  # a dotted path that does not import
        raise RecipeError(str(err)) from None
    if not funcs:
        raise RecipeError("reward_funcs is empty: GRPO needs at least one reward function")
    return funcs


# ------------------------------------------------------------------------------------------- trainer
def guard_callbacks(script_args: ScriptArguments, training_args: GRPOConfig) -> list[TrainerCallback]:
    """The collapse watch and, with ``validation_evaluator``, each checkpoint judged on held-out questions
    (``persetrain.train.callbacks``); both choose the checkpoint the run ends with."""
    choice = CheckpointChoice()
    found: list[TrainerCallback] = [
        CollapseCallback(
            choice, training_args.collapse_window, training_args.collapse_equal_share, training_args.collapse_action
        )
    ]
    if training_args.validation_evaluator:
        from data_prep.verdict.prepare import QUESTIONS_DIR
        from persetrain.evaluators.registry import registered

        if training_args.validation_evaluator not in registered():
            raise RecipeError(
                f"validation_evaluator: unknown evaluator {training_args.validation_evaluator!r}; expected one of "
                f"{', '.join(registered())}"
            )
        if training_args.save_strategy == "no":
            console.print(
                "[yellow]validation_evaluator judges each saved checkpoint, and save_strategy is no: nothing is "
                "validated[/yellow]"
            )
            return found
        data = training_args.validation_data or str(Path(script_args.dataset_path) / QUESTIONS_DIR)
        if not Path(data).exists():
            raise InputError(
                data,
                "no validation questions (recipe key / flag 'validation_data'); `persetrain prepare verdict` writes "
                "the validation topics' questions to <dataset>/questions when its source has them",
            )
        found.append(
            ValidationCallback(
                choice,
                training_args.validation_evaluator,
                data,
                training_args.validation_split,
                training_args.validation_max_examples,
            )
        )
    return found


def build_grpo_trainer(
    script_args: ScriptArguments,
    training_args: GRPOConfig,
    model_args: ModelConfig,
    reward_args: RewardArguments,
    callbacks: Sequence[TrainerCallback] = (),
) -> GRPOTrainer:
    """The trainer a run uses (data, rewards, policy and tokenizer resolved); benchmarks time exactly this."""
    tokenizer = load_tokenizer(model_args.model_name_or_path)
    # Every column goes to the reward; the evaluation split, when eval is on, is scored as TRL scores it.
    train_split, eval_split = load_splits(
        script_args,
        {"a conversational prompt": ("prompt",)},
        want_eval=training_args.eval_strategy != "no",
        seed=training_args.seed,
        write_with="persetrain prepare parl or persetrain prepare verdict",
        keep=None,
        convert=lambda rows, split, person: verdict_view(rows, split, person, training_args.seed),
    )
    judged = [name for name in reward_args.reward_funcs if name in VERDICT_REWARDS]
    if judged:
        from persetrain.rewards.verdict import check_verdict_rows

        for split in filter(None, (train_split, eval_split)):
            check_verdict_rows(split, script_args.dataset_path, judged)
    train_dataset = render_prefixed_prompts(
        drop_overlong_prompts(train_split, tokenizer, training_args.max_prompt_length), tokenizer
    )
    if "verdict-consistent" in reward_args.reward_funcs:
        check_item_layout(train_dataset, script_args.dataset_path, training_args)
    trainer_class = GRPO_TRAINER
    if training_args.advantage_group == "item":
        check_item_layout(train_dataset, script_args.dataset_path, training_args, "advantage_group: item")
        trainer_class = with_item_advantages(GRPO_TRAINER)
    eval_dataset = (
        None
        if eval_split is None
        else render_prefixed_prompts(
            drop_overlong_prompts(eval_split, tokenizer, training_args.max_prompt_length), tokenizer
        )
    )
    reward_funcs = build_reward_funcs(reward_args, training_args)
    callbacks = [*callbacks, *guard_callbacks(script_args, training_args)]
    prepare_model_init(training_args, model_args)
    quantization = get_quantization_config(model_args)
    if quantization is not None:
        training_args.model_init_kwargs.setdefault("quantization_config", quantization)
    return trainer_class(
        model=str(local_weights_dir(model_args.model_name_or_path)),
        reward_funcs=reward_funcs,
        args=training_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        callbacks=list(callbacks),
    )


def main(
    script_args: ScriptArguments,
    training_args: GRPOConfig,
    model_args: ModelConfig,
    reward_args: RewardArguments,
    callbacks: Sequence[TrainerCallback] = (),
) -> GRPOResult:
    """Train, save the final model and tokenizer, and return where they are (as ``persetrain sft`` does)."""
    return run_trainer(
        lambda script, training, model, found: build_grpo_trainer(script, training, model, reward_args, found),
        script_args,
        training_args,
        model_args,
        callbacks,
        step_logs=[REWARD_PARTS_FILE],
        more_args={"rewards": reward_args},
    )


def run_grpo(argv: Sequence[str] | None = None) -> GRPOResult:
    """Parse ``[--config recipe.yaml] [--key value ...]`` (``sys.argv[1:]`` when None) and train."""
    return main(*make_parser().parse_args_and_config(argv))


def reward_curve(output_dir: Path) -> list[dict]:
    """Per logged step of a PARL run: ``step``, mean ``reward``, ``valid_share`` and ``mean_d``.

    TRL logs the mean reward and the valid share per step, but D is per rollout (``reward_parts.jsonl``, each row
    with its step); "does D rise over training" needs its mean per step over the rollouts that have one (None: no
    rollout had). Resume trims both files to the checkpoint, so a resumed run's curve has each step once.
    """
    d_by_step: dict[int, list[float]] = {}
    for row in read_step_log(output_dir / REWARD_PARTS_FILE):
        if row.get("d") is not None:
            d_by_step.setdefault(row["step"], []).append(row["d"])
    logs = [r for r in read_step_log(output_dir / METRICS_FILE) if r.get("event") == "log" and "parl/valid_share" in r]
    return [
        {
            "step": r["step"],
            "reward": r.get("reward"),
            "valid_share": r["parl/valid_share"],
            "mean_d": (sum(d_by_step[r["step"]]) / len(d_by_step[r["step"]])) if d_by_step.get(r["step"]) else None,
        }
        for r in logs
    ]


if __name__ == "__main__":  # `accelerate launch -m persetrain.train.grpo --config RECIPE`
    run_as_script(run_grpo)
