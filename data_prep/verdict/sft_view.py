"""``persetrain prepare verdict-sft``: a judge dataset's rows as SFT rows, the gold verdict as the completion.

The supervised counterpart of the judge's GRPO run on the same rows: SFT is told the gold verdict where GRPO only
learns whether its sampled one was right, so a judge SFT-trained on this view is both the GRPO run's starting
point (``--model_name_or_path``) and the ceiling to read its result against. A row's prompt keeps every turn but
the assistant prefix; the completion is the assistant's turn, prefix then verdict (``Answer: B``), so TRL's SFT
trains the verdict's token after the same tokens ``mcq-letter`` and ``verifier`` read it after. Only ``verdict``
mode: a think-mode row has no gold rationale, and SFT on the verdict alone would teach the judge to skip it.
"""

from __future__ import annotations

from pathlib import Path

from datasets import DatasetDict

from persetrain.io import InputError, atomic_dir
from persetrain.prompts.verdict import request_of
from persetrain.rewards.verdict import check_verdict_rows
from persetrain.saved import load_prepared

#: The judge columns an SFT row keeps, besides the completion it gains: where it came from, and its gold.
KEPT = ("id", "item_id", "source", "topic", "gold", "prompt")


def sft_row(row: dict) -> dict:
    """One judge row as a conversational prompt-completion row."""
    request = request_of(row["prompt"])
    return {
        "prompt": [m.model_dump() for m in request.messages],
        "completion": [{"role": "assistant", "content": request.assistant_prefix + row["gold"]}],
    }


def verdict_sft(judge: Path, out: Path) -> DatasetDict:
    """Write the SFT view of the judge dataset at ``judge`` (every split) to ``out``, whole or not at all."""
    found = load_prepared(judge, "persetrain prepare verdict")
    for split, rows in found.items():
        check_verdict_rows(rows, judge / split, ["verdict-correct"])  # the columns, a known mode, a gold among verdicts
        for row in rows.select_columns(["id", "mode"]):
            if row["mode"] != "verdict":
                raise InputError(
                    judge / split,
                    f"mode {row['mode']!r}: only verdict-mode rows have their whole completion (the verdict)",
                    record=row["id"],
                    field="mode",
                )
    view = DatasetDict(
        {
            split: rows.select_columns(list(KEPT)).map(sft_row, desc=f"SFT view: {split}")
            for split, rows in found.items()
        }
    )
    with atomic_dir(out) as tmp:
        view.save_to_disk(str(tmp))
    return view
