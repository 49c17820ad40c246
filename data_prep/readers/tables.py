"""Read raw CSV / JSON-lines tables under a column mapping, with errors that point at the cell.

Raw datasets arrive with their publishers' headers (``imdb_id``, ``plot_synopsis``, ``reviewText``...),
so every reader maps *our* field names to *the file's* column names and validates each row into a
typed record. Whatever goes wrong is raised as ``persetrain.io.InputError`` naming the file, the line
the record starts on, and the file's own column name, because that is what a user has to go and fix.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError

from persetrain.console import track
from persetrain.io import InputError, iter_jsonl, open_text

T = TypeVar("T", bound=BaseModel)

#: our field name -> the column name in the file
ColumnMap = Mapping[str, str]

CSV_SUFFIXES = {".csv"}
JSONL_SUFFIXES = {".jsonl", ".json", ".ndjson"}


def _as_id(value: object) -> object:
    """Ids are strings, but JSON writers often emit them as numbers: accept both, reject blanks."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        value = str(int(value)) if float(value).is_integer() else str(value)
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("is empty")
        return value.strip()
    return value


def _as_text(value: object) -> object:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("text is empty")
        return value.strip()
    return value


def _as_integral(value: object) -> object:
    """Scores are whole numbers; CSV gives '7' or '7.0' and JSON gives 7 or 7.0 — all mean 7."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"not a number: {value!r}") from None
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"must be a whole number, got {value}")
        return int(value)
    return value


Id = Annotated[str, BeforeValidator(_as_id)]
Text = Annotated[str, BeforeValidator(_as_text)]
Integral = Annotated[int, BeforeValidator(_as_integral)]


def table_format(path: Path) -> str:
    """'csv' or 'jsonl' from the file name (a trailing .gz is looked through)."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    suffix = Path(name).suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    raise InputError(path, f"unknown table format {suffix!r}; expected .csv, .jsonl or .json (JSON lines)")


def first_columns(path: str | os.PathLike) -> set[str]:
    """The column names of a table: a CSV file's header, or the keys of a JSON-lines file's first record. An empty
    file is one line saying it holds no records."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found")
    if table_format(path) == "csv":
        with open_text(path) as f:
            header = next(csv.reader(f), None)
        if header is None:
            raise InputError(path, "no records")
        return {h.strip().lstrip("\ufeff") for h in header}
    first = next(iter_jsonl(path), None)
    if first is None:
        raise InputError(path, "no records")
    return set(first[1])


def read_rows(
    path: str | os.PathLike, columns: ColumnMap, required: Sequence[str], optional: Sequence[str] = ()
) -> Iterator[tuple[int, dict]]:
    """Yield ``(line, row)`` with ``row`` keyed by our field names.

    ``line`` is the line the record starts on (the header is line 1 in a CSV). A required column
    missing from the file is an error; optional columns are simply absent from ``row``.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found")
    fields = list(required) + list(optional)
    unmapped = [f for f in fields if f not in columns]
    if unmapped:
        raise ValueError(f"column mapping lacks fields {unmapped}")
    reader = _csv_rows if table_format(path) == "csv" else _jsonl_rows
    empty = True
    for row in track(reader(path, columns, required, fields), description=f"read {path.name}"):
        empty = False
        yield row
    if empty:
        raise InputError(path, "no records")


def _csv_rows(path: Path, columns: ColumnMap, required: Sequence[str], fields: list[str]):
    with open_text(path) as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise InputError(path, "empty file: no header row", record=1) from None
        header = [h.strip().lstrip("\ufeff") for h in header]
        for name in required:
            if columns[name] not in header:
                raise InputError(
                    path, f"missing column (holds our '{name}'); header has {header}", record=1, field=columns[name]
                )
        where = {name: header.index(columns[name]) for name in fields if columns[name] in header}
        end = reader.line_num
        for cells in reader:
            start, end = end + 1, reader.line_num
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(header):
                raise InputError(path, f"row has {len(cells)} cells, header has {len(header)}", record=start)
            yield start, {name: cells[i] for name, i in where.items()}


