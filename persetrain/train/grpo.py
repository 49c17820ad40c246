"""GRPO of a rubric generator (PARL) with TRL's ``GRPOTrainer``.

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
- **A judge engine and named rewards** (``reward_funcs: [parl-a]``): the PARL reward needs an LLM judge that
  TRL knows nothing about; the judge is any persetrain engine spec.
- **Unconstrained rollouts**: structured output during rollouts is refused, because the loss needs the
  log-probabilities of the tokens the policy itself would sample.
- **Each prompt computed once per batch** in the rollouts and the log-prob passes (policy, reference, old
  policy), not once per rollout: the prompt is most of each row. A rollout leaves the decoding batch when it
  ends, instead of being decoded on until the group's longest one ends. That trainer has nothing of PARL's
  in it: :class:`persetrain.train.grpo_trainer.SharedPromptGRPOTrainer`.
- **Per-sample reward parts** in ``<output_dir>/reward_parts.jsonl`` and the reward's wall time next to
  each step's in the metrics: what PARL training is judged by. :func:`reward_curve` reads a run's per-step
  reward, valid share and mean margin D back from the two files.
- **The same run directory as** ``persetrain sft``: resolved config, ``metrics.jsonl``, automatic resume, and
  a final model that ``persetrain.models.load_model`` loads (``merged/`` after LoRA).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import trl
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOTrainer, get_peft_config, get_quantization_config

from persetrain.console import console
from persetrain.io import InputError, read_step_log
from persetrain.models import DEFAULT_MODEL, load_tokenizer, local_weights_dir
from persetrain.train.callbacks import COLLAPSE_ACTIONS, CheckpointChoice, CollapseCallback, ValidationCallback
from persetrain.train.configs import HardwarePrecision, ModelConfig, RunSwitches, ScriptArguments
from persetrain.train.grpo_trainer import GRPO_TRAINER
from persetrain.train.recipe import RecipeError, RecipeParser
from persetrain.train.runner import (
    METRICS_FILE,
    RunResult,
    item_rows,
    load_splits,
    prepare_model_init,
    run_as_script,
    run_trainer,
)
from persetrain.train.user_rows import judge_view

REWARD_PARTS_FILE = "reward_parts.jsonl"
#: Named reward functions (``reward_funcs`` in a recipe); anything else must be a dotted import path.
PARL_REWARDS = ("parl-a", "parl-b", "parl-0", "parl-a-linear")
#: A judge's own verdicts against the gold (``persetrain.rewards.verdict``; data of ``persetrain prepare verdict``).
VERDICT_REWARD_NAMES = ("verdict-correct", "verdict-format", "verdict-consistent")
NAMED_REWARDS = (*PARL_REWARDS, "perse", *VERDICT_REWARD_NAMES)

#: What a run returns: the same record as ``persetrain sft``'s.
GRPOResult = RunResult


@dataclass
class GRPOConfig(HardwarePrecision, RunSwitches, trl.GRPOConfig):
    """TRL's ``GRPOConfig`` (all of ``TrainingArguments``) plus the reward functions and their judge.

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
    reward_funcs: list[str] = field(
        default_factory=lambda: ["parl-a"],
        metadata={
            "help": "Reward functions, summed with reward_weights: parl-a, parl-b, parl-0, parl-a-linear "
            "(the PARL reward variants), perse (a PerSE judge's expected score), verdict-correct, verdict-format, "
            "verdict-consistent (a judge's own verdicts; persetrain prepare verdict), or a dotted import path to a TRL "
            "reward function."
        },
    )
    judge_model: str = field(
        default=DEFAULT_MODEL,
        metadata={"help": "Engine model spec of the judge (for the openai backend: the served model name)."},
    )
    judge_backend: str = field(default="hf", metadata={"help": "Judge engine backend.", "choices": ["hf", "openai"]})
    judge_base_url: str | None = field(
        default=None, metadata={"help": "Server URL for judge_backend openai, e.g. http://127.0.0.1:8000/v1."}
    )
    judge_cache: str | None = field(
        default=None,
        metadata={
            "help": "SQLite request cache of the judge; default <output_dir>/judge-cache.sqlite, so that a "
            "resumed run re-scores nothing it already scored. With several processes, one file each: NAME.rankK.sqlite."
        },
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
        unknown = [name for name in self.reward_funcs if name not in NAMED_REWARDS and "." not in name]
        if unknown:
            raise ValueError(
                f"reward_funcs: unknown reward '{unknown[0]}'; expected one of {', '.join(NAMED_REWARDS)} or a dotted "
                "import path"
            )
        if self.vllm_structured_outputs_regex is not None:
            raise ValueError(
                "vllm_structured_outputs_regex: rollouts must be sampled unconstrained, so that the loss sees the "
                "log-probabilities of the policy's own tokens; structured output is for inference only"
            )


def make_parser(prog: str | None = None) -> RecipeParser:
    """The parser of every GRPO entry point (TRL's ``make_parser`` pattern)."""
    return RecipeParser(
        (ScriptArguments, GRPOConfig, ModelConfig),
        prog=prog or "persetrain grpo",
        description="Train a rubric generator (PARL) or a verdict judge with TRL's GRPOTrainer.",
        key_notes={
            "dataset_path": "GRPO reads a conversational `prompt` and hands every other column to the reward "
            "functions (persetrain prepare parl: the user's history, text and negatives; persetrain prepare verdict)."
        },
    )


# ------------------------------------------------------------------------------------------- rewards
def _judge_engine(config: GRPOConfig):
    from persetrain.engine import load_engine

    if config.judge_backend == "openai" and not config.judge_base_url:
        raise RecipeError("judge_base_url is required with judge_backend: openai")
    cache = Path(config.judge_cache or Path(config.output_dir) / "judge-cache.sqlite")
    if config.world_size > 1:
        # One file per process: SQLite's WAL mode needs every process that opens a database on one host, and the
        # ranks of a multi-node run share the output directory over a network filesystem.
        cache = cache.with_name(f"{cache.stem}.rank{config.process_index}{cache.suffix}")
    return load_engine(
        config.judge_model, backend=config.judge_backend, cache_path=cache, base_url=config.judge_base_url
    )


def build_reward_funcs(config: GRPOConfig) -> list[Callable]:
    """The recipe's ``reward_funcs`` as TRL reward functions; one judge engine serves them all.

    A PARL reward appends every sample's reward parts to ``<output_dir>/reward_parts.jsonl`` (one line per
    completion, in scoring order), so an interrupted run keeps them.
    """
    engine = None
    funcs: list[Callable] = []
    for name in config.reward_funcs:
        if name in PARL_REWARDS:
            from persetrain.rewards.parl import RewardConfig
            from persetrain.rewards.parl_trl import PARLReward

            engine = engine or _judge_engine(config)
            funcs.append(
                PARLReward(engine, RewardConfig(variant=name), parts_path=Path(config.output_dir) / REWARD_PARTS_FILE)
            )
        elif name in VERDICT_REWARD_NAMES:
            from persetrain.rewards.verdict import VERDICT_REWARDS

            funcs.append(VERDICT_REWARDS[name])
        elif name == "perse":
            from persetrain.rewards.perse import PerSEReward

            engine = engine or _judge_engine(config)
            funcs.append(PerSEReward(engine))
        else:  # a dotted import path: GRPOConfig refuses any other name
            module, attr = name.rsplit(".", 1)
            try:
                funcs.append(getattr(importlib.import_module(module), attr))
            except (ImportError, AttributeError) as err:
                raise RecipeError(f"reward_funcs: cannot import '{name}' ({err})") from None
    if not funcs:
        raise RecipeError("reward_funcs is empty: GRPO needs at least one reward function")
    return funcs


# ------------------------------------------------------------------------------------------- trainer
def _drop_overlong_prompts(ds: Dataset, tokenizer, max_prompt_length: int | None) -> Dataset:
    """Keep the rows whose chat-formatted prompt fits ``max_prompt_length`` tokens; say how many were dropped.

    A judge item's variants (``item_id``: a question's orders, or its yes / no candidates, which differ in length)
    go together: a variant dropped alone would leave its item split and every later item shifted against the
    batch edges that ``verdict-consistent`` relies on (:func:`check_item_layout`)."""
    if max_prompt_length is None:
        return ds
    encoded = [
        tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)
        for p in ds["prompt"]
    ]
    lengths = [len(e["input_ids"]) for e in encoded]
    items = ds["item_id"] if "item_id" in ds.column_names else list(range(len(ds)))
    overlong = {items[i] for i, n in enumerate(lengths) if n > max_prompt_length}
    keep = [i for i, item in enumerate(items) if item not in overlong]
    if len(keep) < len(ds):
        with_items = " (with the other variants of their items)" if "item_id" in ds.column_names else ""
        console.print(
            f"dropped {len(ds) - len(keep)} of {len(ds)} prompts longer than max_prompt_length "
            f"{max_prompt_length} tokens{with_items} (longest: {max(lengths)})"
        )
    if not keep:
        raise RecipeError(f"max_prompt_length: every prompt is longer than {max_prompt_length} tokens")
    return ds.select(keep)


