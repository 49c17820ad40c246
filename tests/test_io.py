"""persetrain.io's folder writes: a folder is replaced whole or not at all, and a killed run's leftovers are mended.

And the dataset readers (``persetrain.data.read_split`` over ``persetrain.io``): bad input is one error naming the
file, the record and the field, whatever is wrong (a card's field, the bytes of a file, a record, or records together).
"""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.data import read_split
from persetrain.io import InputError, atomic_dir, read_step_log, trim_step_log


def _fill(folder, **files):
    for name, text in files.items():
        (folder / name).write_text(text)


def test_a_written_folder_replaces_the_previous_one_whole(tmp_path):
    out = tmp_path / "data"
    with atomic_dir(out) as tmp:
        _fill(tmp, a="1", b="1")
        assert not out.exists()  # nothing is visible until the block ends
    with atomic_dir(out) as tmp:
        _fill(tmp, a="2")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a": "2"}  # b of the first write is gone
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_an_error_leaves_the_previous_folder_as_it_was(tmp_path):
    out = tmp_path / "data"
    with atomic_dir(out) as tmp:
        _fill(tmp, a="1")
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        _fill(tmp, a="half")
        raise RuntimeError("the writer failed")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a": "1"}
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_a_killed_runs_leftovers_are_mended_before_writing(tmp_path):
    out = tmp_path / "data"
    stale = tmp_path / ".data.tmp"
    stale.mkdir()
    _fill(stale, half="written")
    # killed between moving the previous folder aside and renaming the new one into place
    aside = tmp_path / ".data.old"
    aside.mkdir()
    _fill(aside, a="previous")
    with pytest.raises(RuntimeError), atomic_dir(out) as tmp:
        assert list(tmp.iterdir()) == []  # the stale half-written folder is not reused
        raise RuntimeError("fails again")
    assert {p.name: p.read_text() for p in out.iterdir()} == {"a": "previous"}
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_a_file_in_the_way_of_a_folder_is_refused_untouched(tmp_path):
    out = tmp_path / "data"
    out.write_text("the user's file")
    with pytest.raises(InputError, match=r"data: exists and is not a folder"), atomic_dir(out) as tmp:
        _fill(tmp, a="1")
    assert out.read_text() == "the user's file"
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


# ------------------------------------------------------------------------------------------------ dataset readers
MCQ = {"id": "a", "preference": "p", "question": "q", "options": ["x", "y", "z"], "gold": 0}
SCALAR = {
    "id": "s1",
    "reviewer_id": "r1",
    "profile": [{"plot_id": "p1", "plot": "A plot", "review": "ok", "score": 5}],
    "query_plot_id": "q1",
    "query_plot": "Q plot",
    "score": 4,
    "score_max": 5,
}
REFERENCE = {"id": "r1", "user_id": "u1", "input": "w", "profile": ["I liked it"], "outputs": {"rag": "a", "non": "b"}}


