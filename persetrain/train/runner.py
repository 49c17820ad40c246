"""What every persetrain trainer shares, written once: data loading, resume, the run directory, the result.

``persetrain sft``, ``persetrain rm`` and ``persetrain grpo`` each build their own TRL trainer and hand it
to :func:`run_trainer`, which resumes from the newest complete checkpoint, records the resolved
configuration and the environment, logs every record to ``metrics.jsonl``, checkpoints and stops on
SIGTERM / SIGUSR1, saves the final model (and a merged copy after LoRA) and returns a :class:`RunResult`.
:func:`load_splits` reads a prepared dataset in the formats a trainer accepts, with errors that name the
directory, the split and the missing columns.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback
from transformers.integrations.deepspeed import unset_hf_deepspeed_config

from persetrain.adapters import merge_adapter
from persetrain.console import console
from persetrain.environment import environment
from persetrain.io import InputError, atomic_dir, trim_step_log, write_json
from persetrain.models import RESOLVED_CONFIG_FILE, TRAINER_STATE
from persetrain.rows import Rows, load_rows, plain_notice
from persetrain.signals import die_with_parent, exit_code
from persetrain.train.checkpoints import check_world_size, last_complete_checkpoint
from persetrain.train.configs import ModelConfig, ScriptArguments, resolve_dtype
from persetrain.train.recipe import RecipeError
from persetrain.train.signals import CheckpointOnSignal
from persetrain.train.stopped import TrainingStopped
from persetrain.train.watchdog import HangWatchdog

METRICS_FILE = "metrics.jsonl"
#: What ``persetrain prepare`` writes beside a dataset it made: such a folder is read as it is.
BUILD_INFO = "build_info.json"
MERGED_DIR = "merged"


#: How a trainer turns a user's rows (anything but a folder ``persetrain prepare`` wrote) into its own rows:
#: ``convert(rows, split, person_column)`` (``persetrain.train.user_rows``).
Convert = Callable[[Rows, str, str | None], Dataset]


def load_splits(
    script_args: ScriptArguments,
    formats: dict[str, tuple[str, ...]],
    want_eval: bool,
    seed: int,
    write_with: str,
    keep: Sequence[str] | None = (),
    convert: Convert | None = None,
) -> tuple[Dataset, Dataset | None]:
    """The train (and, when evaluating, test) split of the run's dataset in one of ``formats``.

    The dataset is ``dataset_path`` (a folder ``persetrain prepare`` wrote, a saved ``datasets`` folder, a
    JSON-lines / CSV / Parquet file or a folder of split files) or ``dataset_name`` (a Hub id, with
    ``dataset_config``), read by ``persetrain.rows.load_rows``. Rows of anything but a prepared folder
    (``build_info.json``) go through ``convert`` first: a user's preference rows become the trainer's own rows.
    ``formats`` maps a format's name to the columns it needs; a split must hold one of them. Only those
    columns and the ``keep`` columns stay (``keep=None`` keeps every column: GRPO hands them all to the
    reward). ``write_with`` is the command that writes the dataset, for the message when it is missing. A
    row limit takes a seeded random subset, not the first rows: prepared splits are grouped by person,
    and the first N rows would hold only a few persons; of a judge dataset, whole items (:func:`whole_items`).
    """
    source = script_args.dataset_path or script_args.dataset_name
    if source is None:
        raise RecipeError(
            "no dataset: set dataset_path (a file or folder) or dataset_name (a Hub id) in the recipe, or pass "
            "--dataset_path PATH / --dataset_name ID"
        )
    if script_args.dataset_streaming:
        raise RecipeError("dataset_streaming: persetrain's trainers read whole splits; set it to false")
    path = Path(source)
    if script_args.dataset_path is not None and not path.exists():
        raise InputError(
            path, f"no such dataset file or directory (recipe key / flag 'dataset_path'); write it with: {write_with}"
        )
    prepared = (path / BUILD_INFO).is_file()

    def pick(split: str, limit: int | None) -> Dataset:
        rows = load_rows(source, split, script_args.dataset_config)
        where = Path(rows.where)
        ds = rows.data
        if convert is not None and not prepared:
            note = plain_notice(rows, script_args.person_column) if split == script_args.dataset_train_split else None
            if note:
                console.print(note)
            ds = convert(rows, split, script_args.person_column)
        columns = next((cols for cols in formats.values() if set(cols) <= set(ds.column_names)), None)
        if columns is None:
            wanted = "; or ".join(f"{name}: {', '.join(cols)}" for name, cols in formats.items())
            raise InputError(
                where, f"split '{split}' lacks the columns of {wanted} (has: {', '.join(ds.column_names)})"
            )
        if len(ds) == 0:
            raise InputError(where, f"split '{split}' has no rows")
        if keep is not None:
            ds = ds.select_columns([c for c in dict.fromkeys((*columns, *keep)) if c in ds.column_names])
        if limit is None or limit >= len(ds):
            return ds
        if "item_id" in ds.column_names:
            return whole_items(ds, limit, seed, where / split)
        return ds.shuffle(seed=seed).select(range(limit))

    train = pick(script_args.dataset_train_split, script_args.max_train_samples)
    evaluation = pick(script_args.dataset_test_split, script_args.max_eval_samples) if want_eval else None
    return train, evaluation


def item_rows(items: Sequence[str]) -> dict[str, list[int]]:
    """Each item's row indices (``items``: a dataset's ``item_id`` column), items in the order they first appear."""
    rows: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        rows.setdefault(item, []).append(i)
    return rows


def whole_items(ds: Dataset, limit: int, seed: int, where: Path) -> Dataset:
    """At most ``limit`` rows of ``ds`` made of whole items (``item_id``), items in a seeded order, each item's rows
    adjacent and in their own order.

    Why: a judge item's variants (a question's orders, or its yes / no candidates) are compared within one batch by
    ``verdict-consistent``, which needs them all and next to each other; rows sampled one by one would scatter them.
    """
    rows = item_rows(ds["item_id"])
    items = list(rows)
    random.Random(seed).shuffle(items)
    picked: list[int] = []
    for item in items:
        if len(picked) + len(rows[item]) > limit:
            break
        picked += rows[item]
    if not picked:
        raise InputError(where, f"a row limit of {limit} is smaller than one item ({len(rows[items[0]])} rows)")
    return ds.select(picked)


def append_record(path: Path, record: dict) -> None:
    """Append one JSON line to a run log (``metrics.jsonl``), flushed at once; other callbacks' events
    (a collapse, a checkpoint's validation) go through here too."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")
        f.flush()


class JsonlMetricsCallback(TrainerCallback):
    """Append every logged record to ``<output_dir>/metrics.jsonl``, flushed at once.

    The log outlives the process: an interrupted run keeps what it logged, and a resumed run appends
    after it (a ``train_begin`` record marks where, with the step it resumed at). Unlike wandb or
    TensorBoard it needs nothing to read: one JSON object per line. A resumed run first trims this log and
    the ``step_logs`` (other per-step JSONL files, such as GRPO's reward parts) back to the checkpoint's
    step, so that the steps the killed run computed after it are not there twice.
    """

    def __init__(self, path: str | os.PathLike, step_logs: Sequence[str | os.PathLike] = ()):
        self.path = Path(path)
        self.step_logs = [Path(p) for p in step_logs]

    def _append(self, record: dict) -> None:
        append_record(self.path, record)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            for log in (self.path, *self.step_logs):
                trim_step_log(log, state.global_step)
            self._append(
                {
                    "event": "train_begin",
                    "step": state.global_step,
                    "max_steps": state.max_steps,
                    "world_size": args.world_size,
                    "time": time.time(),
                }
            )

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            self._append({"event": "log", "step": state.global_step, "epoch": state.epoch, "time": time.time(), **logs})


@dataclass
class RunResult:
    """Where a run put its outputs, and how it ended."""

    output_dir: Path
    model_dir: Path  # what persetrain.models.load_model should be given
    resumed_from: str | None
    global_step: int
    metrics: dict[str, float]
    stopped_by_signal: int | None = None  # the signal that made it checkpoint and stop early

    @property
    def exit_code(self) -> int:
        """0 for a finished run; 128 + signal for one stopped by a signal, as the shell would report it."""
        return 0 if self.stopped_by_signal is None else exit_code(self.stopped_by_signal)

    def trained_model(self) -> Path:
        """``model_dir`` of a finished run, for a pipeline that goes on from it; a stopped run raises
        :class:`TrainingStopped`."""
        if self.stopped_by_signal is not None:
            raise TrainingStopped(self.output_dir, self.stopped_by_signal, self.global_step, self.exit_code)
        return self.model_dir


def run_as_script(run: Callable[[], RunResult]) -> None:
    """What ``python -m persetrain.train.<trainer>`` (and each rank of a launch) exits with: the run's exit code
    (128 + signal when a signal stopped it), or one ``error:`` line for a bad recipe or input, never a traceback."""
    try:
        sys.exit(run().exit_code)
    except (RecipeError, InputError) as err:
        sys.exit(f"error: {err}")


def checkpoint_to_resume(training_args) -> str | None:
    """``resume_from_checkpoint`` when set, else the newest complete checkpoint when ``auto_resume``."""
    if training_args.resume_from_checkpoint:
        return training_args.resume_from_checkpoint
    if training_args.auto_resume:
        return last_complete_checkpoint(training_args.output_dir)
    return None


def prepare_model_init(training_args, model_args: ModelConfig) -> None:
    """What every trainer settles before TRL loads the model: logging, dtype and ``model_init_kwargs``.

    wandb logs offline unless configured (a training node is often offline; ``wandb sync`` uploads
    later). The dtype follows the hardware. TRL loads the model from a path, so that its DeepSpeed /
    device-map handling applies; the user's own ``model_init_kwargs`` win over the derived ones.
    """
    if "wandb" in (training_args.report_to or []):
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_DIR", str(training_args.output_dir))
    model_args.dtype = str(resolve_dtype(model_args.dtype)).removeprefix("torch.")
    if (model_args.load_in_4bit or model_args.load_in_8bit) and not model_args.use_peft:
        raise RecipeError("load_in_4bit/load_in_8bit need use_peft: a quantised base can only train adapters")
    training_args.model_init_kwargs = {
        "dtype": getattr(torch, model_args.dtype),
        "attn_implementation": model_args.attn_implementation,
        "revision": model_args.model_revision,
        "trust_remote_code": training_args.trust_remote_code,
        **(training_args.model_init_kwargs or {}),
    }


def run_trainer(
    build: Callable[..., Any],
    script_args: ScriptArguments,
    training_args,
    model_args: ModelConfig,
    callbacks: Sequence[TrainerCallback] = (),
    step_logs: Sequence[str] = (),
    more_args: Mapping[str, Any] | None = None,
) -> RunResult:
    """What every persetrain trainer (SFT, reward model, GRPO) does around ``build(...)``'s trainer, so they run alike.

    The run resumes from its newest complete checkpoint and records its resolved configuration (``more_args``: the
    trainer's other argument dataclasses by section name, such as GRPO's ``rewards``); the
    ``step_logs`` (file names in the output directory) are trimmed with ``metrics.jsonl`` on resume. A run
    stopped by SIGTERM / SIGUSR1 saves a checkpoint and returns without the final save, so that the
    output directory never looks finished when it is not; rerunning the command resumes it.
    """
    die_with_parent()
    # DeepSpeed calls collectives that torch 2.13 deprecates, and each call warns anew (the warning's location is
    # torch's wrapper, reached from many callers): hundreds of lines a step that bury the run's own output.
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated", category=FutureWarning)
    output_dir = Path(training_args.output_dir)
    stop = CheckpointOnSignal()
    resume = checkpoint_to_resume(training_args)
    trainer = build(
        script_args,
        training_args,
        model_args,
        [
            JsonlMetricsCallback(output_dir / METRICS_FILE, [output_dir / name for name in step_logs]),
            stop,
            HangWatchdog(),
            *callbacks,
        ],
    )
    if resume is not None:
        check_world_size(resume, trainer.args.world_size)
    if trainer.is_world_process_zero():
        # A finished run's state file says its model is all there (models.unfinished_run); this run has not finished.
        (output_dir / TRAINER_STATE).unlink(missing_ok=True)
        write_json(
            output_dir / RESOLVED_CONFIG_FILE,
            {
                "script": asdict(script_args),
                "model": asdict(model_args),
                "training": trainer.args.to_dict(),
                **{section: asdict(args) for section, args in (more_args or {}).items()},
                "resume_from_checkpoint": resume,
                "environment": environment(getattr(torch, model_args.dtype)),
            },
        )
    result = trainer.train(resume_from_checkpoint=resume)
    return _finish(trainer, result, output_dir, resume, model_args, training_args, stop.received)


def _finish(
    trainer, result, output_dir: Path, resume: str | None, model_args, training_args, stopped_by_signal: int | None
) -> RunResult:
    """A run stopped by a signal keeps only its checkpoint (rerunning resumes it). A finished run saves the
    model (or adapter) and tokenizer, metrics and state; a LoRA run also writes a merged copy under
    ``merged/`` (not for quantised weights, which have no full-precision copy to fold the adapter into).

    The merge reads back what ``save_model`` wrote, the base model and the saved adapter, in one process
    after every rank has saved: under ZeRO-3 and FSDP no rank holds the whole model in memory (each has a
    shard, gathered only into the saved files), and reading the files makes the merged model the same
    whatever the run was sharded with.
    """
    if stopped_by_signal is not None:
        # Every rank waits until rank 0 has written the checkpoint's last file: under torch elastic the first rank
        # to exit makes the agent end the others.
        trainer.accelerator.wait_for_everyone()
        trainer.end()
        return RunResult(
            output_dir=output_dir,
            model_dir=output_dir,
            resumed_from=resume,
            global_step=trainer.state.global_step,
            metrics=dict(result.metrics),
            stopped_by_signal=stopped_by_signal,
        )
    if getattr(training_args, "end_with_chosen_checkpoint", False) and trainer.state.best_model_checkpoint:
        # The checkpoint a callback chose (persetrain.train.callbacks: validated, before any collapse) becomes the
        # final model, by HF's own loader, before the one save and merge below.
        trainer._load_best_model()
        result.metrics["chosen_step"] = trainer.state.best_global_step
        if trainer.state.best_metric is not None:  # a validated choice (a rollback alone has no score)
            result.metrics["chosen_metric"] = trainer.state.best_metric
    trainer.save_model(str(output_dir))  # model (or adapter) + tokenizer; gathered from the shards when sharded
    trainer.log_metrics("train", result.metrics)
    trainer.save_metrics("train", result.metrics)
    trainer.save_state()

    model_dir = output_dir
    if model_args.use_peft and training_args.merge_adapter and not (model_args.load_in_4bit or model_args.load_in_8bit):
        model_dir = output_dir / MERGED_DIR
        trainer.accelerator.wait_for_everyone()  # every rank's part of the adapter is in the saved files
        # Training is over: without this, transformers would build the base model for the merge under ZeRO-3's
        # zero.Init, partitioned across ranks that are no longer there to take part.
        unset_hf_deepspeed_config()
        if trainer.is_world_process_zero():
            with atomic_dir(model_dir) as tmp:  # a run killed while merging leaves no half-written model to load
                merge_adapter(output_dir, model_args.model_name_or_path, tmp, dtype=getattr(torch, model_args.dtype))
    # `end` destroys the process group. A rank that got there while rank 0 still logged, saved state or merged
    # aborted now and then under ZeRO-3 (SIGABRT, "terminate called without an active exception", twice in some
    # 60 multi-rank launches here), and torch elastic failed the finished job; so every rank arrives together.
    trainer.accelerator.wait_for_everyone()
    trainer.end()
    return RunResult(
        output_dir=output_dir,
        model_dir=model_dir,
        resumed_from=resume,
        global_step=trainer.state.global_step,
        metrics=dict(result.metrics),
    )
