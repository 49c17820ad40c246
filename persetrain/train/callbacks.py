"""A GRPO judge run that watches for collapse and ends with the checkpoint chosen on topics it never trained on.

Two ``TrainerCallback``s share one :class:`CheckpointChoice`, the checkpoint the run ends with
(``TrainerState.best_model_checkpoint``, which ``persetrain.train.runner`` loads before the final save, so the
final model and its one merged copy are that checkpoint's):

- :class:`CollapseCallback` reads TRL's per-step ``frac_reward_zero_std`` (the share of groups whose rewards are all
  equal: those give no gradient but the KL term's). A window of ``collapse_window`` logged steps whose mean share
  is at least ``collapse_equal_share`` is a collapse: it is written once to ``metrics.jsonl`` (``event:
  collapse``) and the console, and by ``collapse_action`` the run goes on (``warn``), stops (``stop``), or stops
  and ends with the last good checkpoint, saved before the window began (``rollback``). Under ``rollback`` or
  validation the first step is checkpointed too (``checkpoint-1``, the start's weights under warm-up), so a collapse
  before the first ``save_steps`` still has one.
- :class:`ValidationCallback` judges each saved checkpoint with the evaluator that will read the judge
  (``verifier``, ``mcq-letter``) on held-out questions (``persetrain prepare verdict`` writes the validation
  topics' questions to ``<dataset>/questions``), writes ``validation/accuracy`` to ``metrics.jsonl`` (``event:
  validation``) and the console, and makes the best checkpoint saved before any collapse the one the run ends
  with. Without ``save_total_limit``, the checkpoints that can no longer be chosen are deleted
  (:meth:`CheckpointChoice.prune`), so at most three stay: the newest, the chosen one and the one the run ends with.

Why not ``load_best_model_at_end``: it needs ``eval_strategy`` to match ``save_strategy``, and GRPO's evaluation
samples rollouts and scores rewards, not the evaluator's accuracy on whole held-out questions.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from persetrain.console import console
from persetrain.io import read_step_log
from persetrain.train.runner import METRICS_FILE, append_record

#: TRL's per-step share of groups whose rewards are all equal.
EQUAL_GROUP_SHARE = "frac_reward_zero_std"
COLLAPSE_ACTIONS = ("warn", "stop", "rollback")
#: Where the validation runs of each checkpoint go, under the output directory.
VALIDATION_DIR = "validation"


@dataclass
class CheckpointChoice:
    """Which saved checkpoint the run ends with, kept in ``state.best_model_checkpoint`` all along.

    Only a checkpoint saved before any collapse can be chosen: the best validated one, else (``rollback``) the
    newest. Until the run ends, a checkpoint saved after the current window's first step of ``collapse_window``
    steps is not chosen yet, since a collapse found at the next log would start right after it; the choice is what
    HF's checkpoint rotation keeps, so the checkpoint a rollback needs is still on disk when the collapse is found.
    """

    saved: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    collapse_onset: int | None = None
    #: The first step of the collapse window being watched: a checkpoint saved from there on may be a collapsed one.
    window_start: int | None = None
    rollback: bool = False
    validating: bool = False

    def resume(self, args, state) -> None:
        """A resumed run's choice as the stopped run left it: its checkpoints on disk up to the resumed step, their
        validation scores and a collapse, read back from ``metrics.jsonl`` (which the metrics callback, first in the
        list, has trimmed to the resumed step)."""
        if self.saved or state.global_step == 0:
            return
        prefix = f"{PREFIX_CHECKPOINT_DIR}-"
        steps = (p.name.removeprefix(prefix) for p in Path(args.output_dir).glob(f"{prefix}*"))
        self.saved = sorted(int(step) for step in steps if step.isdigit() and int(step) <= state.global_step)
        log = Path(args.output_dir) / METRICS_FILE
        rows = read_step_log(log) if log.is_file() else []
        self.scores = {r["step"]: r["validation/accuracy"] for r in rows if r.get("event") == "validation"}
        collapse = next((r for r in rows if r.get("event") == "collapse"), None)
        if collapse is not None:
            self.collapse_onset = collapse["onset"]

    def chosen(self, args, final: bool) -> int | None:
        before = self.collapse_onset
        if before is None and not final and self.window_start is not None:
            # a collapse found at the next log would start one step after the window's start
            before = self.window_start + 1
        return self.choice_before(args, before, final)

    def choice_before(self, args, before: int | None, final: bool = False) -> int | None:
        """The choice if a collapse started at step ``before`` (None: no collapse)."""
        on_disk = [step for step in self.saved if checkpoint_dir(args, step).is_dir()]
        good = [step for step in on_disk if before is None or step < before]
        scored = [step for step in good if step in self.scores]
        if scored:
            return max(scored, key=lambda step: (self.scores[step], -step))  # the earlier of equal scores
        if self.rollback and good and not (final and before is None):
            return good[-1]
        return None

    def apply(self, args, state, final: bool = False) -> int | None:
        """Point ``state.best_model_checkpoint`` (and HF's ``best_metric`` / ``best_global_step``) at the choice;
        ``final``: the run ends now, so every checkpoint saved before a collapse counts. A run that neither
        validates nor rolls back leaves HF's fields alone."""
        if not (self.rollback or self.validating):
            return None
        step = self.chosen(args, final)
        state.best_global_step = step
        state.best_metric = None if step is None else self.scores.get(step)
        state.best_model_checkpoint = None if step is None else str(checkpoint_dir(args, step))
        return step

    def prune(self, args, final: bool = False) -> None:
        """Delete the checkpoints that can no longer be chosen: all but the newest (to resume from) and the choice
        for every step a collapse found later could still start at (the choice changes only after a saved step, so
        those are the steps after each checkpoint from the window's start on, and no collapse at all). Why not HF's
        ``save_total_limit``: it keeps the newest and ``best_model_checkpoint``, one choice, and a checkpoint
        validated inside the watched window is not that choice yet, so under ``save_total_limit: 1`` it was
        deleted before it could be chosen. ``final``: the run ends now, so no later collapse can start."""
        if not (self.rollback or self.validating) or args.save_total_limit:
            return
        on_disk = [step for step in self.saved if checkpoint_dir(args, step).is_dir()]
        if self.collapse_onset is not None or final:
            onsets: list[int | None] = [self.collapse_onset]
        else:
            earliest = 1 if self.window_start is None else self.window_start + 1
            onsets = [earliest, *(step + 1 for step in on_disk if step >= earliest), None]
        keep = {*on_disk[-1:], *(self.choice_before(args, onset) for onset in onsets)}
        for step in on_disk:
            if step not in keep:
                shutil.rmtree(checkpoint_dir(args, step), ignore_errors=True)


def checkpoint_dir(args, step: int) -> Path:
    return Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{step}"


def _ending(args, state, control) -> bool:
    return bool(control.should_training_stop) or state.global_step >= state.max_steps


class CollapseCallback(TrainerCallback):
    """Find the window of steps where nearly every group's rewards are equal, say it once, act on it."""

    def __init__(self, choice: CheckpointChoice, window: int, equal_share: float, action: str):
        if action not in COLLAPSE_ACTIONS:
            raise ValueError(f"collapse_action must be one of {', '.join(COLLAPSE_ACTIONS)}, not {action!r}")
        if window < 1 or not 0 < equal_share <= 1:
            raise ValueError(
                f"collapse_window must be at least 1 and collapse_equal_share in (0, 1], not {window}, {equal_share}"
            )
        self.choice, self.window, self.equal_share, self.action = choice, window, equal_share, action
        choice.rollback = action == "rollback"
        self.recent: list[tuple[int, float]] = []

    def on_train_begin(self, args, state, control, **kwargs):
        self.choice.resume(args, state)

    def on_step_end(self, args, state, control, **kwargs):
        """Checkpoint the first step, so that a collapse before the first ``save_steps`` has a good checkpoint to
        roll back to and validation scores the start among the candidates: under warm-up the first step's rate is
        0, so ``checkpoint-1`` holds the untrained weights, and a run never ends below its start on validation."""
        if state.global_step == 1 and args.save_strategy != "no" and (self.choice.rollback or self.choice.validating):
            control.should_save = True

    def on_save(self, args, state, control, **kwargs):
        if state.global_step not in self.choice.saved:
            self.choice.saved.append(state.global_step)
        self.choice.apply(args, state, _ending(args, state, control))
        if state.is_world_process_zero and not self.choice.validating:  # else pruned once the checkpoint is scored
            self.choice.prune(args, _ending(args, state, control))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or EQUAL_GROUP_SHARE not in logs or self.choice.collapse_onset is not None:
            return
        self.recent = [*self.recent, (state.global_step, float(logs[EQUAL_GROUP_SHARE]))][-self.window :]
        self.choice.window_start = self.recent[0][0]
        share = sum(value for _, value in self.recent) / len(self.recent)
        if len(self.recent) < self.window or share < self.equal_share:
            self.choice.apply(args, state)
            return
        onset = self.recent[0][0]
        self.choice.collapse_onset = onset
        if self.action != "warn":
            control.should_training_stop = True
        chosen = self.choice.apply(args, state, final=self.action != "warn")
        ends_with = {
            "warn": "training goes on (collapse_action: warn)",
            "stop": "training stops (collapse_action: stop)",
            "rollback": "training stops and ends with "
            + (f"checkpoint-{chosen}" if chosen is not None else "its last step: no checkpoint was saved before it"),
        }[self.action]
        record = {
            "event": "collapse",
            "step": state.global_step,
            "onset": onset,
            "window": self.window,
            "equal_group_share": share,
            "action": self.action,
            "ends_with_step": chosen,
            "time": time.time(),
        }
        if state.is_world_process_zero:
            append_record(Path(args.output_dir) / METRICS_FILE, record)
        console.print(
            f"[yellow]collapse at step {state.global_step}: {share:.0%} of the groups had equal rewards over the "
            f"{self.window} steps since step {onset} (no gradient but the KL term's); {ends_with}[/yellow]"
        )


class ValidationCallback(TrainerCallback):
    """Judge each saved checkpoint on held-out questions with the judge's own evaluator; keep the best one."""

    def __init__(self, choice: CheckpointChoice, evaluator: str, data: str, split: str, max_examples: int | None):
        self.choice, self.evaluator, self.data, self.split, self.max_examples = (
            choice,
            evaluator,
            data,
            split,
            max_examples,
        )
        choice.validating = True

    def on_save(self, args, state, control, **kwargs):
        step = state.global_step
        if step not in self.choice.saved:
            self.choice.saved.append(step)
        checkpoint = checkpoint_dir(args, step)
        stopping = control.should_training_stop and step < state.max_steps
        # A checkpoint saved to stop early is not judged: after a signal the job has seconds to exit, and after a
        # collapse the checkpoint cannot be chosen.
        if not state.is_world_process_zero or not checkpoint.is_dir() or stopping:
            return
        accuracy = self.judge(checkpoint, Path(args.output_dir) / VALIDATION_DIR / checkpoint.name, args.seed)
        self.choice.scores[step] = accuracy
        best = self.choice.apply(args, state, _ending(args, state, control))
        self.choice.prune(args, _ending(args, state, control))
        record = {
            "event": "validation",
            "step": step,
            "checkpoint": checkpoint.name,
            "validation/accuracy": accuracy,
            "validation/best_step": best,
            "time": time.time(),
        }
        append_record(Path(args.output_dir) / METRICS_FILE, record)
        chosen = (
            f"checkpoint-{best}" if best is not None else "none yet (one counts once saved before the watched window)"
        )
        console.print(
            f"validation ({self.evaluator}, {self.data} {self.split}): checkpoint-{step} {accuracy:.3f}; "
            f"chosen: {chosen}"
        )

    def judge(self, checkpoint: Path, out: Path, seed: int) -> float:
        """The evaluator's accuracy of ``checkpoint`` (an adapter is merged into a temporary copy first)."""
        from persetrain.adapters import merge_adapter
        from persetrain.evaluation import EvaluationConfig, evaluate
        from persetrain.evaluators.registry import SystemSpec

        shutil.rmtree(out, ignore_errors=True)  # a resumed run judges its checkpoint again
        with tempfile.TemporaryDirectory(dir=checkpoint.parent, prefix=".validating-") as tmp:
            model = checkpoint
            adapter = checkpoint / "adapter_config.json"
            if adapter.is_file():
                base = json.loads(adapter.read_text(encoding="utf-8"))["base_model_name_or_path"]
                model = Path(tmp)
                merge_adapter(checkpoint, base, model)
            config = EvaluationConfig(
                data=self.data,
                out=str(out),
                systems=[SystemSpec(checkpoint.name, self.evaluator, str(model))],
                split=self.split,
                max_examples=self.max_examples,
                seed=seed,
            )
            metrics = evaluate(config)
        return float(metrics["systems"][checkpoint.name]["accuracy"])