def _jsonl_rows(path: Path, columns: ColumnMap, required: Sequence[str], fields: list[str]):
    for line_no, obj in iter_jsonl(path):
        yield line_no, map_record(obj, {name: columns[name] for name in fields}, required, path, line_no)


def map_record(
    obj: Mapping, columns: ColumnMap, required: Sequence[str], path: str | os.PathLike, record: int | str
) -> dict:
    """One JSON record keyed by our field names (the fields of ``columns`` whose column it has), for readers of
    JSON records as well as of tables; a ``required`` field's column it lacks is an error at the record."""
    for name in required:
        if columns[name] not in obj:
            raise InputError(path, f"missing column (holds our '{name}')", record=record, field=columns[name])
    return {name: obj[column] for name, column in columns.items() if column in obj}


def parse_row(model: type[T], row: dict, path: str | os.PathLike, line: int, columns: ColumnMap) -> T:
    """Validate one mapped row; the error names the file's column, not our field."""
    try:
        return model.model_validate(row)
    except ValidationError as err:
        first = err.errors()[0]
        ours = str(first["loc"][0]) if first["loc"] else None
        column = columns.get(ours, ours) if ours else None
        msg = first["msg"].removeprefix("Value error, ")
        raise InputError(path, msg, record=line, field=column) from None


def read_table(
    path: str | os.PathLike,
    model: type[T],
    columns: ColumnMap,
    optional: Sequence[str] = (),
    unique: str | None = None,
) -> list[T]:
    """Read every row of ``path`` into ``model``; every field of ``model`` not in ``optional`` is required.

    ``unique`` names a field (an id) that must not repeat: a second row with the same id would make
    every reference to it ambiguous, so it is reported at the line where it repeats.
    """
    required = [f for f in model.model_fields if f not in optional]
    records, seen = [], set()
    for line, row in read_rows(path, columns, required, optional):
        record = parse_row(model, row, path, line, columns)
        if unique is not None:
            key = getattr(record, unique)
            if key in seen:
                raise InputError(path, f"duplicate {unique} {key!r}", record=line, field=columns[unique])
            seen.add(key)
        records.append(record)
    return records


def merged_columns(defaults: ColumnMap, overrides: ColumnMap | None) -> dict[str, str]:
    """Defaults with the caller's overrides; an override naming an unknown field is a typo, so it fails."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"unknown fields in column mapping: {unknown}; known: {sorted(defaults)}")
    return {**defaults, **overrides}


def parse_columns(pairs: Sequence[str], tables: Mapping[str, ColumnMap]) -> dict[str, dict[str, str]]:
    """``--columns`` values as ``{table: {our field: the file's column}}``.

    Each value is ``FIELD=COLUMN`` (every table of the command with that field) or ``TABLE.FIELD=COLUMN`` (one
    table); ``tables`` maps each table to its default columns, which name the fields it has. A field or table
    no table has is an error listing what there is, since a misspelt mapping would be silently ignored.
    """
    found: dict[str, dict[str, str]] = {}
    for pair in pairs:
        key, sep, column = pair.partition("=")
        if not sep or not key.strip() or not column.strip():
            raise ValueError(f"--columns {pair!r}: use FIELD=COLUMN or TABLE.FIELD=COLUMN")
        table, dot, field = key.strip().rpartition(".")
        if dot and table not in tables:
            raise ValueError(f"--columns {pair!r}: no table {table!r}; tables: {', '.join(tables)}")
        owners = [table] if dot else [name for name, cols in tables.items() if field in cols]
        if not owners or field not in tables[owners[0]]:
            known = "; ".join(f"{name}: {', '.join(cols)}" for name, cols in tables.items())
            raise ValueError(f"--columns {pair!r}: no field {field!r}; fields by table: {known}")
        for owner in owners:
            found.setdefault(owner, {})[field] = column.strip()
    return found
