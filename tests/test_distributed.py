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
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.io import InputError
from persetrain.signals import exit_code
from persetrain.train.checkpoints import last_complete_checkpoint
from persetrain.train.grpo import REWARD_PARTS_FILE
from persetrain.train.rm import run_rm
from persetrain.train.runner import MERGED_DIR, METRICS_FILE
from persetrain.train.sft import run_sft

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "accelerate_configs"
SFT_RECIPE = REPO / "recipes" / "perse" / "cpu_smollm2_per-mpst-k3.yaml"
RM_RECIPE = REPO / "recipes" / "rm" / "cpu_smollm2_prefeval.yaml"
VERIFIER_RECIPE = REPO / "recipes" / "verifier" / "cpu_smollm2_prefeval.yaml"
PREFEVAL_DEV = REPO / "data" / "prefeval" / "dev"
GRPO_RECIPE = REPO / "recipes" / "parl" / "cpu_smollm2_news.yaml"
VERDICT_RECIPE = REPO / "recipes" / "verdict" / "cpu_smollm2_prefeval.yaml"
#: Each rank takes one row a step; the one-process reference takes both rows in one batch.
TWO_RANKS = ("--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "1")
ONE_PROCESS = ("--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1")
COMMON = ("--logging_steps", "1", "--disable_tqdm", "true", "--report_to", "none", "--seed", "0")
#: Steps of the runs held against one process: a wrong shard shows in the first step's loss and in every weight.
STEPS = 4
#: Steps of the runs stopped by a signal: enough that one sent after the first few steps lands before the end.
SIGNAL_STEPS = 12

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


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
        ["-q", "prepare", "preference", "--prefeval", str(PREFEVAL_DEV), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    return out


def _sft_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        *("--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(out)),
        *("--save_steps", "1000", "--max_train_samples", "64", *extra),
    ]


@pytest.fixture(scope="module")
def sft_reference(tiny_llama_dir, perse_dir, tmp_path_factory) -> dict[tuple[str, int], Path]:
    """One process, batch 2, fp32: LoRA (the CPU recipe) and full fine-tuning, each for ``STEPS`` and for
    ``SIGNAL_STEPS`` (the learning rate's schedule depends on the run's length), keyed ``(kind, steps)``."""
    root = tmp_path_factory.mktemp("sft-reference")
    kinds = {"lora": (), "full": ("--use_peft", "false", "--learning_rate", "1e-4")}
    runs = {}
    for kind, extra in kinds.items():
        for steps in (STEPS, SIGNAL_STEPS):
            out = runs[kind, steps] = root / f"{kind}-{steps}"
            run_sft(
                [
                    "--config",
                    str(SFT_RECIPE),
                    *COMMON,
                    *ONE_PROCESS,
                    *_sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", str(steps), *extra),
                ]
            )
    return runs


@pytest.mark.parametrize(("config", "kind"), [("deepspeed_zero2", "lora"), ("deepspeed_zero3_offload", "full")])
def test_sft_under_deepspeed_equals_one_process(config, kind, tiny_llama_dir, perse_dir, sft_reference, tmp_path):
    """ZeRO-2 with LoRA, ZeRO-3 with both offloads and full fine-tuning: the reference's losses and weights."""
    extra = ("--use_peft", "false", "--learning_rate", "1e-4") if kind == "full" else ()
    out = tmp_path / config
    args = _sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", str(STEPS), *extra)
    _launch(SFT_RECIPE, config, *TWO_RANKS, *args)
    _assert_same_losses(out, sft_reference[kind, STEPS], STEPS)
    begin = _records(out)[0]
    assert begin["event"] == "train_begin" and begin["world_size"] == 2
    final = MERGED_DIR if kind == "lora" else "."
    _assert_same_weights(out / final, sft_reference[kind, STEPS] / final)  # ZeRO-3's shards gathered at save
    if kind == "lora":
        assert (out / "adapter_model.safetensors").is_file()


def test_zero3_lora_stops_on_usr1_refuses_another_world_size_and_resumes_to_the_same_model(
    tiny_llama_dir, perse_dir, sft_reference, tmp_path
):
    """USR1 to the launcher (a scheduler's notice) reaches both ZeRO-3 ranks: one checkpoint, one ``stopped:`` line
    and 128 + USR1. One process may not load the two ranks' partitions; the same command resumes, and the run
    ends with the reference's losses, each step logged once, and its merged model."""
    out = tmp_path / "zero3"
    args = (*TWO_RANKS, *_sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", str(SIGNAL_STEPS)))
    process = _start(SFT_RECIPE, "deepspeed_zero3", *args)
    _wait_for_step(process, out, 2)
    process.send_signal(signal.SIGUSR1)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == exit_code(signal.SIGUSR1), output[-6000:]
    stopped = [line for line in output.splitlines() if line.startswith("stopped:")]
    assert len(stopped) == 1 and "Traceback" not in output, output[-6000:]
    saved = last_complete_checkpoint(out)
    assert saved is not None and int(saved.rsplit("-", 1)[1]) < SIGNAL_STEPS and not (out / MERGED_DIR).exists()

    with pytest.raises(
        InputError, match=r"saved by 2 processes \(DeepSpeed ZeRO state, one part per rank\); this run has 1"
    ):
        run_sft(["--config", str(SFT_RECIPE), *COMMON, *ONE_PROCESS, *args[4:]])

    _launch(SFT_RECIPE, "deepspeed_zero3", *args)
    assert [r["step"] for r in _records(out) if r["event"] == "train_begin"] == [0, int(saved.rsplit("-", 1)[1])]
    _assert_same_losses(out, sft_reference["lora", SIGNAL_STEPS], SIGNAL_STEPS)
    _assert_same_weights(out / MERGED_DIR, sft_reference["lora", SIGNAL_STEPS] / MERGED_DIR)

    # The model that comes out: `persetrain evaluate` judges with it as with the one-process model, and `persetrain
    # push --merge` folds the saved adapter into the same weights.
    judged = {}
    for name, model in (("zero3", out / MERGED_DIR), ("one", sft_reference["lora", SIGNAL_STEPS] / MERGED_DIR)):
        result = CliRunner().invoke(
            app,
            [
                *("-q", "evaluate", "--data", str(PREFEVAL_DEV), "--out", str(tmp_path / f"eval-{name}")),
                *("--evaluator", "mcq-letter", "--model", str(model), "--max-examples", "4"),
            ],
        )
        assert result.exit_code == 0, result.output
        lines = next((tmp_path / f"eval-{name}" / "judgments").glob("*.jsonl")).read_text().splitlines()
        judged[name] = {row["example_id"]: row["probs"] for row in map(json.loads, lines)}
    assert judged["zero3"].keys() == judged["one"].keys() and len(judged["one"]) == 4
    for example, probs in judged["one"].items():
        assert judged["zero3"][example] == pytest.approx(probs, abs=1e-4), example
    pushed = tmp_path / "push"
    result = CliRunner().invoke(
        app, ["-q", "push", str(out), "--repo-id", "you/x", "--merge", "--dry-run", "--out", str(pushed)]
    )
    assert result.exit_code == 0, result.output
    _assert_same_weights(pushed, out / MERGED_DIR)


def test_fsdp_survives_a_killed_rank_and_a_ctrl_c_and_ends_as_one_process_does(
    tiny_llama_dir, perse_dir, sft_reference, tmp_path
):
    """FSDP (full fine-tuning): SIGKILL of one rank ends the job in bounded time with one line naming the rank, and
    leaves no rank behind; the rerun starts from the last complete checkpoint; Ctrl-C (SIGINT) to the launcher
    checkpoints and stops; the third run finishes with the reference's losses and gathered weights."""
    out = tmp_path / "fsdp"
    args = (
        *TWO_RANKS,
        *_sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", str(SIGNAL_STEPS), "--save_steps", "2"),
    )
    args = (*args, "--use_peft", "false", "--learning_rate", "1e-4")

    process = _start(SFT_RECIPE, "fsdp", *args)
    _wait_for_step(process, out, 3)
    ranks = _ranks(process.pid)
    assert len(ranks) == 2
    os.kill(ranks[1], signal.SIGKILL)
    started = time.monotonic()
    output, _ = process.communicate(timeout=120)
    assert time.monotonic() - started < 90 and process.returncode == 1, output[-6000:]
    assert "error: rank" in output and "signal SIGKILL" in output and "Traceback" not in output.split("error: rank")[-1]
    assert not [pid for pid in ranks if Path(f"/proc/{pid}").exists()]
    resume_from = last_complete_checkpoint(out)
    assert resume_from is not None

    process = _start(SFT_RECIPE, "fsdp", *args)
    _wait_for_step(process, out, 5)
    process.send_signal(signal.SIGINT)  # Ctrl-C
    output, _ = process.communicate(timeout=300)
    assert process.returncode == exit_code(signal.SIGINT), output[-6000:]
    assert sum(line.startswith("stopped:") for line in output.splitlines()) == 1, output[-6000:]

    _launch(SFT_RECIPE, "fsdp", *args)
    begins = [r["step"] for r in _records(out) if r["event"] == "train_begin"]
    assert begins[:2] == [0, int(resume_from.rsplit("-", 1)[1])] and len(begins) == 3
    _assert_same_losses(out, sft_reference["full", SIGNAL_STEPS], SIGNAL_STEPS)
    _assert_same_weights(out, sft_reference["full", SIGNAL_STEPS])


def _tiny_args(model: Path, data: Path, out: Path, *extra: str) -> list[str]:
    return [
        *("--model_name_or_path", str(model), "--dataset_path", str(data), "--output_dir", str(out)),
        *("--max_steps", "2", "--save_strategy", "no", "--max_train_samples", "16", "--max_length", "256", *extra),
    ]


@pytest.mark.parametrize(
    ("recipe", "data", "extra"),
    [
        (RM_RECIPE, "listwise", ()),  # with the person-contrast term
        (RM_RECIPE, "pairs", ("--loss", "bradley_terry", "--person_contrast", "0")),
        (VERIFIER_RECIPE, "verifier", ("--shared_prefix_packing", "true")),
    ],
    ids=["rm-listwise", "rm-bradley-terry", "verifier-shared-prefix"],
)
def test_reward_model_and_verifier_under_zero3_equal_one_process(
    recipe, data, extra, tiny_llama_dir, preference_dir, tmp_path
):
    """The reward model (listwise and Bradley-Terry, full fine-tuning) and the yes/no verifier (LoRA) with
    shared-prefix packing under ZeRO-3: one process's losses at the same global batch, and its final weights."""
    sharded, single = tmp_path / "zero3", tmp_path / "one"
    _launch(recipe, "deepspeed_zero3", *TWO_RANKS, *_tiny_args(tiny_llama_dir, preference_dir / data, sharded, *extra))
    train = run_rm if recipe == RM_RECIPE else run_sft
    # Shared-prefix packing groups each device's batch by prefix, so one process takes the ranks' two batches of 1
    # as two accumulated batches of 1 (a batch of 2 would be grouped otherwise).
    one = (
        ONE_PROCESS
        if recipe == RM_RECIPE
        else ("--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "2")
    )
    train(
        [
            "--config",
            str(recipe),
            *COMMON,
            *one,
            *_tiny_args(tiny_llama_dir, preference_dir / data, single, *extra),
        ]
    )
    _assert_same_losses(sharded, single, 2)
    final = MERGED_DIR if recipe == VERIFIER_RECIPE else "."  # the reward-model recipe trains every weight
    _assert_same_weights(sharded / final, single / final)


def test_grpo_with_the_parl_reward_under_zero3_finishes(tiny_llama_dir, tmp_path):
    """GRPO's rollouts and log-prob passes under ZeRO-3 (each rank's prompts differ, and so would the number of
    forwards of the one-prompt-once path, which hung here): two steps, every rank, the reward and its parts logged."""
    from data_prep.parl.prepare import prepare_parl
    from data_prep.synthetic.parl import write_parl_sample

    write_parl_sample(tmp_path / "raw", seed=0)
    prepare_parl(tmp_path / "raw", tmp_path / "data", tasks=("news",))
    out = tmp_path / "grpo"
    _launch(
        GRPO_RECIPE,
        "deepspeed_zero3",
        *("--model_name_or_path", str(tiny_llama_dir), "--reward_judge_model", str(tiny_llama_dir)),
        *("--dataset_path", str(tmp_path / "data" / "parl_news"), "--output_dir", str(out)),
        *("--max_steps", "2", "--num_generations", "2", "--per_device_train_batch_size", "2"),
        *("--gradient_accumulation_steps", "1", "--max_completion_length", "8", "--save_strategy", "no"),
    )
    logged = [r for r in _records(out) if r["event"] == "log" and "reward" in r]
    assert [r["step"] for r in logged] == [1, 2] and all("parl/parsed_share" in r for r in logged)
    assert (out / MERGED_DIR / "model.safetensors").is_file()
    # Both ranks' reward parts, written by rank 0 alone: a step's 2 x 2 rollouts numbered once across the ranks,
    # each rank's prompt (2 rollouts) adjacent, and the two ranks' prompts different.
    parts = [json.loads(line) for line in (out / REWARD_PARTS_FILE).read_text().splitlines()]
    assert [(r["step"], r["rollout"]) for r in parts] == [(step, k) for step in (1, 2) for k in range(4)]
    for step in (1, 2):
        ids = [r["id"] for r in parts if r["step"] == step]
        assert ids[0] == ids[1] != ids[2] == ids[3], ids
    # Each rank's judge keeps its own request cache (SQLite's WAL needs one host; nodes share the folder).
    assert sorted(p.name for p in out.glob("judge-cache*.sqlite")) == [
        "judge-cache.rank0.sqlite",
        "judge-cache.rank1.sqlite",
    ]


@pytest.mark.parametrize("config", ["deepspeed_zero3", "fsdp"])
def test_a_judge_is_paid_for_whole_questions_on_every_rank(config, tiny_llama_dir, tmp_path):
    """verdict-consistent compares a question's two orders within the batch one rank scores: each generation, a rank
    scores the next per_device_train_batch_size x steps_per_generation completions of the stream (2 x 2 here, one
    question in both orders with 2 rollouts each). Under ZeRO-3 and under FSDP, no completion on either rank was
    scored without its question's other order (``verdict/split_item_share``, averaged over the ranks, 0 at every
    step; 1.0 at 2 x 1)."""
    from data_prep.verdict.prepare import prepare_verdict

    data = tmp_path / "judge"
    prepare_verdict(data, prefeval=[PREFEVAL_DEV], holdout_topics=["travel_restaurant"], seed=0)
    out = tmp_path / "grpo"
    _launch(
        VERDICT_RECIPE,
        config,
        *("--model_name_or_path", str(tiny_llama_dir), "--dataset_path", str(data), "--output_dir", str(out)),
        *("--max_steps", "3", "--num_generations", "2", "--per_device_train_batch_size", "2"),
        *("--gradient_accumulation_steps", "2", "--max_completion_length", "4", "--save_strategy", "no"),
    )
    logged = [r for r in _records(out) if r["event"] == "log" and "reward" in r]
    assert [r["step"] for r in logged] == [1, 2, 3]
    assert [r["verdict/split_item_share"] for r in logged] == [0.0, 0.0, 0.0]
    assert all(r["rewards/verdict_consistent/mean"] <= r["rewards/verdict_correct/mean"] for r in logged)


def test_two_machines_meet_at_one_rendezvous_and_equal_one_process(tiny_llama_dir, perse_dir, sft_reference, tmp_path):
    """Two launchers, each a machine of ``num_machines: 2`` (machine_rank 0 and 1, one ZeRO-3 process each), meet at
    the static rendezvous on 127.0.0.1, as the nodes of the multi-node Slurm template do: one run, the reference's
    losses and merged model."""
    config = yaml.safe_load((CONFIGS / "deepspeed_zero3.yaml").read_text())
    config["deepspeed_config"]["deepspeed_config_file"] = str(CONFIGS / "deepspeed" / "zero3.json")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    for rank in (0, 1):
        machine = {"num_machines": 2, "num_processes": 2, "machine_rank": rank, "main_process_ip": "127.0.0.1"}
        (tmp_path / f"machine{rank}.yaml").write_text(yaml.safe_dump({**config, **machine, "main_process_port": port}))
    out = tmp_path / "two-machines"
    args = (*TWO_RANKS, *_sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", str(STEPS)))
    launchers = []
    for rank in (0, 1):
        argv = _launch_argv(SFT_RECIPE, "deepspeed_zero3", *args)
        argv[argv.index("--accelerate-config") + 1] = str(tmp_path / f"machine{rank}.yaml")
        argv.remove("--num-processes")
        argv.remove("2")
        launchers.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for launcher in launchers:
        output, _ = launcher.communicate(timeout=400)
        assert launcher.returncode == 0, output[-6000:]
    _assert_same_losses(out, sft_reference["lora", STEPS], STEPS)
    _assert_same_weights(out / MERGED_DIR, sft_reference["lora", STEPS] / MERGED_DIR)


def test_a_hung_rank_ends_the_run_with_an_error_naming_rank_and_step(tiny_llama_dir, perse_dir, tmp_path):
    """One ZeRO-3 rank frozen (SIGSTOP) mid-run: the other waits in a collective, and after ``ddp_timeout`` of no
    progress ends with a line naming its rank and step; torch elastic then ends the job and leaves no rank behind.
    The frozen rank is thawed once that line is out: a stopped process cannot take elastic's SIGTERM, and on a
    failure elastic waits a fixed 30 s before its SIGKILL (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` applies to signals
    only), which this test would otherwise spend idle."""
    out = tmp_path / "hang"
    args = (*TWO_RANKS, *_sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", "200", "--ddp_timeout", "10"))
    process = _start(SFT_RECIPE, "deepspeed_zero3", *args)
    reported = r"error: \S+: rank [01] of 2: no progress for 10 s \(ddp_timeout\) after step \d+"
    lines: list[str] = []
    try:
        _wait_for_step(process, out, 2)
        ranks = _ranks(process.pid)
        os.kill(ranks[1], signal.SIGSTOP)
        started = time.monotonic()
        for line in process.stdout:  # the launch's output, as it comes
            lines.append(line)
            if re.search(reported, line):
                os.kill(ranks[1], signal.SIGCONT)
                break
        lines.extend(process.stdout)
        process.wait(timeout=120)
    finally:
        process.kill()
    output = "".join(lines)
    assert process.returncode == 1 and time.monotonic() - started < 90, output[-6000:]
    assert re.search(reported, output), output
    assert re.search(r"^error: rank \d \(pid \d+\) exited with", output, re.MULTILINE), output[-6000:]
    assert not [pid for pid in ranks if Path(f"/proc/{pid}").exists()]


def test_a_launcher_killed_outright_takes_its_ranks_with_it(tiny_llama_dir, perse_dir, tmp_path):
    """SIGKILL of ``persetrain launch`` (a scheduler's hard limit): no rank is left running, holding memory."""
    out = tmp_path / "killed"
    process = _start(
        SFT_RECIPE, "deepspeed_zero2", *TWO_RANKS, *_sft_args(tiny_llama_dir, perse_dir, out, "--max_steps", "200")
    )
    _wait_for_step(process, out, 1)
    ranks = _ranks(process.pid)
    assert len(ranks) == 2
    process.kill()
    process.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while [pid for pid in ranks if Path(f"/proc/{pid}").exists()]:
        assert time.monotonic() < deadline, f"ranks {ranks} still running 30 s after their launcher was killed"
        time.sleep(0.2)