def check_item_layout(ds: Dataset, path: str | Path, args: GRPOConfig) -> None:
    """Refuse, before any step, a ``verdict-consistent`` run whose batches would split an item's variants.

    The reward compares an item's variants within the batch one process scores (``persetrain.rewards.verdict``), and
    TRL hands each process, each generation, the next ``per_device_train_batch_size`` x ``steps_per_generation``
    completions of the unshuffled prompt stream, each prompt ``num_generations`` times in a row (measured on two
    ranks, ``tests/test_distributed.py``). So the variants of every item must be adjacent and complete, the data
    unshuffled, and that batch a multiple of an item's variants x ``num_generations``. A split item would be paid by
    its verdict alone, silently (``verdict/split_item_share`` shows it during training); with items of several sizes
    no batch keeps every item whole, which is said.
    """
    if args.shuffle_dataset:
        raise RecipeError(
            "verdict-consistent compares an item's orders within one batch: set shuffle_dataset: false (a shuffled "
            "sampler scatters them)"
        )
    ids = ds["id"] if "id" in ds.column_names else [f"row {i}" for i in range(len(ds))]
    items = ds["item_id"]
    rows = item_rows(items)
    apart = [b for indices in rows.values() for a, b in pairwise(indices) if b != a + 1]
    if apart:
        first = min(apart)
        raise InputError(
            path,
            f"the rows of item {items[first]!r} are not adjacent; verdict-consistent needs an item's variants next to "
            "each other, as `persetrain prepare verdict` writes them",
            ids[first],
            "item_id",
        )
    if "n_orders" in ds.column_names:
        for row_id, item, n in zip(ids, items, ds["n_orders"], strict=True):
            if len(rows[item]) != n:
                raise InputError(
                    path,
                    f"item {item!r} has {len(rows[item])} of its {n} variants here; verdict-consistent needs them all, "
                    "as `persetrain prepare verdict` writes them",
                    row_id,
                    "n_orders",
                )
    distinct = sorted({len(indices) for indices in rows.values()})
    if len(distinct) > 1:
        console.print(
            f"[yellow]verdict-consistent: items have {', '.join(map(str, distinct))} variants, so some will be split "
            "at batch edges and paid by their verdict alone (verdict/split_item_share)[/yellow]"
        )
        return
    whole = distinct[0] * args.num_generations
    per_process = args.generation_batch_size // args.world_size
    if per_process % whole:
        raise RecipeError(
            f"verdict-consistent: each process scores per_device_train_batch_size {args.per_device_train_batch_size} x "
            f"steps_per_generation {args.steps_per_generation} = {per_process} completions at a time, which must be a "
            f"multiple of an item's {distinct[0]} variants x num_generations {args.num_generations} = {whole}"
        )


