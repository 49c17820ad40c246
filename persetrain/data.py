"""Load an evaluation dataset as typed examples of its declared task kind.

Three kinds of folders are understood, tried in this order:

* a dataset ``persetrain prepare`` wrote (``save_to_disk`` + ``build_info.json`` naming its task);
* JSONL records with a ``dataset.json`` card beside them (``{"task": "reference", "splits":
  {"test": "test.jsonl"}}``; without ``splits``, split ``S`` is ``S.jsonl``) - the format for data a
  user brings;
* a foreign layout whose reader is registered with :func:`register_reader` (PrefEval's folders, read by
  ``data_prep.readers.prefeval``, which knows nothing of this module: no import circle).

Every record is validated against its task's example model, and a bad one is reported with the file,
the record and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data_prep.readers.prefeval import is_prefeval, read_prefeval
from persetrain.io import InputError, parse_record, read_jsonl
from persetrain.tasks import TaskKind, get_task

BUILD_INFO = "build_info.json"
CARD = "dataset.json"


@dataclass(frozen=True)
class Reader:
    """``detect(path)`` says whether a path is in this layout; ``read(path, split, seed)`` -> (task, examples)."""

    name: str
    detect: Callable[[Path], bool]
    read: Callable[[Path, str, int], tuple[str, list]]


_READERS: list[Reader] = []


def register_reader(
    name: str, detect: Callable[[Path], bool], read: Callable[[Path, str, int], tuple[str, list]]
) -> None:
    _READERS.append(Reader(name, detect, read))


def _declared_task(card: Path) -> TaskKind:
    try:
        info = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise InputError(card, f"not readable JSON ({err})") from None
    if not isinstance(info, dict) or "task" not in info:
        raise InputError(card, "does not declare the dataset's task kind", field="task")
    try:
        return get_task(info["task"])
    except ValueError as err:
        raise InputError(card, str(err), field="task") from None


def _read_prepared(path: Path, split: str, seed: int) -> tuple[str, list]:
    from datasets import load_from_disk

    task = _declared_task(path / BUILD_INFO)
    try:
        dataset = load_from_disk(str(path))
    except FileNotFoundError as err:
        raise InputError(path, f"not a dataset saved with save_to_disk ({err})") from None
    if split not in dataset:
        raise InputError(path, f"has no split {split!r}; it has {sorted(dataset)}")
    fields = set(task.example.model_fields)
    examples = [
        parse_record(task.example, {k: v for k, v in row.items() if k in fields}, path / split, i)
        for i, row in enumerate(dataset[split])
    ]
    return task.name, examples


def _read_jsonl_card(path: Path, split: str, seed: int) -> tuple[str, list]:
    folder = path if path.is_dir() else path.parent
    task = _declared_task(folder / CARD)
    if path.is_file():
        records = path
    else:
        splits = json.loads((folder / CARD).read_text(encoding="utf-8")).get("splits") or {}
        if splits and split not in splits:
            raise InputError(folder / CARD, f"has no split {split!r}; it has {sorted(splits)}", field="splits")
        records = folder / splits.get(split, f"{split}.jsonl")
    if not records.is_file():
        raise InputError(records, f"missing: split {split!r} of the dataset described by {folder / CARD}")
    return task.name, read_jsonl(records, task.example)


register_reader("prepared", lambda p: (p / BUILD_INFO).is_file(), _read_prepared)
register_reader("jsonl", lambda p: ((p if p.is_dir() else p.parent) / CARD).is_file(), _read_jsonl_card)
register_reader("prefeval", is_prefeval, read_prefeval)


def load_dataset(path: str | Path, split: str = "test", seed: int = 0) -> tuple[TaskKind, list]:
    """The task kind a dataset declares and its examples of one split."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or folder")
    for reader in _READERS:
        if reader.detect(path):
            task, examples = reader.read(path, split, seed)
            if not examples:
                raise InputError(path, f"split {split!r} holds no examples")
            return get_task(task), examples
    raise InputError(
        path,
        "not a dataset persetrain can read: expected a folder written by `persetrain prepare` "
        f"({BUILD_INFO}), JSONL records with a {CARD} card declaring their task kind, or "
        f"one of these layouts: {', '.join(r.name for r in _READERS[2:]) or 'none registered'}",
    )
