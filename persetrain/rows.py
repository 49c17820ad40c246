"""Rows in the layouts users already hold, from wherever they hold them, and their preference pairs.

Where the rows come from (:func:`load_rows`):

* a file: JSON lines (``.jsonl``, ``.json``, ``.ndjson``, each also ``.gz``), Parquet (``.parquet``) or CSV
  (``.csv``, ``.csv.gz``); one file is one split, ``train``;
* a folder of such files named by their split (``train.jsonl``, ``test.parquet``, ...);
* a folder ``datasets`` saved with ``save_to_disk`` (a ``DatasetDict``, or a ``Dataset``: the split ``train``);
* a Hub id (``trl-lib/ultrafeedback_binarized``) with an optional config name, through ``datasets.load_dataset``;
  offline (``HF_HUB_OFFLINE=1``) a cached id loads from the cache and any other fails at once.

Files are read here, not by ``datasets``' builders, so that a bad one is one line naming the file and the line
(a row of a JSON-lines file is its line, of a CSV file the line it starts on, of anything else its index).

What the rows hold (:func:`preference_pairs`): TRL's preference layouts, as ``RewardTrainer`` takes them,
standard (text) or conversational (lists of ``{"role", "content"}`` messages), with an explicit ``prompt`` or
the prompt implicit in ``chosen`` / ``rejected`` (TRL's own ``maybe_extract_prompt`` takes it out). Each row
becomes one :class:`PreferencePair` in plain text, the form every persetrain prompt reads; the person, when a
column holds one, is rendered by ``persetrain.prompts.preference.person_of``.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from persetrain.io import InputError, iter_jsonl, open_text
from persetrain.prompts.preference import person_of
from persetrain.saved import DATASET_INDEX, load_prepared_split, saved_splits

#: File suffixes read as tables, and the reader of each (a trailing ``.gz`` is looked through for text formats).
TABLE_FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}
#: The column that holds the person when ``person_column`` is not given.
DEFAULT_PERSON_COLUMN = "person"
#: Files ``save_to_disk`` writes: a folder holding one is a saved dataset.
SAVED_MARKERS = ("dataset_dict.json", "dataset_info.json", "state.json")
#: What a folder with neither a saved dataset nor split files is.
NO_DATA = (
    "not a dataset saved with save_to_disk (no dataset_dict.json), nor a folder of <split>.jsonl / .csv / .parquet "
    "files"
)


@dataclass
class Rows:
    """One split's rows and where they came from; ``records[i]`` is how an error names row ``i`` (a file's line)."""

    data: Dataset
    where: str
    records: list[int] | None = None

    def record(self, i: int) -> int:
        return self.records[i] if self.records is not None else i

    def row_id(self, i: int, split: str) -> str:
        """A row's own ``id`` when it has one, else ``<file name>:<line>`` (a file) or ``<split>:<index>``."""
        value = self.data[i].get("id") if "id" in self.data.column_names else None
        if value is not None and str(value).strip():
            return str(value)
        return f"{Path(self.where).name}:{self.record(i)}" if self.records is not None else f"{split}:{i}"


