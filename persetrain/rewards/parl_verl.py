"""The PARL reward with verl's custom reward signature (``reward.custom_reward_function``).

verl 0.9 calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)``
once per sample and wants a dict holding ``score`` and the same other keys for every sample. The
sample's user comes from the parquet row ``persetrain prepare parl --verl`` writes: ``extra_info``
holds ``metadata`` (the target's task input), ``profile`` (history items ``{input, output}``) and
``baseline`` (negatives, generator name -> text); ``data_source`` is ``parl/<task>``.

The judge is named by ``reward_kwargs`` in the verl config (``judge_model``, ``judge_backend``,
``judge_base_url``, ``variant``); engines are built once per process and reused. All checks of one
sample go to the judge in one engine call.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from persetrain.models import DEFAULT_MODEL
from persetrain.rewards.parl import RewardConfig, RubricJudge, RubricSample, score_batch


@lru_cache(maxsize=4)
def _judge(model: str, backend: str, base_url: str | None) -> RubricJudge:
    from persetrain.engine import load_engine

    options = {"scoring": "top_logprobs", "top_logprobs": 5} if backend == "openai" else {}
    return RubricJudge(load_engine(model, backend=backend, base_url=base_url, **options))


def sample_from_verl(data_source: str, solution_str: str, ground_truth: str, extra_info: dict) -> RubricSample:
    task = data_source.split("/", 1)[1] if data_source.startswith("parl/") else data_source
    profile = extra_info.get("profile") or []
    baseline = extra_info.get("baseline") or {}
    if isinstance(baseline, str):  # a JSON object, as some parquet writers store a dict of varying keys
        baseline = json.loads(baseline)
    return RubricSample(
        task=task,
        completion=solution_str,
        history_inputs=[item["input"] for item in profile],
        history_outputs=[item["output"] for item in profile],
        target_input=extra_info.get("metadata") or "",
        ground_truth=ground_truth,
        negatives=[baseline[name] for name in sorted(baseline)],
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: str,
    extra_info: dict | None = None,
    judge_model: str = DEFAULT_MODEL,
    judge_backend: str = "hf",
    judge_base_url: str | None = None,
    variant: str = "parl-a",
    **_: Any,
) -> dict:
    """verl's per-sample reward: ``{"score": reward, <every reward part>}`` (None-free, same keys always)."""
    judge = _judge(judge_model, judge_backend, judge_base_url)
    sample = sample_from_verl(data_source, solution_str, ground_truth, extra_info or {})
    parts = score_batch(judge, [sample], RewardConfig(variant=variant))[0]
    # verl stacks every key across samples: fixed types, no None, no lists.
    return {
        "score": parts.reward,
        "reward": parts.reward,
        "total_rules": parts.total_rules,
        "valid_rules": parts.valid_rules,
        "s_gt": -1.0 if parts.s_gt is None else parts.s_gt,
        "s_negatives_max": max(parts.s_negatives, default=-1.0),
        "d": -1.0 if parts.d is None else parts.d,
        "c": parts.c,
        "parsed": int(parts.parsed),
        "variant": parts.variant,
    }
