"""Sharded training for real: the trainers under every shipped DeepSpeed and FSDP config, on two CPU ranks.

Every run is started as a user starts it, ``persetrain launch --config RECIPE --accelerate-config CONFIG
--num-processes 2``: DeepSpeed finds no GPU and takes its CPU accelerator (gloo), FSDP runs on gloo. The model
is the tiny random LLaMA, the data what ``persetrain prepare`` writes (PerSE, PrefEval preference, PARL), and
each sharded run is held against one process at the same global batch (``run_sft`` / ``run_rm`` here, in
fp32): the same losses, the same final weights. Signals go to the launcher, as a scheduler or Ctrl-C sends them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.models import load_model
from persetrain.train.checkpoints import is_complete, last_complete_checkpoint
from persetrain.train.rm import run_rm
from persetrain.train.runner import METRICS_FILE, MERGED_DIR
from persetrain.train.sft import run_sft
from persetrain.train.signals import exit_code

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "accelerate_configs"
SFT_RECIPE = REPO / "recipes" / "perse" / "cpu_smollm2_per-mpst-k3.yaml"
RM_RECIPE = REPO / "recipes" / "rm" / "cpu_smollm2_prefeval.yaml"
VERIFIER_RECIPE = REPO / "recipes" / "verifier" / "cpu_smollm2_prefeval.yaml"
GRPO_RECIPE = REPO / "recipes" / "parl" / "cpu_smollm2_news.yaml"
#: Each rank takes one row a step; the one-process reference takes both rows in one batch.
TWO_RANKS = ("--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1")
ONE_PROCESS = ("--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1")
COMMON = ("--logging_steps", "1", "--disable_tqdm", "true", "--report_to", "none", "--seed", "0")

pytestmark = pytest.mark.timeout(600)


def _launch_argv(recipe: Path, config: str, *overrides: str) -> list[str]:
    return [
        str(Path(sys.executable).with_name("persetrain")),
        "-q",
        "launch",
        "--config",
        str(recipe),
        "--accelerate-config",
        str(CONFIGS / f"{config}.yaml"),
        "--num-processes",
        "2",
        "--",
        *COMMON,
        *overrides,
    ]


def _start(recipe: Path, config: str, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen(
        _launch_argv(recipe, config, *overrides),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _launch(recipe: Path, config: str, *overrides: str) -> str:
    """Run a launch to its end and return its output; a failed one fails the test with that output."""
    process = _start(recipe, config, *overrides)
    output, _ = process.communicate(timeout=500)
    assert process.returncode == 0, output[-6000:]
    return output


def _records(out: Path) -> list[dict]:
    path = out / METRICS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _losses(out: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in _records(out) if r["event"] == "log" and "loss" in r}


def _assert_same_losses(sharded: Path, single: Path, steps: int) -> None:
    got, want = _losses(sharded), _losses(single)
    assert sorted(got) == list(range(1, steps + 1)), got  # rank 0 alone logs, each step once
    for step in range(1, steps + 1):
        assert got[step] == pytest.approx(want[step], rel=1e-4), (step, got, want)


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    files = sorted(model_dir.glob("*.safetensors"))
    assert files, f"no weights in {model_dir}: {sorted(p.name for p in model_dir.iterdir())}"
    return {name: tensor for f in files for name, tensor in load_file(f).items()}


def _assert_same_weights(sharded: Path, single: Path) -> None:
    got, want = _weights(sharded), _weights(single)
    assert got.keys() == want.keys()
    for name, tensor in want.items():
        torch.testing.assert_close(got[name].float(), tensor.float(), rtol=1e-4, atol=1e-5, msg=name)


def _wait_for_step(process: subprocess.Popen, out: Path, step: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while max(_losses(out), default=0) < step:
        assert process.poll() is None, process.communicate()[0][-6000:]
        assert time.monotonic() < deadline, f"no step {step} logged in {timeout:.0f} s"
        time.sleep(0.1)


def _ranks(launcher_pid: int) -> list[int]:
    """The pids of the launcher's child processes (torch elastic's ranks)."""
    found = subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True, text=True).stdout
    return [int(pid) for pid in found.split()]


@pytest.fixture(scope="module")
def perse_dir(prepared_root) -> Path:
    return prepared_root / "data" / "perse" / "per_mpst_k3"


@pytest.fixture(scope="module")
def preference_dir(tmp_path_factory) -> Path:
    """``persetrain prepare preference`` of the PrefEval dev slice: listwise/, pairs/ and verifier/."""
    out = tmp_path_factory.mktemp("preference")
    result = CliRunner().invoke(
        app,
        ["-q", "prepare", "preference", "--prefeval", str(REPO.parent / "shared/data/prefeval-dev"), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    return out


def _sft_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        *("--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(out)),
        *("--save_steps", "1000", "--max_train_samples", "32", *extra),
    ]


@pytest.fixture(scope="module")
def sft_reference(tiny_llama_dir, perse_dir, tmp_path_factory) -> dict[str, Path]:
    """One process, batch 2, six steps, fp32: LoRA (the CPU recipe) and full fine-tuning."""
    root = tmp_path_factory.mktemp("sft-reference")
    runs = {"lora": (), "full": ("--use_peft", "false", "--learning_rate", "1e-4")}
    for name, extra in runs.items():
        run_sft(
            [
                "--config",
                str(SFT_RECIPE),
                *COMMON,
                *ONE_PROCESS,
                *_sft_args(tiny_llama_dir, perse_dir, root / name, "--max_steps", "6", *extra),
            ]
        )
    return {name: root / name for name in runs}


@pytest.mark.parametrize(("config", "kind"), [("deepspeed_zero2", "lora"), ("deepspeed_zero3_offload", "full")])
def test_sft_under_deepspeed_equals_one_process(config, kind, tiny_llama_dir, perse_dir, sft_reference, tmp_path):
    """ZeRO-2 with LoRA, ZeRO-3 with both offloads and full fine-tuning: the reference's losses and weights."""
    extra = ("--use_peft", "false", "--learning_rate", "1e-4") if kind == "full" else ()
    out = tmp_path / config
    _launch(SFT_RECIPE, config, *TWO_RANKS, *_sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", "6", *extra))
    _assert_same_losses(out, sft_reference[kind], 6)
    begin = _records(out)[0]
    assert begin["event"] == "train_begin" and begin["world_size"] == 2
    final = MERGED_DIR if kind == "lora" else "."
    _assert_same_weights(out / final, sft_reference[kind] / final)  # ZeRO-3's shards gathered at save
    if kind == "lora":
        assert (out / "adapter_model.safetensors").is_file()
