"""The one loader of a dataset saved with ``save_to_disk``: what every ``persetrain prepare`` command writes.

``datasets.load_from_disk`` trusts the folder: a split listed in ``dataset_dict.json`` whose folder is gone, or a
``splits`` that is a string (its letters taken for split names), fails deep inside ``datasets`` with a file it
guessed. Every reader of a prepared dataset (the trainers' row readers, the evaluation readers, the ``prepare``
commands that build on another dataset, ``persetrain push --dataset``, the demos) loads it here, so that a folder
that is not one, or a split that is missing, is one line naming the folder (``persetrain.io.InputError``).

It sits below ``persetrain.rows`` and ``persetrain.data`` (both read saved datasets), and reads no card but
``datasets``' own index: what a dataset holds (its task kind) is ``persetrain.data``'s business.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from persetrain.io import InputError

if TYPE_CHECKING:
    from datasets import Dataset, DatasetDict

DATASET_INDEX = "dataset_dict.json"  # what ``DatasetDict.save_to_disk`` writes beside the splits
SPLIT_STATE = "state.json"  # what ``Dataset.save_to_disk`` writes in a split's folder (or a lone Dataset's)
T = TypeVar("T")


def read_card(card: Path) -> dict:
    """The JSON object of a card (``dataset.json``, ``build_info.json``) or of ``datasets``' own index."""
    try:
        info = json.loads(card.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(card, f"not readable JSON ({err})") from None
    if not isinstance(info, dict):
        raise InputError(card, f"expected a JSON object, got {json.dumps(info)}")
    return info


def _not_saved(path: Path, written_by: str | None) -> InputError:
    what = f"a dataset `{written_by}` wrote" if written_by else "a dataset saved with save_to_disk"
    return InputError(path, f"not {what} (no {DATASET_INDEX})")


def saved_splits(path: Path, written_by: str | None = None) -> list[str]:
    """The split names in ``datasets``' own index of a ``DatasetDict`` saved at ``path``, read here so that a damaged
    index, or a ``splits`` that is not a list of names, is named. ``written_by``: the command that writes such a
    dataset, named when ``path`` is not one."""
    index = Path(path) / DATASET_INDEX
    if not index.is_file():
        raise _not_saved(Path(path), written_by)
    splits = read_card(index).get("splits")
    if not isinstance(splits, list) or not all(isinstance(name, str) and name for name in splits):
        raise InputError(index, f"expected a list of split names, got {json.dumps(splits)}", field="splits")
    return splits


def _check_split(path: Path, split: str) -> None:
    if not (path / split / SPLIT_STATE).is_file():
        problem = f"split {split!r} is missing or incomplete: no {path / split / SPLIT_STATE}"
        raise InputError(path / DATASET_INDEX, problem, field="splits")


def complete_splits(path: str | Path, written_by: str | None = None) -> list[str]:
    """:func:`saved_splits`, each split's folder checked to hold a saved split: what lists a dataset's splits
    without loading it."""
    splits = saved_splits(Path(path), written_by)
    for split in splits:
        _check_split(Path(path), split)
    return splits


def _loaded(load: Callable[[], T], path: Path) -> T:
    """``load()``, an error of ``datasets`` (a damaged Arrow file, a state that names none) one line naming ``path``."""
    try:
        return load()
    except (FileNotFoundError, json.JSONDecodeError, ValueError) as err:
        raise InputError(path, f"not a dataset saved with save_to_disk ({str(err).splitlines()[0]})") from None


def _is_lone(path: Path) -> bool:
    """Whether ``path`` holds one ``Dataset`` saved alone (no ``DatasetDict`` index)."""
    return not (path / DATASET_INDEX).is_file() and (path / SPLIT_STATE).is_file()


def load_prepared(path: str | Path, written_by: str | None = None, *, lone: bool = False) -> DatasetDict:
    """Every split of the ``DatasetDict`` saved at ``path``, each split's folder checked first.

    ``written_by``: the command that writes it, named when ``path`` is not one. ``lone``: also take a ``Dataset``
    saved alone, as the split ``train`` (rows a user saved; a ``prepare`` command always writes a ``DatasetDict``).
    """
    from datasets import Dataset, DatasetDict

    path = Path(path)
    if lone and _is_lone(path):
        return DatasetDict({"train": _loaded(lambda: Dataset.load_from_disk(str(path)), path)})
    complete_splits(path, written_by)
    return _loaded(lambda: DatasetDict.load_from_disk(str(path)), path)


def load_prepared_split(path: str | Path, split: str, written_by: str | None = None, *, lone: bool = False) -> Dataset:
    """One split of the dataset saved at ``path`` (:func:`load_prepared`), only its own folder read."""
    from datasets import Dataset

    path = Path(path)
    if lone and _is_lone(path):
        splits, folder = ["train"], path
    else:
        splits, folder = saved_splits(path, written_by), path / split
    if split not in splits:
        raise InputError(path, f"has no split {split!r}; it has {sorted(splits)}")
    if folder != path:
        _check_split(path, split)
    return _loaded(lambda: Dataset.load_from_disk(str(folder)), folder)
