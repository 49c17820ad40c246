"""docs/formats.md shows every task kind's records and every raw layout as the code writes them, and each reads.

The examples live once in code (``persetrain.tasks.RECORD_EXAMPLES``, ``data_prep.readers.examples.RAW_EXAMPLES``):
here the page must show each pair of records as a JSON-lines block, and each pair must read through its real reader
(a record of its task kind behind a ``dataset.json`` card; a raw file under the name ``persetrain prepare`` looks
for). A field renamed in the schema or a reader breaks this test, not a user following the page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from data_prep.readers.examples import RAW_EXAMPLES
from persetrain.data import read_split
from persetrain.tasks import RECORD_EXAMPLES, record_examples

PAGE = Path(__file__).resolve().parents[1] / "docs" / "formats.md"


def page_blocks() -> list[list[dict]]:
    """The records of every ``jsonl`` block of the page."""
    blocks = re.findall(r"```jsonl\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    return [[json.loads(line) for line in block.splitlines() if line.strip()] for block in blocks]


@pytest.mark.parametrize("layout", list(RECORD_EXAMPLES) + list(RAW_EXAMPLES), ids=str)
def test_the_page_shows_each_layouts_records(layout):
    rows = RECORD_EXAMPLES[layout] if layout in RECORD_EXAMPLES else RAW_EXAMPLES[layout].rows
    assert list(rows) in page_blocks(), f"docs/formats.md does not show the {layout} records as the code writes them"


@pytest.mark.parametrize(("kind", "layout"), list(RECORD_EXAMPLES), ids=str)
def test_each_task_kinds_records_read_as_its_examples(kind, layout, tmp_path):
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORD_EXAMPLES[kind, layout]))
    (tmp_path / "dataset.json").write_text(json.dumps({"task": kind}))
    task, examples = read_split(tmp_path)
    assert task.name == kind and len(examples) == 2
    assert record_examples(kind)[layout] == RECORD_EXAMPLES[kind, layout]


@pytest.mark.parametrize("name", list(RAW_EXAMPLES))
def test_each_raw_layouts_rows_read_through_its_reader(name, tmp_path):
    layout = RAW_EXAMPLES[name]
    path = tmp_path / layout.file
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in layout.rows))
    assert len(layout.read(path)) == 2