def _dataset(folder, records, card=None, name="test.jsonl"):
    """A JSONL dataset; ``records`` are dicts or the raw bytes of the file."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dataset.json").write_text(json.dumps(card or {"task": "mcq"}))
    data = records if isinstance(records, bytes) else "".join(json.dumps(r) + "\n" for r in records).encode()
    (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize(
    ("card", "error"),
    [
        ({"task": ["mcq"]}, r"dataset\.json: field 'task': expected the name of a task kind, got \[\"mcq\"\]$"),
        ({"task": "mcq", "splits": "test.jsonl"}, r"dataset\.json: field 'splits': expected an object .*got \"test"),
        ({"task": "mcq", "splits": ["test.jsonl"]}, r"dataset\.json: field 'splits': expected an object .*got \["),
        ({"task": "mcq", "splits": {"test": 5}}, r"dataset\.json: field 'splits\.test': expected a file name, got 5$"),
    ],
    ids=["task-list", "splits-text", "splits-list", "split-number"],
)
def test_a_card_field_of_the_wrong_type_is_named(tmp_path, card, error):
    with pytest.raises(InputError, match=error):
        read_split(_dataset(tmp_path / "d", [MCQ], card))


def test_a_damaged_gzip_file_is_one_error_naming_it_not_aborted(tmp_path):
    card = {"task": "mcq", "splits": {"test": "test.jsonl.gz"}}
    lines = "".join(json.dumps({**MCQ, "id": str(i)}) + "\n" for i in range(2000)).encode()
    cut = _dataset(tmp_path / "cut", gzip.compress(lines)[:2000], card, "test.jsonl.gz")
    not_gzip = _dataset(tmp_path / "not", b"not gzip at all\n", card, "test.jsonl.gz")
    for data, error in [(cut, "Compressed file ended"), (not_gzip, "Not a gzipped file")]:
        result = CliRunner().invoke(
            app, ["-q", "evaluate", "--data", str(data), "--out", str(tmp_path / "run"), "--baseline", "odd-one-out"]
        )
        assert result.exit_code == 2, result.output
        assert result.output.startswith(f"error: {data / 'test.jsonl.gz'}:")
        assert f"cannot read the gzip file ({error}" in result.output and "Aborted" not in result.output
    with pytest.raises(InputError, match=r"test\.jsonl\.gz:(\d+): ") as err:
        read_split(cut)
    assert err.value.record > 1  # the line being read when the stream ended, not the first


def test_text_that_is_not_utf8_is_named_with_its_line(tmp_path):
    data = _dataset(tmp_path / "d", json.dumps(MCQ).encode() + b'\n{"id": "b", "preference": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"test\.jsonl:2: not UTF-8 text \(byte 0xe9 at position 31 of the line\)$"):
        read_split(data)


def test_a_damaged_index_of_a_prepared_dataset_is_named(tmp_path):
    from datasets import Dataset, DatasetDict

    data = tmp_path / "prepared"
    DatasetDict(train=Dataset.from_list([MCQ, {**MCQ, "id": "b", "gold": 2}])).save_to_disk(str(data))
    (data / "build_info.json").write_text(json.dumps({"task": "mcq"}))
    assert [ex.id for ex in read_split(data, "train")[1]] == ["a", "b"]
    (data / "dataset_dict.json").write_text('{"splits": ["train",\n')
    with pytest.raises(InputError, match=r"prepared/dataset_dict\.json: not readable JSON \(Expecting value"):
        read_split(data, "train")


@pytest.mark.parametrize(
    ("card", "record", "error"),
    [
        ({"task": "mcq"}, {**MCQ, "gold": 7}, r"field 'gold': gold index 7 is outside the 3 options$"),
        ({"task": "mcq"}, {**MCQ, "options": ["x", " ", "z"]}, r"field 'options': option 1 is empty$"),
        ({"task": "mcq"}, {**MCQ, "gold": "1"}, r"field 'gold': Input should be a valid integer$"),
        ({"task": "mcq"}, {**MCQ, "gold": True}, r"field 'gold': Input should be a valid integer$"),
        ({"task": "scalar"}, {**SCALAR, "score": 9}, r"field 'score_max': score 9 is above score_max 5$"),
        (
            {"task": "scalar"},
            {**SCALAR, "profile": [{**SCALAR["profile"][0], "score": 6}]},
            r"field 'score_max': profile item 0's score 6 is above score_max 5$",
        ),
        ({"task": "scalar"}, {**SCALAR, "query_plot_id": "p1"}, r"field 'query_plot_id': plot 'p1' is also in"),
    ],
    ids=["gold-range", "blank-option", "gold-text", "gold-bool", "score-max", "profile-score-max", "query-in-profile"],
)
def test_a_check_across_fields_names_its_field_in_its_own_words(tmp_path, card, record, error):
    first = MCQ if card["task"] == "mcq" else SCALAR
    with pytest.raises(InputError, match=r"test\.jsonl:2: " + error) as err:
        read_split(_dataset(tmp_path / "d", [first, {**record, "id": "b"}], card))
    assert "Value error" not in str(err.value)


def test_a_repeated_id_is_named_at_its_second_record(tmp_path):
    data = _dataset(tmp_path / "d", [MCQ, {**MCQ, "gold": 1}])
    with pytest.raises(InputError, match=r"test\.jsonl:2: field 'id': 'a' is already the id of record 1$"):
        read_split(data)


def test_reference_records_must_hold_the_same_systems(tmp_path):
    card = {"task": "reference"}
    data = _dataset(tmp_path / "d", [REFERENCE, {**REFERENCE, "id": "r2", "outputs": {"rag": "a"}}], card)
    with pytest.raises(InputError, match=r"test\.jsonl:2: field 'outputs': no output of non, unlike the first record"):
        read_split(data)
    extra = {**REFERENCE, "id": "r2", "outputs": {**REFERENCE["outputs"], "x": "c"}}
    data = _dataset(tmp_path / "e", [REFERENCE, extra], card)
    with pytest.raises(InputError, match=r"test\.jsonl:2: field 'outputs': outputs of x, unlike the first record"):
        read_split(data)
    assert len(read_split(_dataset(tmp_path / "f", [REFERENCE, {**REFERENCE, "id": "r2"}], card))[1]) == 2


def test_a_killed_runs_step_log_reads_without_its_torn_line_and_a_resume_trims_it(tmp_path):
    """A process killed mid-write leaves a torn last line: a reader of the killed run skips it, and a resumed run
    trims it with the steps past its checkpoint."""
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"event": "log", "step": 1}\n{"event": "log", "step": 2}\n{"event": "log", "st')
    assert read_step_log(log) == [{"event": "log", "step": 1}, {"event": "log", "step": 2}]
    assert trim_step_log(log, 1) == 2
    assert read_step_log(log) == [{"event": "log", "step": 1}] and log.read_text().endswith("}\n")