def table_format(path: Path) -> str | None:
    """``jsonl``, ``csv`` or ``parquet`` by the file's suffix (``.gz`` looked through), else None."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    kind = TABLE_FORMATS.get(Path(name).suffix.lower())
    return None if kind == "parquet" and path.name.endswith(".gz") else kind


def _from_records(path: Path, records: list[int], rows: list[dict]) -> Rows:
    if not rows:
        raise InputError(path, "no records")
    try:
        data = Dataset.from_list(rows)
    except (ValueError, TypeError) as err:  # pyarrow: a column whose rows hold values of different types
        message = str(err).splitlines()[0]
        raise InputError(path, f"the rows do not hold one type per column ({message})") from None
    return Rows(data, str(path), records)


def _read_jsonl(path: Path) -> Rows:
    lines, rows = [], []
    for line, obj in iter_jsonl(path):
        lines.append(line)
        rows.append(obj)
    return _from_records(path, lines, rows)


def _read_csv(path: Path) -> Rows:
    with open_text(path) as f:
        reader = csv.DictReader(f)
        lines, rows, end = [], [], 1
        for row in reader:
            start, end = end + 1, reader.line_num
            if None in row or any(value is None for value in row.values()):
                raise InputError(path, f"row has not the {len(reader.fieldnames or [])} cells of the header", start)
            lines.append(start)
            rows.append(row)
    return _from_records(path, lines, rows)


def _read_parquet(path: Path) -> Rows:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as err:
        raise InputError(path, f"not a Parquet file ({str(err).splitlines()[0]})") from None
    if table.num_rows == 0:
        raise InputError(path, "no records")
    return Rows(Dataset(table), str(path))


def read_table_file(path: Path) -> Rows:
    """The rows of one JSON-lines, CSV or Parquet file."""
    kind = table_format(path)
    if kind is None:
        raise InputError(path, "unknown file type; expected .jsonl / .json (JSON lines), .csv or .parquet")
    return {"jsonl": _read_jsonl, "csv": _read_csv, "parquet": _read_parquet}[kind](path)


def _split_files(folder: Path) -> dict[str, Path]:
    """``{split: file}`` of a folder of ``<split>.<suffix>`` files; two files for one split is an error."""
    found: dict[str, Path] = {}
    for file in sorted(folder.iterdir()):
        if not file.is_file() or table_format(file) is None:
            continue
        split = file.name.split(".")[0]
        if split in found:
            raise InputError(folder, f"two files hold split {split!r}: {found[split].name} and {file.name}")
        found[split] = file
    return found


def _no_split(where: str | Path, split: str, has: Sequence[str]) -> InputError:
    hint = "; a single file is the split 'train'" if list(has) == ["train"] else ""
    return InputError(where, f"no split '{split}' (has: {', '.join(has) or 'none'}){hint}")


def hub_split(name: str, config: str | None, split: str) -> Rows:
    """One split of a Hub dataset through ``datasets.load_dataset`` (its cache first; offline, only its cache)."""
    import datasets
    from datasets import load_dataset

    try:
        data = load_dataset(name, config, split=split)
    except Exception as err:  # noqa: BLE001 - datasets raises a dozen types (network, missing repo, bad config)
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        if datasets.config.HF_HUB_OFFLINE:
            message = f"not in the local datasets cache and the Hub is offline (HF_HUB_OFFLINE): {message}"
        raise InputError(name, f"cannot load this Hub dataset ({message})", field="dataset_name") from None
    return Rows(data, name)


def local_splits(path: Path) -> list[str]:
    """The split names of a local source as :func:`load_rows` reads it: a file is ``train``; a saved dataset's are in
    its index (a ``Dataset`` saved alone is ``train``); a folder of files, their names. For a check before a run
    starts (``persetrain launch``), with :func:`load_rows`'s errors."""
    if path.is_file():
        if table_format(path) is None:
            raise InputError(path, "unknown file type; expected .jsonl / .json (JSON lines), .csv or .parquet")
        return ["train"]
    if not path.is_dir():
        raise InputError(path, "no such file or folder")
    if (path / DATASET_INDEX).is_file():
        return saved_splits(path)
    if any((path / marker).is_file() for marker in SAVED_MARKERS):
        return ["train"]
    files = _split_files(path)
    if not files:
        raise InputError(path, NO_DATA)
    return list(files)


def load_rows(source: str | Path, split: str, config: str | None = None, any_split: bool = False) -> Rows:
    """The rows of ``split`` of ``source`` (a file, a folder of split files, a saved dataset, or a Hub id).

    ``any_split``: a single file is read whatever split is asked (``persetrain evaluate --data FILE``); for a
    trainer it is the split ``train`` alone, so that an evaluation split is never the training file again.
    """
    path = Path(source)
    if path.is_file():
        if not any_split and split != "train":
            raise _no_split(path, split, ["train"])
        return read_table_file(path)
    if path.is_dir():
        if any((path / marker).is_file() for marker in SAVED_MARKERS):
            return Rows(load_prepared_split(path, split, lone=True), str(path))
        files = _split_files(path)
        if not files:
            raise InputError(path, NO_DATA)
        if split not in files:
            raise _no_split(path, split, list(files))
        return read_table_file(files[split])
    if table_format(path) is not None or str(source).startswith((".", "/")) or str(source).count("/") > 1:
        raise InputError(path, "no such file or folder")
    return hub_split(str(source), config, split)


