"""The ``persetrain`` command as a user runs it: JSONL in, JSONL out, clear errors, no partial files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from numerics import DTYPE
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.models import best_device

runner = CliRunner()


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_command_has_help():
    for args in (
        ["--help"],
        ["generate", "--help"],
        ["serve", "--help"],
        ["demo", "--help"],
        ["models", "--help"],
        ["models", "fetch", "--help"],
        ["models", "info", "--help"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
        assert "Usage" in result.output


@pytest.mark.parametrize(
    ("argv", "new"),
    [
        (["prepare", "judge", "--prefeval", "data/prefeval/dev", "--out", "x"], "prepare verdict"),
        (["prepare", "judge-sft", "--judge", "x", "--out", "y"], "prepare verdict-sft"),
        (["rubrics", "judge-accuracy", "--data", "x", "--help"], "rubrics verifier-accuracy"),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else None,
)
def test_a_renamed_command_is_refused_in_one_line_naming_the_new_one(argv, new):
    """A script written before the rename fails at once, whatever its arguments, and says what to type instead."""
    result = runner.invoke(app, argv)
    assert result.exit_code == 2
    assert result.output == f"error: `persetrain {argv[0]} {argv[1]}` is now `persetrain {new}`\n"


def test_generate_and_choices_roundtrip(tiny_llama_dir, tmp_path):
    requests = _write(
        tmp_path / "in.jsonl",
        [
            json.dumps({"id": "a", "messages": [{"role": "user", "content": "Is this good? yes or no"}]}),
            json.dumps({"id": "b", "messages": [{"role": "user", "content": "Hello"}], "assistant_prefix": "Sure"}),
        ],
    )
    out = tmp_path / "out.jsonl"
    result = runner.invoke(
        app, ["-q", "generate", "-i", str(requests), "-o", str(out), "-m", str(tiny_llama_dir), "--max-new-tokens", "5"]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["a", "b"]
    assert all(r["cost"]["calls"] == 1 and r["cost"]["completion_tokens"] >= 1 for r in rows)

    probs_out = tmp_path / "probs.jsonl"
    result = runner.invoke(
        app,
        ["-q", "generate", "-i", str(requests), "-o", str(probs_out), "-m", str(tiny_llama_dir), "--choices", "yes,no"],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in probs_out.read_text().splitlines()]
    assert all(abs(sum(r["probs"].values()) - 1) < 1e-6 for r in rows)


def test_malformed_input_names_line_and_field_and_writes_nothing(tiny_llama_dir, tmp_path):
    out = tmp_path / "out.jsonl"
    bad_field = _write(
        tmp_path / "bad.jsonl",
        [
            json.dumps({"id": "ok", "messages": [{"role": "user", "content": "hi"}]}),
            json.dumps({"id": "bad", "messages": [{"role": "robot", "content": "hi"}]}),
        ],
    )
    result = runner.invoke(app, ["generate", "-i", str(bad_field), "-o", str(out), "-m", str(tiny_llama_dir)])
    assert result.exit_code == 2
    assert "bad.jsonl:2" in result.output and "messages.0.role" in result.output
    assert "Traceback" not in result.output

    bad_json = _write(tmp_path / "broken.jsonl", ['{"id": "x", "messages": ['])
    result = runner.invoke(app, ["generate", "-i", str(bad_json), "-o", str(out), "-m", str(tiny_llama_dir)])
    assert result.exit_code == 2 and "broken.jsonl:1" in result.output and "not valid JSON" in result.output
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl*"))


def test_unknown_model_spec_lists_known_ones(tmp_path):
    requests = _write(tmp_path / "in.jsonl", [json.dumps({"messages": [{"role": "user", "content": "hi"}]})])
    result = runner.invoke(
        app, ["generate", "-i", str(requests), "-o", str(tmp_path / "o.jsonl"), "-m", "embedded:no-such-model"]
    )
    assert result.exit_code == 2
    assert "embedded:smollm2-135m-instruct" in result.output

    result = runner.invoke(app, ["models", "info", "not a model"])
    assert result.exit_code == 2 and "unknown model spec" in result.output


def test_models_fetch_then_info_reports_device_and_dtype():
    fetched = runner.invoke(app, ["models", "fetch"])  # converts the embedded GGUF once, then reuses it
    assert fetched.exit_code == 0, fetched.output
    result = runner.invoke(app, ["models", "info"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["converted"] is True
    assert info["model_type"] == "llama" and info["dtype"] == str(DTYPE).removeprefix("torch.")
    assert info["device"] == best_device().type


@pytest.mark.slow
def test_an_unreachable_server_is_one_error_line_not_a_traceback(tmp_path):
    requests = _write(tmp_path / "in.jsonl", [json.dumps({"messages": [{"role": "user", "content": "hi"}]})])
    result = runner.invoke(
        app,
        [
            "-q",
            "generate",
            "-i",
            str(requests),
            "-o",
            str(tmp_path / "o.jsonl"),
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
    )
    assert result.exit_code == 2
    assert "error: no answer from http://127.0.0.1:9/v1/chat/completions" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.slow
def test_a_hub_id_that_cannot_be_reached_says_how_to_get_the_weights():
    # A real process, so that HF_HUB_OFFLINE is read at import as it is for a user; offline fails at
    # once, where the unreachable network would take the Hub client's retries.
    result = subprocess.run(
        [sys.executable, "-m", "persetrain.cli", "models", "info", "meta-llama/Llama-2-7b-chat-hf"],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "persetrain models fetch meta-llama/Llama-2-7b-chat-hf" in result.stderr


def test_long_error_messages_are_never_wrapped(tmp_path):
    deep = tmp_path / ("a-rather-long-directory-name-" * 4) / "in.jsonl"
    deep.parent.mkdir(parents=True)
    _write(deep, ['{"messages": ['])
    result = runner.invoke(app, ["generate", "-i", str(deep), "-o", str(tmp_path / "o.jsonl")])
    assert result.exit_code == 2
    [line] = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert f"{deep}:1" in line and "not valid JSON" in line


def test_persetrain_dtype_overrides_the_hardware_choice(monkeypatch):
    """PERSETRAIN_DTYPE decides the compute dtype on any device; an unknown one is a one-line error."""
    monkeypatch.setenv("PERSETRAIN_DTYPE", "bfloat16")
    result = runner.invoke(app, ["models", "info"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["dtype"] == "bfloat16"
    monkeypatch.setenv("PERSETRAIN_DTYPE", "fp8")
    result = runner.invoke(app, ["models", "info"])
    assert result.exit_code != 0
    assert result.output.strip() == "error: PERSETRAIN_DTYPE='fp8': expected one of float32, bfloat16, float16"
