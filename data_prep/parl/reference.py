"""Reference-task datasets (ExPerT, AuPEL): a user's own text and other generators' outputs per input.

A dataset is a folder with ``test.jsonl`` (one ``persetrain.schema.ReferenceExample`` a line) and a
``dataset.json`` card declaring ``"task": "reference"`` (the layout ``persetrain evaluate`` reads,
documented in ``data_prep/README.md``). ``build_reference`` makes one from a PARL task folder: the
user's most recent item is the task input and the reference, the user's earlier texts are the
writing samples, and the outputs are the user's own text (system ``gold``) plus every generator of
the negatives files (``persetrain generate-baselines`` output, or the synthetic sample's
``baselines.jsonl``). ``read_reference`` reads such a file and checks what a single record cannot
show: that every record holds the same systems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from data_prep.licenses import SYNTHETIC
from persetrain.io import InputError, atomic_dir, iter_jsonl, parse_record, write_json, write_jsonl
from persetrain.schema import ReferenceExample, uneven_outputs

GOLD = "gold"
CARD = "dataset.json"


def read_reference(path: str | Path) -> list[ReferenceExample]:
    """Records of a reference JSONL file; a record lacking a system the first record has is named."""
    path = Path(path)
    examples, lines = [], []
    for line, obj in iter_jsonl(path):
        examples.append(parse_record(ReferenceExample, obj, path, line))
        lines.append(line)
    if not examples:
        raise InputError(path, "holds no records")
    broken = uneven_outputs(examples)
    if broken:
        index, field, problem = broken
        raise InputError(path, problem, record=lines[index], field=field)
    return examples


def build_reference(
    raw: Path,
    task: str,
    baselines: Sequence[Path],
    out: Path,
    min_history: int = 1,
    synthetic: bool = False,
    columns: Mapping[str, Mapping[str, str]] | None = None,
) -> Path:
    """Write ``out/test.jsonl`` + ``out/dataset.json`` from a PARL task folder (``columns``: ``--columns``) and
    negatives files."""
    from data_prep.parl.prepare import TASK_LICENSES, attach_baselines
    from data_prep.parl.readers import read_task

    examples = attach_baselines(read_task(raw, task, min_history=min_history, columns=columns), list(baselines))
    records = []
    for ex in examples:
        if GOLD in ex.baselines:
            raise InputError(
                baselines[0],
                f"a generator may not be called {GOLD!r}: that is the user's own text",
                record=ex.id,
                field="generator",
            )
        records.append(
            ReferenceExample(
                id=ex.id,
                user_id=ex.user_id,
                input=ex.input,
                reference=ex.output,
                profile=[h.output for h in ex.history],
                outputs={GOLD: ex.output, **ex.baselines},
            )
        )
    with atomic_dir(out) as tmp:  # the records and their card together, or neither
        write_jsonl(tmp / "test.jsonl", records)
        write_json(
            tmp / CARD,
            {
                "task": "reference",
                "splits": {"test": "test.jsonl"},
                "synthetic": synthetic,
                **(SYNTHETIC if synthetic else TASK_LICENSES[task]).info(),
                "source": {"raw": str(raw), "task": task, "baselines": [str(p) for p in baselines]},
                "systems": list(records[0].outputs),
                "n": len(records),
                "description": "Per task input of a user: the user's own text (reference and system 'gold'), the "
                "user's earlier texts (profile) and the outputs of other generators.",
            },
        )
    return out
