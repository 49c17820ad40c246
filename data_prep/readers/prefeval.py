"""Reader for PrefEval's implicit multiple-choice benchmark (Zhao et al., ICLR 2025).

Layout (the benchmark repository's ``benchmark_dataset/``): ``mcq_options/<topic>.json``, each a JSON
list of items ``{preference, question, explanation, classification_task_options: [4 str], ...}``.
The first option of every item is the one that follows the user's preference. A model shown them in
that order could score by position, so each question's options are shuffled with a seed derived
from the run's seed and the question's id (``<topic>-<index>``): the order is the same on every
run with that seed and on every machine, and different questions get different orders. ``gold`` is
where the first option landed.

``read_prefeval`` accepts the benchmark folder (it reads ``mcq_options/*.json``), a folder holding
those JSON files directly, or one such file; ``persetrain.data`` registers it as the ``prefeval``
reader, so ``persetrain evaluate --data`` takes such a path. PrefEval has no splits: every split name
reads the same questions. Errors name the file, the item index and the field.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from data_prep.readers.tables import ColumnMap, map_record, merged_columns, parse_row
from persetrain.io import InputError
from persetrain.schema import McqExample

TASK = "mcq"
OPTIONS_DIR = "mcq_options"

#: our field -> the item's key (``--columns`` maps others); ``explanation`` may be absent unless mapped
PREFEVAL_COLUMNS = {
    "preference": "preference",
    "question": "question",
    "explanation": "explanation",
    "classification_task_options": "classification_task_options",
}
#: the one table of ``prepare preference`` / ``prepare verdict``'s ``--prefeval`` (``--columns prefeval.FIELD=KEY``)
PREFEVAL_TABLES = {"prefeval": PREFEVAL_COLUMNS}


class _Item(BaseModel):
    """One item of a PrefEval topic file, as the benchmark writes it (other keys are ignored)."""

    model_config = ConfigDict(extra="ignore")
    preference: str = Field(min_length=1)
    question: str = Field(min_length=1)
    classification_task_options: list[str] = Field(min_length=1)
    explanation: str = ""


def topic_files(path: str | Path) -> list[Path]:
    """The topic files a path stands for: ``path/mcq_options/*.json``, ``path/*.json`` or ``path``."""
    path = Path(path)
    if path.is_file():
        return [path]
    if (path / OPTIONS_DIR).is_dir():
        return sorted((path / OPTIONS_DIR).glob("*.json"))
    return sorted(path.glob("*.json"))


def _looks_like_topic_file(path: Path) -> bool:
    """A JSON list whose first item has PrefEval's option key (read cheaply: the start of the file)."""
    try:
        head = path.read_text(encoding="utf-8")[:4096]
    except (OSError, UnicodeDecodeError):
        return False
    return head.lstrip().startswith("[") and '"classification_task_options"' in head


def is_prefeval(path: str | Path) -> bool:
    """Detect PrefEval's layout: a folder with ``mcq_options/*.json``, or topic files themselves."""
    path = Path(path)
    if path.is_dir() and (path / OPTIONS_DIR).is_dir():
        return True
    files = topic_files(path) if path.exists() else []
    return bool(files) and all(f.suffix == ".json" for f in files) and _looks_like_topic_file(files[0])


def shuffle_options(options: list[str], key: str) -> tuple[list[str], int]:
    """Options in a fixed order seeded by ``key``, and the new index of the first (gold) option."""
    order = list(range(len(options)))
    random.Random(int(hashlib.sha256(key.encode()).hexdigest()[:16], 16)).shuffle(order)
    return [options[k] for k in order], order.index(0)


def read_topic(path: Path, seed: int = 0, columns: ColumnMap | None = None) -> list[McqExample]:
    """Every item of one topic file as an ``McqExample`` with shuffled options; ``columns`` maps our fields to other
    keys (:data:`PREFEVAL_COLUMNS`), and a mapped key an item lacks is an error at that item."""
    mapping = merged_columns(PREFEVAL_COLUMNS, columns)
    required = [f for f in mapping if f != "explanation" or f in (columns or {})]
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(path, f"not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(path, f"cannot be read ({err})") from None
    if not isinstance(items, list):
        raise InputError(path, f"expected a JSON list of items, got {type(items).__name__}")
    topic = path.stem
    examples = []
    for index, obj in enumerate(items):
        if not isinstance(obj, dict):
            raise InputError(path, f"expected a JSON object, got {type(obj).__name__}", record=index)
        item = parse_row(_Item, map_record(obj, mapping, required, path, index), path, index, mapping)
        _check_options(item.classification_task_options, path, index, mapping["classification_task_options"])
        example_id = f"{topic}-{index}"
        options, gold = shuffle_options(item.classification_task_options, f"{seed}-{example_id}")
        examples.append(
            McqExample(
                id=example_id,
                preference=item.preference,
                question=item.question,
                options=options,
                gold=gold,
                topic=topic,
                explanation=item.explanation,
            )
        )
    return examples


def _check_options(options: list[str], path: Path, index: int, field: str) -> None:
    """Options a judge can choose between: at least two, none empty, and no distractor with the text of the
    preference-following (first) option, which would leave the gold answer undefined. ``field``: the file's key."""
    if len(options) < 2:
        raise InputError(path, f"has {len(options)} option; a question needs at least 2", record=index, field=field)
    for k, option in enumerate(options):
        if not option.strip():
            raise InputError(path, f"option {k} is empty", record=index, field=field)
        if k and option.strip() == options[0].strip():
            raise InputError(
                path,
                f"option {k} is the same text as the preference-following (first) option, so no judge can tell them "
                "apart",
                record=index,
                field=field,
            )


def read_prefeval(path: str | Path, split: str = "test", seed: int = 0) -> tuple[str, list[McqExample]]:
    """The task kind (``"mcq"``) and the examples of every topic file under ``path``, topic by topic."""
    files = topic_files(path)
    if not files:
        raise InputError(path, f"no PrefEval topic files: expected {OPTIONS_DIR}/*.json, *.json or one .json file")
    return TASK, [ex for f in files for ex in read_topic(f, seed)]
