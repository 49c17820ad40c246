"""Reading and writing the project's files: JSONL records with precise errors, atomic writes.

Two promises every command keeps rest on this module: bad input is reported as
``file:line: field: problem`` instead of a traceback from deep inside pydantic or json, and no
output is ever left half-written. A whole file goes through a temporary file and a rename, a whole
folder (a saved dataset) through a temporary folder and a rename, and record-by-record outputs are
append-only JSONL that a resumed run reads back to skip finished work.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from io import TextIOWrapper
from pathlib import Path
from typing import IO, Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)


class InputError(ValueError):
    """Bad user input, located precisely enough to fix it: file, record and field."""

    def __init__(
        self, path: str | os.PathLike, message: str, record: int | str | None = None, field: str | None = None
    ):
        self.path, self.record, self.field = str(path), record, field
        where = self.path + (f":{record}" if record is not None else "")
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}: {what}{message}")


def first_error(err: ValidationError) -> tuple[str | None, str]:
    """The field and message of pydantic's first error, for an :class:`InputError` of one line (pydantic's own
    message lists every error over several lines)."""
    first = err.errors()[0]
    field = ".".join(str(p) for p in first["loc"]) or None
    return field, first["msg"].removeprefix("Value error, ")  # a validator's own words, as it wrote them


def parse_record(model: type[T], data: object, path: str | os.PathLike, record: int | str) -> T:
    """Validate one record, turning pydantic's error into an ``InputError`` that names the field."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        field, msg = first_error(err)
        raise InputError(path, msg, record=record, field=field) from None


def _open_bytes(path: Path) -> IO[bytes]:
    """Open a file for reading bytes, decompressing it when its name ends in ``.gz`` (public dumps often are)."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")


def open_text(path: str | os.PathLike) -> IO[str]:
    """Open a UTF-8 text file for reading, gzip-compressed when its name ends in ``.gz``."""
    return TextIOWrapper(_open_bytes(Path(path)), encoding="utf-8", newline="")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)``; a file that cannot be read or decoded is named with the line it fails at.

    Bytes are decoded line by line, not by the buffered text layer, whose decoder fails on a chunk ahead
    of the line being read. A damaged gzip stream fails mid-read with ``EOFError``, which click would
    otherwise turn into a bare "Aborted.".
    """
    number = 0
    with _open_bytes(path) as f:
        while True:
            try:
                raw = f.readline()
            except (OSError, EOFError, zlib.error) as err:
                what = "gzip file" if path.name.endswith(".gz") else "file"
                raise InputError(path, f"cannot read the {what} ({err})", record=number + 1) from None
            if not raw:
                return
            number += 1
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                where = f"byte 0x{raw[err.start]:02x} at position {err.start + 1} of the line"
                raise InputError(path, f"not UTF-8 text ({where})", record=number) from None
            yield number, text


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, object)`` for each non-empty line; malformed JSON names its line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "file not found")
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(path, f"not valid JSON ({err.msg} at column {err.colno})", record=number) from None
        if not isinstance(obj, dict):
            raise InputError(path, f"expected a JSON object, got {type(obj).__name__}", record=number)
        yield number, obj


