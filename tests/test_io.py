"""persetrain.io's folder writes: a folder is replaced whole or not at all, and a killed run's leftovers are mended."""

from __future__ import annotations

import pytest

from persetrain.io import atomic_dir


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