# --------------------------------------------------------------------------------- preference pairs
@dataclass(frozen=True)
class PreferencePair:
    """One preference row in plain text: ``chosen`` is preferred to ``rejected`` as an answer to ``prompt``.

    ``person`` is None when the rows have no person column (a plain, person-blind preference).
    """

    id: str
    person: str | None
    person_label: str
    prompt: str
    chosen: str
    rejected: str


def person_column_of(rows: Rows, person_column: str | None) -> str | None:
    """The column that holds the person: ``person_column`` (an error naming it when the rows lack it), else a
    column named ``person`` when there is one, else None."""
    if person_column is not None:
        if person_column not in rows.data.column_names:
            raise InputError(
                rows.where,
                f"no such column (person_column); the rows have: {', '.join(rows.data.column_names)}",
                field=person_column,
            )
        return person_column
    return DEFAULT_PERSON_COLUMN if DEFAULT_PERSON_COLUMN in rows.data.column_names else None


def messages_text(messages: Sequence[dict]) -> str:
    """Chat messages as plain text: one user message is its content; a longer exchange is a transcript
    (``User: ...``, ``Assistant: ...``), so that a multi-turn prompt keeps its turns."""
    if len(messages) == 1 and messages[0].get("role") in ("user", "assistant"):
        return str(messages[0].get("content", "")).strip()
    return "\n\n".join(f"{str(m.get('role', '')).capitalize()}: {str(m.get('content', '')).strip()}" for m in messages)


def _text(value: object, conversational: bool) -> str:
    if conversational:
        return messages_text(value) if isinstance(value, list) else ""
    return value.strip() if isinstance(value, str) else ""


def person_value(rows: Rows, i: int, column: str) -> tuple[str, str]:
    """``(label, text)`` of row ``i``'s person; one line naming the file, the row and the column when it is bad."""
    try:
        return person_of(rows.data[i][column])
    except ValueError as err:
        raise InputError(rows.where, str(err), record=rows.record(i), field=column) from None


def preference_pair(rows: Rows, i: int, split: str, person_column: str | None) -> PreferencePair:
    """Row ``i`` as a :class:`PreferencePair`: TRL's ``maybe_extract_prompt``, ``is_conversational`` read it."""
    from trl.data_utils import is_conversational, maybe_extract_prompt

    row, record = rows.data[i], rows.record(i)
    for field in ("chosen", "rejected"):
        if row.get(field) is None:
            raise InputError(
                rows.where,
                "missing: a preference row needs 'chosen' and 'rejected' (TRL's preference layout)",
                record=record,
                field=field,
            )
    example = maybe_extract_prompt({k: row[k] for k in ("prompt", "chosen", "rejected") if row.get(k) is not None})
    conversational = is_conversational({"chosen": example["chosen"]})
    prompt = example.get("prompt")
    texts = {
        "prompt": _text(prompt, isinstance(prompt, list)) if prompt is not None else "",
        "chosen": _text(example["chosen"], conversational),
        "rejected": _text(example["rejected"], conversational),
    }
    for field in ("prompt", "chosen", "rejected"):
        if not texts[field]:
            problem = "empty" if field != "prompt" else "missing: no 'prompt', and chosen and rejected share no prefix"
            raise InputError(rows.where, problem, record=record, field=field)
    if texts["chosen"] == texts["rejected"]:
        raise InputError(rows.where, "is the same text as 'rejected'", record=record, field="chosen")
    label, person = person_value(rows, i, person_column) if person_column else ("", None)
    return PreferencePair(rows.row_id(i, split), person, label, texts["prompt"], texts["chosen"], texts["rejected"])


def is_preference(rows: Rows) -> bool:
    """Whether the rows are in a preference layout (they hold ``chosen`` and ``rejected``)."""
    return {"chosen", "rejected"} <= set(rows.data.column_names)


def plain_notice(rows: Rows, person_column: str | None) -> str | None:
    """What a trainer says once of preference rows without a person column: they train a plain model."""
    if not is_preference(rows) or person_column_of(rows, person_column) is not None:
        return None
    return (
        f"{rows.where}: no person column ('{DEFAULT_PERSON_COLUMN}', or --person_column NAME): training a plain, "
        "person-blind model"
    )


def preference_pairs(rows: Rows, split: str, person_column: str | None) -> list[PreferencePair]:
    """Every row as a :class:`PreferencePair`; the person from ``person_column_of(rows, person_column)``."""
    column = person_column_of(rows, person_column)
    return [preference_pair(rows, i, split, column) for i in range(len(rows.data))]