def read_jsonl(path: str | os.PathLike, model: type[T]) -> list[T]:
    """Read and validate a whole JSONL file (line numbers are the record numbers in errors)."""
    return [parse_record(model, obj, path, number) for number, obj in iter_jsonl(path)]


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Write to a temporary file next to ``path`` and rename it into place only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Fill a fresh temporary folder next to ``path``; on success it replaces ``path`` whole.

    A folder (a saved dataset with its card) is many files, so no single rename writes it: the previous
    folder is moved aside, the new one renamed into place, then the old one removed. A reader therefore
    finds the previous complete folder or the new complete one. On an error the temporary folder goes
    and ``path`` is untouched; a ``path`` that is a file is refused before anything is touched. Leftovers of a
    killed run are mended first: a stale temporary folder is removed, and a previous folder that was moved aside
    but never replaced is put back.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():  # replacing a user's file by a folder is never what was asked
        raise InputError(path, "exists and is not a folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = path.with_name(f".{path.name}.tmp"), path.with_name(f".{path.name}.old")
    if old.exists():
        if path.exists():
            shutil.rmtree(old)
        else:
            old.rename(path)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    if old.exists():
        shutil.rmtree(old)


def write_jsonl(path: str | os.PathLike, records: Iterable[BaseModel | dict]) -> None:
    """Write a whole JSONL file atomically."""
    with atomic_write(path) as f:
        for rec in records:
            f.write(_dumps(rec) + "\n")


def trim_step_log(path: str | os.PathLike, last_step: int) -> int:
    """Drop the rows of a training log whose ``step`` is past ``last_step``; rows without a step stay.

    A run killed after its last checkpoint has logged steps that the resumed run computes again: trimmed
    back to the checkpoint's step, the log holds every step once. A torn last line (killed mid-write) is
    dropped too. Atomic; returns how many rows went.
    """
    path = Path(path)
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] > last_step:
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        with atomic_write(path) as f:
            f.write("".join(line + "\n" for line in kept))
    return dropped


def read_step_log(path: str | os.PathLike) -> list[dict]:
    """The rows of an append-only training log (``metrics.jsonl``, GRPO's reward parts), without a torn line: a run
    killed mid-write leaves one, which a resumed run trims (:func:`trim_step_log`) but a reader of the killed run
    meets as it is."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def read_json(path: str | os.PathLike) -> dict:
    """The JSON object in ``path``, ``{}`` when there is no such file; invalid JSON is an error naming it."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError as err:
        raise InputError(path, f"not valid JSON: {err}") from None


def write_json(path: str | os.PathLike, obj: object) -> None:
    """Strict JSON: an undefined number (a correlation of constant predictions) is written as null,
    not as the NaN token that Python accepts and other readers (jq, JavaScript) reject."""
    with atomic_write(path) as f:
        json.dump(finite(obj), f, indent=2, ensure_ascii=False, default=str, allow_nan=False)
        f.write("\n")


def finite(obj: Any) -> Any:
    """NaN and infinities as None, in nested dicts and lists too: JSON has no NaN, and JavaScript (the run
    viewer) and jq reject the token Python writes for it."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def _dumps(rec: BaseModel | dict) -> str:
    if isinstance(rec, BaseModel):
        return rec.model_dump_json()
    return json.dumps(rec, ensure_ascii=False)


class ResumableJsonl:
    """An append-only JSONL output for long record-by-record jobs.

    On open it reads back what an earlier (possibly killed) run wrote, dropping a torn last line,
    so ``done`` tells which keys to skip; each ``append`` is flushed at once. A job writes here
    while it runs and calls ``finalize`` to publish the complete file under its final name.
    """

    def __init__(self, final_path: str | os.PathLike, key: str = "id"):
        self.final_path = Path(final_path)
        self.partial_path = self.final_path.with_name(self.final_path.name + ".partial")
        self.key = key
        self.records: list[dict] = []
        self.final_path.parent.mkdir(parents=True, exist_ok=True)
        source = self.final_path if self.final_path.exists() else self.partial_path
        if source.exists():
            for line in source.read_text(encoding="utf-8").splitlines():
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a torn line from a killed run: everything before it is intact
        with atomic_write(self.partial_path) as f:  # killed while rewriting it, the progress so far stays
            f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in self.records))
        self.done = {r[key] for r in self.records if key in r}
        self._f = self.partial_path.open("a", encoding="utf-8")

    def append(self, rec: BaseModel | dict) -> None:
        obj = json.loads(rec.model_dump_json()) if isinstance(rec, BaseModel) else rec
        self._f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self._f.flush()
        self.records.append(obj)
        self.done.add(obj.get(self.key))

    def finalize(self) -> Path:
        self._f.close()
        os.replace(self.partial_path, self.final_path)
        return self.final_path

    def __enter__(self) -> ResumableJsonl:
        return self

    def __exit__(self, *exc) -> None:
        if not self._f.closed:
            self._f.close()
