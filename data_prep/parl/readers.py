"""PARL data readers: the three task layouts, and the negatives ``persetrain generate-baselines`` writes.

Readers turn each layout into ``persetrain.schema.RubricExample`` records, one per user: the user's
most recent item is the target and the history is up to ``history_size`` (10) latest earlier items,
oldest first. Layouts (documented with their fields in ``data_prep/README.md``):

* ``amazon`` — Amazon Reviews 2023: ``reviews.jsonl`` (``user_id``, ``parent_asin``, ``timestamp``,
  ``rating``, ``title``, ``text``) + ``meta.jsonl`` (``parent_asin``, ``title``, ``description``);
  the task input is the item's title and description, the rating and the review title.
* ``reddit`` — LongLaMP topic writing: JSON lines ``{name, input (summary), output (content),
  profile: [{summary, content}]}``, profile oldest first.
* ``news`` — LaMP-4: ``questions.json`` (``[{id, input: "Generate a headline for the following
  article: ...", profile: [{text, title}]}]``) + ``outputs.json`` (``{golds: [{id, output}]}``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from persetrain.console import track
from persetrain.io import InputError, iter_jsonl, parse_record
from persetrain.prompts.parl import check_task
from persetrain.schema import RubricExample

HISTORY_SIZE = 10
LAMP4_PREFIX = "Generate a headline for the following article: "
#: Files of each layout, relative to the task's folder.
LAYOUT_FILES: dict[str, tuple[str, ...]] = {
    "amazon": ("reviews.jsonl", "meta.jsonl"),
    "reddit": ("topic_writing.jsonl",),
    "news": ("questions.json", "outputs.json"),
}


#: The tables of the PARL layouts and their fields (each read from the column of the same name unless ``--columns
#: TABLE.FIELD=COLUMN`` names another; a profile item's fields are the table's too).
PARL_TABLES: dict[str, dict[str, str]] = {
    "amazon_reviews": {f: f for f in ("user_id", "parent_asin", "timestamp", "rating", "title", "text")},
    "amazon_meta": {f: f for f in ("parent_asin", "title", "description")},
    "reddit": {f: f for f in ("name", "input", "output", "profile", "summary", "content")},
    "news": {f: f for f in ("id", "user_id", "input", "profile", "text", "title", "date")},
}


def renamed(record: object, columns: Mapping[str, str] | None) -> object:
    """A record read under a column mapping (our field -> the file's column): each mapped field holds its column's
    value; a record that is not an object is left for the reader to refuse."""
    if not columns or not isinstance(record, dict):
        return record
    return {**record, **{field: record[column] for field, column in columns.items() if column in record}}


def _text(path: Path, line: int | str, record: dict, field: str, required: bool = True, number: bool = False) -> str:
    """A field's text, stripped; a list of texts is joined. ``number``: a number is taken too (a rating, an id):
    elsewhere a number is an error, not text, since a misplaced column would pass as "5"."""
    value = record.get(field)
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InputError(path, "missing or empty", record=line, field=field)
        return ""
    if not isinstance(value, str | int | float) or (not number and not isinstance(value, str)):
        raise InputError(path, f"expected text, got {type(value).__name__}", record=line, field=field)
    return str(value).strip()


def _example(
    task: str,
    user: str,
    id: str,
    items: list[tuple[str, str]],
    path: Path,
    line: int | str,
    field: str,
    min_history: int,
    history_size: int,
) -> RubricExample:
    """The example of one user from items oldest first (the last one is the target)."""
    history = items[:-1][-history_size:]
    if len(history) < min_history:
        raise InputError(
            path,
            f"user {user!r} has {len(history)} earlier items; at least {min_history} are "
            "required (lower --min-history or drop the user)",
            record=line,
            field=field,
        )
    return parse_record(
        RubricExample,
        {
            "id": id,
            "task": task,
            "user_id": user,
            "input": items[-1][0],
            "output": items[-1][1],
            "history": [{"input": i, "output": o} for i, o in history],
        },
        path,
        line,
    )


def amazon_input(item_title: str, description: str, rating: str, review_title: str) -> str:
    return f"Item title: {item_title}\nItem description: {description}\nRating: {rating}\nReview title: {review_title}"


def read_amazon(
    reviews_path: Path,
    meta_path: Path,
    min_history: int = 1,
    history_size: int = HISTORY_SIZE,
    columns: Mapping[str, Mapping[str, str]] | None = None,
) -> list[RubricExample]:
    columns = columns or {}
    meta: dict[str, tuple[str, str]] = {}
    for line, rec in track(iter_jsonl(meta_path), description=f"read {meta_path.name}"):
        rec = renamed(rec, columns.get("amazon_meta"))
        asin = _text(meta_path, line, rec, "parent_asin", number=True)
        meta.setdefault(
            asin, (_text(meta_path, line, rec, "title"), _text(meta_path, line, rec, "description", required=False))
        )
    by_user: dict[str, list[tuple[float, int, str, str]]] = defaultdict(list)
    for line, rec in track(iter_jsonl(reviews_path), description=f"read {reviews_path.name}"):
        rec = renamed(rec, columns.get("amazon_reviews"))
        user = _text(reviews_path, line, rec, "user_id", number=True)
        asin = _text(reviews_path, line, rec, "parent_asin", number=True)
        if asin not in meta:
            raise InputError(reviews_path, f"item {asin!r} is not in {meta_path}", record=line, field="parent_asin")
        try:
            stamp = float(rec.get("timestamp"))
        except (TypeError, ValueError):
            raise InputError(reviews_path, "expected a number", record=line, field="timestamp") from None
        title, description = meta[asin]
        rating = _text(reviews_path, line, rec, "rating", number=True)
        rating = rating[:-2] if rating.endswith(".0") else rating
        item_input = amazon_input(title, description, rating, _text(reviews_path, line, rec, "title", required=False))
        by_user[user].append((stamp, line, item_input, _text(reviews_path, line, rec, "text")))
    examples = []
    for user, items in by_user.items():
        items.sort()
        examples.append(
            _example(
                "amazon",
                user,
                f"amazon:{user}",
                [(i, o) for _, _, i, o in items],
                reviews_path,
                items[-1][1],
                "user_id",
                min_history,
                history_size,
            )
        )
    return examples


def read_longlamp(
    path: Path,
    min_history: int = 1,
    history_size: int = HISTORY_SIZE,
    columns: Mapping[str, Mapping[str, str]] | None = None,
) -> list[RubricExample]:
    mapping = (columns or {}).get("reddit")
    examples = []
    for line, rec in track(iter_jsonl(path), description=f"read {path.name}"):
        rec = renamed(rec, mapping)
        user = _text(path, line, rec, "name", number=True)
        profile = rec.get("profile")
        profile = [renamed(p, mapping) for p in profile] if isinstance(profile, list) else profile
        if not isinstance(profile, list):
            raise InputError(path, "expected a list of {summary, content} items", record=line, field="profile")
        items = [
            (_text(path, line, p, "summary"), _text(path, line, p, "content"))
            if isinstance(p, dict)
            else _bad_item(path, line, "profile")
            for p in profile
        ]
        items.append((_text(path, line, rec, "input"), _text(path, line, rec, "output")))
        examples.append(
            _example("reddit", user, f"reddit:{user}", items, path, line, "profile", min_history, history_size)
        )
    return examples


def _bad_item(path: Path, line: int | str, field: str):
    raise InputError(path, "every item must be an object", record=line, field=field)


def _load_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "missing file") from None
    except json.JSONDecodeError as err:
        raise InputError(path, f"not valid JSON ({err.msg})", record=err.lineno) from None


def read_lamp4(
    questions_path: Path,
    outputs_path: Path,
    min_history: int = 1,
    history_size: int = HISTORY_SIZE,
    columns: Mapping[str, Mapping[str, str]] | None = None,
) -> list[RubricExample]:
    mapping = (columns or {}).get("news")
    questions, outputs = _load_json(questions_path), _load_json(outputs_path)
    if not isinstance(questions, list):
        raise InputError(questions_path, "expected a JSON list of questions")
    golds = outputs.get("golds") if isinstance(outputs, dict) else None
    if not isinstance(golds, list):
        raise InputError(outputs_path, 'expected {"golds": [{"id", "output"}, ...]}', field="golds")
    gold = {str(g.get("id")): g.get("output") for g in golds if isinstance(g, dict)}
    examples = []
    for n, rec in enumerate(track(questions, description=f"read {questions_path.name}")):
        where = f"question {n}"
        rec = renamed(rec, mapping)
        if not isinstance(rec, dict):
            raise InputError(questions_path, "expected an object", record=where)
        qid = _text(questions_path, where, rec, "id", number=True)
        article = _text(questions_path, where, rec, "input").removeprefix(LAMP4_PREFIX)
        if not isinstance(gold.get(qid), str) or not gold[qid].strip():
            raise InputError(outputs_path, f"no headline for question {qid!r}", record=qid, field="output")
        profile = rec.get("profile")
        if not isinstance(profile, list):
            raise InputError(questions_path, "expected a list of {text, title} items", record=where, field="profile")
        profile = [renamed(p, mapping) for p in profile]
        if all(isinstance(p, dict) and "date" in p for p in profile):
            profile = sorted(profile, key=lambda p: str(p["date"]))
        items = [
            (_text(questions_path, where, p, "text"), _text(questions_path, where, p, "title"))
            if isinstance(p, dict)
            else _bad_item(questions_path, where, "profile")
            for p in profile
        ]
        items.append((article, gold[qid].strip()))
        user = str(rec.get("user_id") or qid)
        examples.append(
            _example("news", user, f"news:{qid}", items, questions_path, where, "profile", min_history, history_size)
        )
    return examples


def read_task(
    folder: Path,
    task: str,
    min_history: int = 1,
    history_size: int = HISTORY_SIZE,
    columns: Mapping[str, Mapping[str, str]] | None = None,
) -> list[RubricExample]:
    """The examples of ``task`` from its layout's files in ``folder``; an unknown task or a layout with no user
    is an error (every command that reads a PARL task comes through here). ``columns``: ``{table: {field:
    column}}`` (:data:`PARL_TABLES`), ``--columns`` of the commands."""
    paths = [folder / name for name in LAYOUT_FILES[check_task(task)]]
    for p in paths:
        if not p.is_file():
            raise InputError(p, f"missing: the {task} layout needs {', '.join(LAYOUT_FILES[task])}")
    reader = {"amazon": read_amazon, "reddit": read_longlamp, "news": read_lamp4}[task]
    examples = reader(*paths, min_history=min_history, history_size=history_size, columns=columns)
    if not examples:
        raise InputError(paths[0], f"holds no records: the {task} layout needs at least one user")
    return examples


def read_baselines(path: Path) -> dict[str, dict[str, str]]:
    """``{example id: {generator: text}}`` from a file ``generate-baselines`` wrote."""
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for line, rec in iter_jsonl(path):
        found[_text(path, line, rec, "id")][_text(path, line, rec, "generator")] = _text(path, line, rec, "output")
    return found
