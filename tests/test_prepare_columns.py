"""`--columns FIELD=COLUMN` on the prepare commands that read PrefEval items and labelled checks: a file whose keys
have other names loads once mapped, builds what the file with the usual keys builds, and a key a record lacks or a
field no reader has is one line naming the file, the record and the field."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from persetrain.cli import app

PREFEVAL_DEV = Path(__file__).resolve().parent.parent / "data" / "prefeval" / "dev" / "mcq_options"
RENAMED = {"preference": "persona", "question": "prompt", "classification_task_options": "choices"}
LABEL = {"task": "reddit", "input": "Write a post.", "text": "A headline", "rule": "The headline is short."}


def _invoke(*args: str):
    return CliRunner().invoke(app, ["--quiet", *map(str, args)])


def _renamed_prefeval(tmp_path: Path) -> Path:
    """One dev topic of PrefEval with three of its keys renamed (as another copy of the benchmark might call them)."""
    folder = tmp_path / "prefeval"
    folder.mkdir()
    items = json.loads((PREFEVAL_DEV / "lifestyle_dietary.json").read_text(encoding="utf-8"))[:6]
    renamed = [{RENAMED.get(k, k): v for k, v in item.items()} for item in items]
    (folder / "lifestyle_dietary.json").write_text(json.dumps(renamed), encoding="utf-8")
    return folder


def test_prepare_preference_maps_prefeval_keys(tmp_path):
    folder = _renamed_prefeval(tmp_path)
    args = ["prepare", "preference", "--prefeval", folder]
    result = _invoke(*args, "--out", tmp_path / "o1")
    assert result.exit_code != 0
    assert "lifestyle_dietary.json:0: field 'preference': missing column (holds our 'preference')" in result.output
    mapping = [x for field, key in RENAMED.items() for x in ("--columns", f"{field}={key}")]
    result = _invoke(*args, "--out", tmp_path / "o2", *mapping)
    assert result.exit_code == 0, result.output

    # the same items under the usual keys build the same pairs
    plain = tmp_path / "plain"
    plain.mkdir()
    items = json.loads((PREFEVAL_DEV / "lifestyle_dietary.json").read_text(encoding="utf-8"))[:6]
    (plain / "lifestyle_dietary.json").write_text(json.dumps(items), encoding="utf-8")
    result = _invoke("prepare", "preference", "--prefeval", plain, "--out", tmp_path / "o3")
    assert result.exit_code == 0, result.output
    from datasets import load_from_disk

    mapped, usual = (load_from_disk(str(tmp_path / o / "pairs")) for o in ("o2", "o3"))
    assert mapped["train"].num_rows == usual["train"].num_rows > 0
    assert mapped["train"].to_list() == usual["train"].to_list()

    result = _invoke(*args, "--out", tmp_path / "o4", *mapping, "--columns", "persona=persona")
    assert result.exit_code != 0 and "--columns 'persona=persona': no field 'persona'" in result.output
    result = _invoke(*args, "--out", tmp_path / "o5", *mapping, "--columns", "explanation=why")
    assert result.exit_code != 0
    assert "lifestyle_dietary.json:0: field 'why': missing column (holds our 'explanation')" in result.output
    assert not (tmp_path / "o4").exists() and not (tmp_path / "o5").exists()


def test_prepare_judge_maps_prefeval_keys(tmp_path):
    folder = _renamed_prefeval(tmp_path)
    args = ["prepare", "verdict", "--prefeval", folder]
    result = _invoke(*args, "--out", tmp_path / "o1", "--columns", "preference=persona", "--columns", "question=prompt")
    assert result.exit_code != 0
    msg = "lifestyle_dietary.json:0: field 'classification_task_options': missing column (holds our "
    assert msg + "'classification_task_options')" in result.output
    mapping = [x for field, key in RENAMED.items() for x in ("--columns", f"prefeval.{field}={key}")]
    result = _invoke(*args, "--out", tmp_path / "o2", *mapping)
    assert result.exit_code == 0, result.output
    result = _invoke(*args, "--out", tmp_path / "o3", "--columns", "labels.text=body")
    assert result.exit_code != 0 and "no table 'labels'" in result.output


def test_prepare_verifier_maps_label_keys(tmp_path):
    rows = [{**LABEL, "satisfied": s, "split": split} for split in ("train", "validation") for s in (True, False)]
    labels = tmp_path / "labels.jsonl"
    renamed = [{"body" if k == "text" else "answer" if k == "satisfied" else k: v for k, v in r.items()} for r in rows]
    labels.write_text("".join(json.dumps(r) + "\n" for r in renamed), encoding="utf-8")
    args = ["prepare", "verifier", "--labels", labels]
    result = _invoke(*args, "--out", tmp_path / "o1", "--columns", "text=body")
    assert result.exit_code != 0
    assert "labels.jsonl:1: field 'satisfied': missing column (holds our 'satisfied')" in result.output
    result = _invoke(*args, "--out", tmp_path / "o2", "--columns", "text=body", "--columns", "satisfied=answer")
    assert result.exit_code == 0, result.output
    from datasets import load_from_disk

    built = load_from_disk(str(tmp_path / "o2"))
    assert (built["train"].num_rows, built["validation"].num_rows) == (2, 2)

    renamed[2]["answer"] = "yes"
    labels.write_text("".join(json.dumps(r) + "\n" for r in renamed), encoding="utf-8")
    result = _invoke(*args, "--out", tmp_path / "o3", "--columns", "text=body", "--columns", "satisfied=answer")
    assert result.exit_code != 0 and "labels.jsonl:3: field 'answer': not a bool" in result.output
    result = _invoke(*args, "--out", tmp_path / "o4", "--columns", "verdict=answer")
    assert result.exit_code != 0 and "--columns 'verdict=answer': no field 'verdict'" in result.output
    assert not (tmp_path / "o3").exists() and not (tmp_path / "o4").exists()
