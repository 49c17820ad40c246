"""The PARL reward as a TRL ``GRPOTrainer`` reward function.

TRL 1.16 calls reward functions as ``f(prompts=, completions=, completion_ids=, **columns)`` where the
columns are the dataset's (``persetrain prepare parl`` writes ``task``, ``history_inputs``,
``history_outputs``, ``target_input``, ``ground_truth``, ``negatives``) plus ``trainer_state``,
``log_extra`` and ``log_metric``; a dataset prepared with user negatives also has ``user_negatives`` and
``user_negative_inputs``, which join the margin product. One call is one generation batch: it is scored with
one engine call (``score_batch``), the reward parts go to the completions table (``log_extra``), their means to the
logged metrics (``log_metric``) and, when ``parts_path`` is set, one JSON line per sample to that file, with
the optimizer step it was scored for, its index among the generation batch's rollouts (across processes: the main
process writes every process's rows) and, when the dataset has an ``id`` column, the example it was sampled for
(``step``, ``rollout``, ``id``): what tells a step's users apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelerate import PartialState
from accelerate.utils import gather_object

from persetrain.rewards.parl import RewardConfig, RewardParts, RubricJudge, RubricSample, score_batch

if TYPE_CHECKING:
    from persetrain.engine import Engine

#: The file of a run's output directory that a GRPO run's PARL rewards append their parts to (``parts_path``).
REWARD_PARTS_FILE = "reward_parts.jsonl"
#: Dataset columns the reward reads (every row of a PARL GRPO dataset has them).
COLUMNS: tuple[str, ...] = ("task", "history_inputs", "history_outputs", "target_input", "ground_truth", "negatives")


def completion_text(completion: Any) -> str:
    """TRL passes a string (standard format) or a list of messages (conversational format)."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant")


class PARLReward:
    """``reward(prompts=, completions=, completion_ids=, **columns) -> list[float]`` (module docstring)."""

    def __init__(self, engine: Engine, config: RewardConfig | None = None, parts_path: str | Path | None = None):
        self.judge = RubricJudge(engine)
        self.config = config or RewardConfig()
        self.parts_path = Path(parts_path) if parts_path else None
        self.__name__ = self.config.variant.replace("-", "_")  # TRL names the reward column after it
        self.last_parts: list[RewardParts] = []

    def __call__(
        self,
        prompts: Sequence | None = None,
        completions: Sequence | None = None,
        completion_ids: Sequence | None = None,
        *,
        log_extra: Callable | None = None,
        log_metric: Callable | None = None,
        trainer_state: Any = None,
        **columns: Any,
    ) -> list[float]:
        missing = [c for c in COLUMNS if c not in columns]
        if missing:
            raise KeyError(
                f"the PARL reward needs the dataset columns {missing} (write the dataset with "
                "`persetrain prepare parl`)"
            )
        completions = list(completions or [])
        samples = [
            RubricSample(
                task=columns["task"][i],
                completion=completion_text(c),
                history_inputs=columns["history_inputs"][i],
                history_outputs=columns["history_outputs"][i],
                target_input=columns["target_input"][i],
                ground_truth=columns["ground_truth"][i],
                negatives=columns["negatives"][i],
                user_negatives=list(zip(columns["user_negative_inputs"][i], columns["user_negatives"][i], strict=True))
                if "user_negatives" in columns
                else (),
            )
            for i, c in enumerate(completions)
        ]
        parts = score_batch(self.judge, samples, self.config)
        self.last_parts = parts
        # TRL scores the rollouts of the coming optimizer step while its state still holds the last one.
        step = trainer_state.global_step + 1 if trainer_state is not None else None
        self._log(parts, log_extra, log_metric, step, columns.get("id"))
        return [p.reward for p in parts]

    def _log(
        self,
        parts: list[RewardParts],
        log_extra: Callable | None,
        log_metric: Callable | None,
        step: int | None,
        ids: Sequence[str] | None,
    ) -> None:
        if log_extra is not None:
            for key in ("total_rules", "valid_rules", "s_gt", "d", "c"):
                log_extra(f"parl/{key}", [getattr(p, key) for p in parts])
        if log_metric is not None and parts:
            n = len(parts)
            log_metric("parl/parsed_share", sum(p.parsed for p in parts) / n)
            log_metric("parl/valid_share", sum(p.valid_rules >= 2 for p in parts) / n)
            log_metric("parl/valid_rules", sum(p.valid_rules for p in parts) / n)
            scored = [p for p in parts if p.d is not None]
            if scored:
                log_metric("parl/s_gt", sum(p.s_gt for p in scored) / len(scored))
                log_metric("parl/d", sum(p.d for p in scored) / len(scored))
        if self.parts_path is not None:
            self._append_parts(
                [{"id": ids[i] if ids is not None else None, **p.as_dict()} for i, p in enumerate(parts)], step
            )

    def _append_parts(self, rows: list[dict], step: int | None) -> None:
        """Append every process's rows to ``parts_path``, written by the main process alone, numbered across them.

        Why: with several processes each scores its own share of the generation batch. Appended by each process, rows
        would share rollout indices, and on a cluster's shared filesystem appends from different nodes are not
        atomic, so lines could tear into each other. Gathered (in TRL's own gather order, process 0's completions
        first), a step's rows are one block with ``rollout`` the completion's index in the whole generation batch.
        """
        rows = gather_object(rows)
        if not PartialState().is_main_process:
            return
        self.parts_path.parent.mkdir(parents=True, exist_ok=True)
        with self.parts_path.open("a", encoding="utf-8") as f:
            f.write("".join(json.dumps({"step": step, "rollout": k, **row}) + "\n" for k, row in enumerate(rows)))
