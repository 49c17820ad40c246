"""The named reward functions of GRPO's ``reward_funcs``: name, one-line help, the columns read, how to build it.

One table, read by everything that names a reward: the recipe key's check and ``--help``
(``persetrain.train.configs.RewardArguments``), the trainer (``persetrain.train.grpo``), the verl backend and
the README's list (``tests/test_readme.py``), so that a reward added here is known everywhere at once. Every entry
builds a TRL reward function, ``f(completions, **columns) -> list[float]``; the PARL and PerSE rewards score with
an engine, the reward judge (``reward_judge_*``), which :func:`build_rewards` loads once for all of a run's rewards
and only when one of them needs it. Any other name must be a dotted import path to a TRL reward function.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from persetrain.rewards.parl import RewardConfig
from persetrain.rewards.parl_trl import COLUMNS as PARL_COLUMNS
from persetrain.rewards.parl_trl import REWARD_PARTS_FILE
from persetrain.rewards.verdict import COLUMNS as VERDICT_COLUMNS
from persetrain.rewards.verdict import RENAMED_REWARDS, VERDICT_REWARDS

if TYPE_CHECKING:
    from persetrain.engine import Engine

RewardFunction = Callable[..., list[float]]


@dataclass(frozen=True)
class NamedReward:
    """One name a recipe's ``reward_funcs`` may hold."""

    name: str
    #: one line, for ``--help`` and the README
    help: str
    #: the dataset columns it reads (TRL hands every column of the row to every reward)
    reads: tuple[str, ...]
    #: ``build(judge, output_dir)``: the TRL reward function; ``judge()`` is the run's reward judge engine
    build: Callable[[Callable[[], Engine], Path], RewardFunction]
    #: whether it scores with the reward judge (``reward_judge_*``)
    judged: bool = False


def _parl(variant: str, help: str) -> NamedReward:
    def build(judge: Callable[[], Engine], output_dir: Path) -> RewardFunction:
        from persetrain.rewards.parl_trl import PARLReward

        # every sample's reward parts, one line per completion in scoring order, so an interrupted run keeps them
        return PARLReward(judge(), RewardConfig(variant=variant), parts_path=output_dir / REWARD_PARTS_FILE)

    return NamedReward(variant, help, PARL_COLUMNS, build, judged=True)


def _perse(judge: Callable[[], Engine], output_dir: Path) -> RewardFunction:
    from persetrain.rewards.perse import PerSEReward

    return PerSEReward(judge())


def _verdict(name: str, function: RewardFunction) -> NamedReward:
    return NamedReward(name, inspect.getdoc(function).splitlines()[0], VERDICT_COLUMNS[name], lambda *_: function)


#: Every named reward, in the order ``--help`` and the README list them.
REWARDS: dict[str, NamedReward] = {
    reward.name: reward
    for reward in (
        _parl("parl-a", "PARL-A, 0.1 + 10 S_gt c D: the user's own text's soft score times the margin product."),
        _parl("parl-b", "PARL-B, 0.1 + 10 c D: the margin product alone."),
        _parl("parl-0", "PARL-0, 0.1 + 10 S_gt c: the soft score alone, no margin."),
        _parl("parl-a-linear", "PARL-A with the cardinality c = valid rules / 10."),
        NamedReward(
            "perse",
            "A PerSE judge's expected 1-10 score of the completion for the row's reviewer.",
            ("profile", "id", "reviewer_id", "score_max"),  # all but profile when present
            _perse,
            judged=True,
        ),
        *(_verdict(name, function) for name, function in VERDICT_REWARDS.items()),
    )
}
#: The PARL reward variants (the only rewards the verl backend runs).
PARL_REWARDS = tuple(name for name in REWARDS if name.startswith("parl-"))


def unknown_rewards(names: Sequence[str]) -> str | None:
    """The error for the first of ``names`` that is neither registered nor a dotted import path, else None; a
    renamed reward's error names its new name."""
    old = next((name for name in names if name in RENAMED_REWARDS), None)
    if old is not None:
        return f"reward_funcs: '{old}' is now '{RENAMED_REWARDS[old]}'"
    unknown = [name for name in names if name not in REWARDS and "." not in name]
    if not unknown:
        return None
    return f"reward_funcs: unknown reward '{unknown[0]}'; expected one of {', '.join(REWARDS)} or a dotted import path"


def rewards_help() -> str:
    """The help of ``reward_funcs``: every registered name with its line and the columns it reads."""
    listed = "; ".join(
        f"{reward.name}: {reward.help.rstrip('.')} (reads {', '.join(reward.reads)})" for reward in REWARDS.values()
    )
    return f"Reward functions, summed with reward_weights: {listed}; or a dotted import path to a TRL reward function."


def build_rewards(names: Sequence[str], judge: Callable[[], Engine], output_dir: Path) -> list[RewardFunction]:
    """``names`` as TRL reward functions; ``judge()`` is called once, by the first reward that scores with it."""
    engine: list[Engine] = []

    def shared_judge() -> Engine:
        if not engine:
            engine.append(judge())
        return engine[0]

    functions = []
    for name in names:
        if name in REWARDS:
            functions.append(REWARDS[name].build(shared_judge, output_dir))
            continue
        module, _, attr = name.rpartition(".")
        try:
            functions.append(getattr(importlib.import_module(module), attr))
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(f"reward_funcs: cannot import '{name}' ({err})") from None
    return functions
