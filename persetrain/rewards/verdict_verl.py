"""The verdict judges' rewards with verl's custom reward signature (``reward.custom_reward_function``).

verl 0.9 calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)`` once
per sample and wants a dict holding ``score`` and the same other keys for every sample (it stacks each key
across the batch: fixed types, no None). ``ground_truth`` is the gold verdict and ``extra_info`` holds the row's
``verdicts`` and ``mode``, as in ``persetrain prepare verdict``'s rows; ``reward`` (a ``reward_kwargs`` entry in the
verl config) names the reward as a TRL recipe does. Each sample is scored by the TRL reward function itself, so
both trainers give a completion the same reward.
"""

from __future__ import annotations

from typing import Any

from persetrain.rewards.verdict import verdict_correct, verdict_format

#: ``verdict-consistent`` and ``verdict-correct-balanced`` compare the samples of one batch, which a per-sample
#: function never sees.
_PER_SAMPLE = ("verdict-correct", "verdict-format")
_PER_BATCH = ("verdict-consistent", "verdict-correct-balanced")


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    reward: str = "verdict-correct",
    **_: Any,
) -> dict:
    """verl's per-sample reward: ``{"score": reward, "verdict_correct": 0 | 1, "parsed": 0 | 1}``."""
    if reward in _PER_BATCH:
        raise ValueError(
            f"{reward} compares the samples of one batch, and verl's reward sees one sample at a time: "
            "use verdict-correct with verl"
        )
    if reward not in _PER_SAMPLE:
        raise ValueError(f"unknown verdict reward {reward!r} for verl; expected one of {', '.join(_PER_SAMPLE)}")
    info = extra_info or {}
    missing = [key for key in ("verdicts", "mode") if key not in info]
    if missing:
        raise KeyError(
            f"the {reward} reward needs {', '.join(f'extra_info[{key!r}]' for key in missing)} in every row; write "
            "the dataset with `persetrain prepare verdict`"
        )
    columns = {"gold": [ground_truth], "verdicts": [list(info["verdicts"])], "mode": [info["mode"]]}
    if "id" in info:
        columns["id"] = [info["id"]]
    correct = int(verdict_correct([solution_str], **columns)[0])
    parsed = int(verdict_format([solution_str], **columns)[0])
    score = float(correct if reward == "verdict-correct" else parsed)
    return {"score": score, "verdict_correct": correct, "parsed": parsed}
