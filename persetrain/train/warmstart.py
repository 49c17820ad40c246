"""Warm-start data for PARL's GRPO: rubric sets the policy itself induced under structured output.

Why: GRPO learns only from differences between the rewards of one prompt's rollouts. A small policy
(the embedded 135M model) almost never writes a JSON array of 2..10 ``{"rule"}`` objects unaided, so
every rollout of a group gets 0.0 and the advantage is zero everywhere: no learning signal. Under
structured output the same model does write well-formed sets; the ones whose rules also pass the
consistency validation (p(yes) > τ on every history item, judged by the reward's judge) are what a
good rollout looks like. SFT on them (``persetrain sft``) teaches the format and the kind of rule
that survives validation, and GRPO starts from there.

``persetrain rubrics warmstart-data --data data/parl/parl_amazon --out data/parl/warmstart_amazon``
writes a ``DatasetDict`` in TRL's conversational prompt-completion format: the GRPO prompt (the
induction prompt) and, as the completion, the set's valid rules as one compact JSON array. Induction
and validation are the ``parl`` evaluator's (``persetrain.evaluators.parl.induce``), so the data
follows the same parsing limits and threshold as the reward. Where the truth is known (the SYNTHETIC
users, ``--source truth``), the rows come from ``data_prep.parl.rubrics`` instead and are written the
same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from persetrain.evaluators.parl import PARLConfig, induce
from persetrain.io import atomic_dir, write_json
from persetrain.prompts.parl import MIN_RULES, induction_messages
from persetrain.schema import RubricExample

#: Where a warm start's rubric sets come from: the model's own validated sets, or the known truth.
SOURCES = ("induced", "truth")


def warmstart_row(example: RubricExample, rules: Sequence[str], run: int) -> dict:
    """One SFT row: the induction prompt of ``example`` -> ``rules`` as one compact JSON array."""
    history = example.history
    return {
        "prompt": induction_messages(example.task, [h.input for h in history], [h.output for h in history]),
        "completion": [{"role": "assistant", "content": json.dumps([{"rule": r} for r in rules], ensure_ascii=False)}],
        "id": example.id,
        "run": run,
    }


def warmstart_rows(
    engine, examples: Sequence[RubricExample], config: PARLConfig, seed: int = 0, judge_engine=None
) -> tuple[list[dict], dict]:
    """SFT rows from every run's rubric sets that keep at least ``MIN_RULES`` valid rules, and counts."""
    rows: list[dict] = []
    counts = {"sets": 0, "parsed": 0, "valid": 0}
    for run in range(config.runs):
        for user in induce(engine, examples, config, seed + run, judge_engine):
            counts["sets"] += 1
            counts["parsed"] += int(user.parsed)
            kept = user.valid_rules(config.tau)
            if len(kept) < MIN_RULES:
                continue
            counts["valid"] += 1
            rows.append(warmstart_row(user.example, kept, run))
    return rows, counts


def save_warmstart(rows: Sequence[dict], counts: dict, out_dir: Path, info: dict) -> dict:
    """Write the warm-start dataset (train split) atomically; return the counts (also in ``build_info.json``).

    ``info`` records how the rows were made (source, seeds, thresholds) next to the counts.
    """
    from datasets import Dataset, DatasetDict

    counts = {**counts, "rows": len(rows), "valid_share": counts["valid"] / counts["sets"]}
    with atomic_dir(out_dir) as tmp:
        DatasetDict(train=Dataset.from_list(rows)).save_to_disk(str(tmp))
        write_json(tmp / "build_info.json", {"task": "warmstart", **info, **counts})
    return counts


def write_warmstart_data(
    engine, examples: Sequence[RubricExample], out_dir: Path, config: PARLConfig, seed: int = 0, judge_engine=None
) -> dict:
    """Induce, validate and write the warm-start dataset; return the counts."""
    rows, counts = warmstart_rows(engine, examples, config, seed, judge_engine)
    if not rows:
        raise ValueError(
            f"no rubric set of {counts['sets']} passed validation ({counts['parsed']} parsed): nothing "
            "to warm-start from; try more --runs or a larger --max-new-tokens"
        )
    info = {"source": "induced", "structured": config.structured, "runs": config.runs, "tau": config.tau, "seed": seed}
    return save_warmstart(rows, counts, out_dir, info)
