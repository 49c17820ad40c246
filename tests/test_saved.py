"""The one loader of a saved dataset (``persetrain.saved``): a folder that is not one, a split gone or a split not
there is one line naming the folder, the same for every reader (the trainers' rows, ``evaluate``'s examples,
``push --dataset``)."""

from __future__ import annotations

import json
import shutil

import pytest
from datasets import Dataset, DatasetDict

from persetrain.data import read_split
from persetrain.hub.folders import build_dataset_folder
from persetrain.io import InputError
from persetrain.rows import load_rows
from persetrain.saved import complete_splits, load_prepared, load_prepared_split

ROWS = [{"id": "a", "text": "one"}, {"id": "b", "text": "two"}]


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "saved"
    DatasetDict(train=Dataset.from_list(ROWS), test=Dataset.from_list(ROWS[:1])).save_to_disk(str(path))
    return path


def test_a_saved_dataset_loads_whole_or_by_split(saved):
    assert {split: len(rows) for split, rows in load_prepared(saved).items()} == {"train": 2, "test": 1}
    assert load_prepared_split(saved, "test")["id"] == ["a"]
    assert complete_splits(saved) == ["train", "test"]


def test_a_folder_that_is_not_one_names_the_command_that_writes_it(tmp_path):
    with pytest.raises(InputError, match=rf"^{tmp_path}: not a dataset `persetrain prepare parl` wrote \(no dataset"):
        load_prepared(tmp_path, "persetrain prepare parl")
    with pytest.raises(InputError, match=rf"^{tmp_path}: not a dataset saved with save_to_disk \(no dataset_dict"):
        load_prepared_split(tmp_path, "train")


def test_a_split_gone_is_one_line_for_every_reader(saved, tmp_path):
    shutil.rmtree(saved / "test")
    (saved / "build_info.json").write_text(json.dumps({"task": "mcq"}))
    line = rf"^{saved / 'dataset_dict.json'}: field 'splits': split 'test' is missing or incomplete"
    for read in (
        lambda: load_prepared(saved),
        lambda: complete_splits(saved),
        lambda: load_rows(saved, "test"),
        lambda: read_split(saved, "test"),
        lambda: build_dataset_folder(saved, tmp_path / "out"),
    ):
        with pytest.raises(InputError, match=line):
            read()
    assert load_prepared_split(saved, "train")["id"] == ["a", "b"]  # the split asked for is whole
    assert not (tmp_path / "out").exists()


def test_a_split_not_there_is_named_with_the_splits_there(saved):
    with pytest.raises(InputError, match=rf"^{saved}: has no split 'dev'; it has \['test', 'train'\]$"):
        load_prepared_split(saved, "dev")


def test_a_dataset_saved_alone_is_the_split_train_where_rows_are_read(tmp_path):
    lone = tmp_path / "lone"
    Dataset.from_list(ROWS).save_to_disk(str(lone))
    assert load_rows(lone, "train").data["id"] == ["a", "b"]
    assert list(load_prepared(lone, lone=True)) == ["train"]
    with pytest.raises(InputError, match=r"not a dataset `persetrain prepare` wrote \(no dataset_dict.json\)"):
        load_prepared(lone, "persetrain prepare")
