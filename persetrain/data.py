"""Load an evaluation dataset as typed examples of its declared task kind.

Three kinds of folders are understood, tried in this order:

* a dataset ``persetrain prepare`` wrote (``save_to_disk`` + ``build_info.json`` naming its task);
* JSONL records with a ``dataset.json`` card beside them (``{"task": "reference", "splits":
  {"test": "test.jsonl"}}``; without ``splits``, split ``S`` is ``S.jsonl``) - the format for data a
  user brings;
* a foreign layout whose reader is registered with :func:`register_reader` (PrefEval's folders, read by
  ``data_prep.readers.prefeval``, which knows nothing of this module: no import circle);
* with the task kind declared by the caller (``persetrain evaluate --task KIND``), rows in the layouts users hold
  (``persetrain.rows``: a JSON-lines, CSV or Parquet file, a folder of split files, a saved ``datasets``
  folder, a Hub id).

A pairwise dataset's records are Per-DOC's (``plot_a`` / ``plot_b``) or TRL's preference rows (``prompt`` /
``chosen`` / ``rejected`` and a person column, ``person`` unless ``person_column`` names another); a preference
row becomes a ``PreferencePairExample`` whose two responses are shown in an order seeded per example.

Every record is validated against its task's example model, and a bad one is reported with the file,
the record and the field; so is a record that breaks a rule across records (a repeated id, or what the
task kind's ``agreement`` checks) in the first two layouts, whose records are numbered in their files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from data_prep.readers.prefeval import is_prefeval, read_prefeval
from persetrain.io import InputError, iter_jsonl, parse_record
from persetrain.rows import PreferencePair, Rows, load_rows, person_column_of, preference_pair, read_table_file
from persetrain.saved import load_prepared_split, read_card
from persetrain.schema import PreferencePairExample
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
    name = read_card(card).get("task")
    if name is None:
        raise InputError(card, "does not declare the dataset's task kind", field="task")
    if not isinstance(name, str):
        raise InputError(card, f"expected the name of a task kind, got {json.dumps(name)}", field="task")
    try:
        return get_task(name)
    except ValueError as err:
        raise InputError(card, str(err), field="task") from None


def _check_records(task: TaskKind, path: Path, records: list[int], examples: list) -> None:
    """What no single record shows: unique ids (metrics match judgments to examples by id, so a repeated
    id would count one judgment twice) and the rule the task kind sets across records."""
    first: dict[str, int] = {}
    for record, example in zip(records, examples, strict=True):
        if example.id in first:
            problem = f"{example.id!r} is already the id of record {first[example.id]}"
            raise InputError(path, problem, record=record, field="id")
        first[example.id] = record
    broken = task.agreement(examples) if task.agreement else None
    if broken:
        index, field, problem = broken
        raise InputError(path, problem, record=records[index], field=field)


def _read_prepared(path: Path, split: str, seed: int) -> tuple[str, list]:
    task = _declared_task(path / BUILD_INFO)
    dataset = load_prepared_split(path, split)
    fields = set(task.example.model_fields)
    examples = [
        parse_record(task.example, {k: v for k, v in row.items() if k in fields}, path / split, i)
        for i, row in enumerate(dataset)
    ]
    _check_records(task, path / split, list(range(len(examples))), examples)
    return task.name, examples


def _split_file(card: Path, split: str) -> str:
    """The file name the card gives ``split`` (its ``splits`` object), else ``SPLIT.jsonl``."""
    splits = read_card(card).get("splits") or {}
    if not isinstance(splits, dict):
        raise InputError(
            card,
            f'expected an object naming each split\'s file ({{"test": "test.jsonl"}}), got {json.dumps(splits)}',
            field="splits",
        )
    if splits and split not in splits:
        raise InputError(card, f"has no split {split!r}; it has {sorted(splits)}", field="splits")
    name = splits.get(split, f"{split}.jsonl")
    if not isinstance(name, str):
        raise InputError(card, f"expected a file name, got {json.dumps(name)}", field=f"splits.{split}")
    return name


def pair_example(pair: PreferencePair, seed: int) -> PreferencePairExample:
    """A preference row as the pairwise example judges see: chosen first or second by a draw seeded with the
    example's id, so that every seed fixes the order and no position holds the chosen response more often."""
    chosen_first = random.Random(f"{seed}:{pair.id}").random() < 0.5
    a, b = (pair.chosen, pair.rejected) if chosen_first else (pair.rejected, pair.chosen)
    return PreferencePairExample(
        id=pair.id,
        person=pair.person or "",
        person_label=pair.person_label or "User preference",
        prompt=pair.prompt,
        response_a=a,
        response_b=b,
        preferred="A" if chosen_first else "B",
    )