def render_prefixed_prompts(ds: Dataset, tokenizer) -> Dataset:
    """Prompts that end with an assistant prefix (``mcq-letter``'s ``Answer: ``) as the text the engine renders.

    TRL renders every conversational prompt with a fresh generation prompt after its last message, so a prefix
    given as a last assistant message would be closed as a turn of its own, and the policy trained after tokens
    no evaluator shows it. Rendered here by the engine's own function (``render_prompt``), TRL takes the prompt
    as text and tokenizes it as it is. The prefix's trailing whitespace is left to the completion: a BPE tokenizer
    joins it to the next word (``Answer: A`` is ``Answer``, ``:``, `` A``), so the engine reads a choice after the
    prefix without it, and a policy trained after a lone space token would learn a verdict in a context no
    evaluator reads (the parser strips the space again). A chat template that writes a BOS token the tokenizer
    adds again loses its own.
    """
    from persetrain.engine.hf.backend import render_prompt
    from persetrain.prompts.judge import request_of

    if not ds.num_rows or not any(isinstance(p, list) and p and p[-1]["role"] == "assistant" for p in ds["prompt"]):
        return ds
    bos = tokenizer.bos_token
    adds_bos = bos is not None and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]

    def render(row: dict) -> dict:
        request = request_of(row["prompt"])
        text = render_prompt(
            tokenizer, request.model_copy(update={"assistant_prefix": request.assistant_prefix.rstrip()})
        )
        return {"prompt": text[len(bos) :] if adds_bos and text.startswith(bos) else text}

    return ds.map(render, desc="render prefixed prompts")


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
        from data_prep.judge.prepare import QUESTIONS_DIR
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
        convert=lambda rows, split, person: judge_view(rows, split, person, training_args.seed),
    )
    judged = [name for name in training_args.reward_funcs if name in VERDICT_REWARD_NAMES]
    if judged:
        from persetrain.rewards.verdict import check_verdict_rows

        for split in filter(None, (train_split, eval_split)):
            check_verdict_rows(split, script_args.dataset_path, judged)
    train_dataset = render_prefixed_prompts(
        _drop_overlong_prompts(train_split, tokenizer, training_args.max_prompt_length), tokenizer
    )
    if "verdict-consistent" in training_args.reward_funcs:
        check_item_layout(train_dataset, script_args.dataset_path, training_args)
    eval_dataset = (
        None
        if eval_split is None
        else render_prefixed_prompts(
            _drop_overlong_prompts(eval_split, tokenizer, training_args.max_prompt_length), tokenizer
        )
    )
    reward_funcs = build_reward_funcs(training_args)
    callbacks = [*callbacks, *guard_callbacks(script_args, training_args)]
    prepare_model_init(training_args, model_args)
    quantization = get_quantization_config(model_args)
    if quantization is not None:
        training_args.model_init_kwargs.setdefault("quantization_config", quantization)
    return GRPO_TRAINER(
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
    callbacks: Sequence[TrainerCallback] = (),
) -> GRPOResult:
    """Train, save the final model and tokenizer, and return where they are (as ``persetrain sft`` does)."""
    return run_trainer(
        build_grpo_trainer, script_args, training_args, model_args, callbacks, step_logs=[REWARD_PARTS_FILE]
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
