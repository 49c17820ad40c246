"""Real processes: two gloo DDP ranks under torchrun, a run stopped by signals, resumption, checkpoints.

Every run is the CPU recipe (``recipes/perse/cpu_smollm2_per-mpst-k3.yaml``) on data written by
``persetrain prepare`` with the tiny random LLaMA in place of the embedded model, started the way a
user starts it (``torchrun -m persetrain.train.sft`` / ``python -m persetrain.train.sft``) or, for the
reference runs, through the same parser and ``main`` in this process.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import TrainerCallback

from persetrain.launch import local_command, plan_launch
from persetrain.signals import exit_code
from persetrain.train.checkpoints import last_complete_checkpoint
from persetrain.train.runner import METRICS_FILE
from persetrain.train.sft import main, make_parser, run_sft
from persetrain.train.trainers import recipe_keys

pytestmark = pytest.mark.slow  # every test here starts processes or trains

REPO = Path(__file__).resolve().parents[1]
CPU_RECIPE = REPO / "recipes" / "perse" / "cpu_smollm2_per-mpst-k3.yaml"


def _argv(model: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--config",
        str(CPU_RECIPE),
        "--model_name_or_path",
        str(model),
        "--output_dir",
        str(out),
        "--logging_steps",
        "1",
        "--disable_tqdm",
        "true",
        *extra,
    ]


def _losses(out: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["event"] == "log" and "loss" in r}


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
    }


@pytest.fixture
def in_prepared(prepared_root, monkeypatch):
    monkeypatch.chdir(prepared_root)  # the recipe's dataset_path is relative, as in a checkout
    return prepared_root


def test_two_gloo_ranks_match_one_process(tiny_llama_dir, in_prepared, tmp_path):
    """2 processes x batch 1 == 1 process x batch 2: same global batch, same loss, same kind of checkpoint."""
    two, one = tmp_path / "two", tmp_path / "one"
    common = ["--max_steps", "2", "--save_steps", "2"]
    # The recipe's global batch is 1; accumulation 1 given explicitly lets two ranks take a batch of 2.
    plan = plan_launch(
        CPU_RECIPE,
        num_processes=2,
        cpu=True,
        overrides=[*_argv(tiny_llama_dir, two, *common)[2:], "--gradient_accumulation_steps", "1"],
        read_keys=recipe_keys,
    )
    command = local_command(plan)  # what `persetrain launch --num-processes 2` runs on a CPU
    assert command.argv[0] == "torchrun" and "--nproc_per_node" in command.argv
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    done = subprocess.run(
        [torchrun, *command.argv[1:]], env={**_env(), **command.env}, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run_sft(_argv(tiny_llama_dir, one, *common, "--per_device_train_batch_size", "2"))

    begin = json.loads((two / METRICS_FILE).read_text().splitlines()[0])
    assert begin["event"] == "train_begin" and begin["world_size"] == 2
    two_losses, one_losses = _losses(two), _losses(one)
    assert sorted(two_losses) == [1, 2]  # rank 0 alone writes the log
    assert two_losses[1] == pytest.approx(one_losses[1], rel=1e-5)
    assert two_losses[2] == pytest.approx(one_losses[2], rel=1e-5)  # and the same update in between

    def kind(path: Path) -> set[str]:
        return {p.name for p in path.iterdir() if not p.name.startswith("rng_state")}

    assert kind(two / "checkpoint-2") == kind(one / "checkpoint-2")
    assert {p.name for p in (two / "checkpoint-2").glob("rng_state*")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert kind(two / "merged") == kind(one / "merged")  # the final, merged model of the LoRA recipe


def test_sigterm_checkpoints_and_the_rerun_continues_the_loss_curve(tiny_llama_dir, in_prepared, tmp_path):
    steps = ["--max_steps", "10", "--save_steps", "1000", "--max_train_samples", "24"]
    reference = tmp_path / "reference"
    run_sft(_argv(tiny_llama_dir, reference, *steps))

    out = tmp_path / "interrupted"
    process = subprocess.Popen(
        [sys.executable, "-m", "persetrain.train.sft", *_argv(tiny_llama_dir, out, *steps)],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not ((out / METRICS_FILE).exists() and _losses(out)) and process.poll() is None:
        assert time.monotonic() < deadline, "the run logged no step in 300 s"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == exit_code(signal.SIGTERM), stderr[-3000:]
    stopped_at = max(_losses(out))
    assert 1 <= stopped_at < 10
    assert last_complete_checkpoint(out) == str(out / f"checkpoint-{stopped_at}")
    assert not (out / "merged").exists()  # an interrupted run does not look finished

    resumed = run_sft(_argv(tiny_llama_dir, out, *steps))  # the same command again
    assert resumed.resumed_from == str(out / f"checkpoint-{stopped_at}") and resumed.global_step == 10
    logged = _losses(out)
    assert sorted(logged) == list(range(1, 11))  # nothing retrained, nothing skipped
    expected = _losses(reference)
    for step in range(1, 11):
        assert logged[step] == pytest.approx(expected[step], rel=1e-4), step


class _SignalAt(TrainerCallback):
    """Sends this process a real signal at the end of one step, as a scheduler would."""

    def __init__(self, step: int, signum: int):
        self.step, self.signum = step, signum

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def test_sigusr1_checkpoints_and_a_half_written_checkpoint_is_skipped(tiny_llama_dir, in_prepared, tmp_path):
    out = tmp_path / "run"
    argv = _argv(tiny_llama_dir, out, "--max_steps", "4", "--save_steps", "1000", "--max_train_samples", "16")
    # The signal arrives during step 2's callbacks; the run stops at the end of step 3 at the latest.
    result = main(*make_parser().parse_args_and_config(argv), callbacks=[_SignalAt(2, signal.SIGUSR1)])
    assert result.stopped_by_signal == signal.SIGUSR1 and result.exit_code == 128 + signal.SIGUSR1
    saved = out / f"checkpoint-{result.global_step}"
    assert result.global_step < 4 and last_complete_checkpoint(out) == str(saved)
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # handlers restored after training

    # A newer checkpoint killed mid-save: weights written, trainer state missing or truncated.
    for step, state in ((8, None), (9, '{"global_step": 9, "log_hist')):
        partial = out / f"checkpoint-{step}"
        shutil.copytree(saved, partial)
        (partial / "trainer_state.json").unlink()
        if state is not None:
            (partial / "trainer_state.json").write_text(state)
    assert last_complete_checkpoint(out) == str(saved)
    resumed = run_sft(argv)
    assert resumed.resumed_from == str(saved) and resumed.global_step == 4