def examples_of_rows(task: TaskKind, rows: Rows, split: str, seed: int, person_column: str | None = None) -> list:
    """Rows of a declared task kind as its examples: a pairwise row without Per-DOC's ``plot_a`` is a preference
    row (:func:`pair_example`), any other row a record of the kind (values that are null taken as absent)."""
    column = person_column_of(rows, person_column) if task.preference_rows else None
    examples = []
    for i, row in enumerate(rows.data):
        if task.preference_rows and row.get("plot_a") is None:
            examples.append(pair_example(preference_pair(rows, i, split, column), seed))
        else:
            record = {k: v for k, v in row.items() if v is not None}
            examples.append(parse_record(task.example, record, rows.where, rows.record(i)))
    _check_records(task, Path(rows.where), [rows.record(i) for i in range(len(examples))], examples)
    return examples


def _read_jsonl_card(path: Path, split: str, seed: int, person_column: str | None = None) -> tuple[str, list]:
    folder = path if path.is_dir() else path.parent
    task = _declared_task(folder / CARD)
    records = path if path.is_file() else folder / _split_file(folder / CARD, split)
    if not records.is_file():
        raise InputError(records, f"missing: split {split!r} of the dataset described by {folder / CARD}")
    first = next(iter_jsonl(records), None)
    if task.preference_rows and first is not None and "plot_a" not in first[1]:  # preference rows, not Per-DOC's
        column = person_column or read_card(folder / CARD).get("person_column")
        return task.name, examples_of_rows(task, read_table_file(records), split, seed, column)
    lines, examples = [], []
    for line, obj in iter_jsonl(records):
        lines.append(line)
        examples.append(parse_record(task.example, obj, records, line))
    _check_records(task, records, lines, examples)
    return task.name, examples


register_reader("prepared", lambda p: (p / BUILD_INFO).is_file(), _read_prepared)
register_reader("jsonl", lambda p: ((p if p.is_dir() else p.parent) / CARD).is_file(), _read_jsonl_card)
register_reader("prefeval", is_prefeval, read_prefeval)


def _kind(name: str, where: Path) -> TaskKind:
    try:
        return get_task(name)
    except ValueError as err:
        raise InputError(where, f"{err} (--task)", field="task") from None


def read_split(
    path: str | Path, split: str = "test", seed: int = 0, task: str | None = None, person_column: str | None = None
) -> tuple[TaskKind, list]:
    """The task kind a dataset declares and its examples of one split.

    ``task`` declares the kind of rows that carry no card (a file, a saved ``datasets`` folder, a Hub id); a
    dataset with a card must declare the same. ``person_column`` names the column of a preference row's person.
    """
    path = Path(path)
    declared = _kind(task, path) if task is not None else None
    reader = next((r for r in _READERS if path.exists() and r.detect(path)), None)
    if declared is not None and reader is None:
        examples = examples_of_rows(declared, load_rows(path, split, any_split=True), split, seed, person_column)
        return declared, examples
    if not path.exists():
        raise InputError(path, "no such file or folder")
    if reader is not None:
        if reader.name == "jsonl":
            name, examples = _read_jsonl_card(path, split, seed, person_column)
        else:
            name, examples = reader.read(path, split, seed)
        if declared is not None and declared.name != name:
            raise InputError(path, f"declares the task kind {name!r}, not {declared.name!r} (--task)", field="task")
        if not examples:
            raise InputError(path, f"split {split!r} holds no examples")
        return get_task(name), examples
    raise InputError(
        path,
        "not a dataset persetrain can read: expected a folder written by `persetrain prepare` "
        f"({BUILD_INFO}), JSONL records with a {CARD} card declaring their task kind, "
        f"one of these layouts: {', '.join(r.name for r in _READERS[2:]) or 'none registered'}, "
        "or rows whose task kind --task declares",
    )
