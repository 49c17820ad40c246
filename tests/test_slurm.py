"""``persetrain launch --slurm`` against a real Slurm: munged, slurmctld, slurmd on loopback (tests/slurm_cluster.py).

The CPU SFT recipe runs as a batch job on the data ``persetrain prepare`` writes, with only the model swapped
for the tiny random LLaMA and the schedule shortened. One job runs to the end; another is sent USR1 while
it trains (what ``--signal=B:USR1@N`` does before a time limit), checkpoints, requeues itself and resumes
from that checkpoint.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_cluster import PARTITION, SlurmCluster

REPO = Path(__file__).resolve().parents[1]
RECIPE = "recipes/perse/cpu_smollm2_per-mpst-k3.yaml"

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), nodes=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def perse_data(prepared_root) -> Path:
    """Per-MPST as `persetrain prepare` writes it from the synthetic sample (conftest's prepared_root)."""
    return prepared_root / "data" / "perse" / "per_mpst_k3"


def _persetrain(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "persetrain.cli", "-q", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"persetrain {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def _submit(
    cluster: SlurmCluster,
    tmp_path: Path,
    tiny_llama_dir: Path,
    data: Path,
    *overrides: str,
    launch_options: tuple[str, ...] = (),
) -> str:
    result = _persetrain(
        "launch",
        "--slurm",
        *launch_options,
        "--config",
        RECIPE,
        "--partition",
        PARTITION,
        "--job-name",
        "sft-test",
        "--cpus-per-task",
        str(cluster.cpus),
        "--time",
        "00:20:00",
        "--log-dir",
        str(tmp_path / "logs"),
        "--",
        "--model_name_or_path",
        str(tiny_llama_dir),
        "--dataset_path",
        str(data),
        "--output_dir",
        str(tmp_path / "run"),
        "--logging_steps",
        "1",
        "--disable_tqdm",
        "true",
        *overrides,
        env=cluster.env,
    )
    match = re.search(r"submitted job (\d+)", result.stdout)
    assert match, result.stdout
    return match.group(1)


def _job(cluster: SlurmCluster, job: str) -> dict[str, str]:
    out = cluster.run("scontrol", "show", "job", "--oneliner", job).stdout
    return dict(word.partition("=")[::2] for word in out.split())


def _wait(cluster: SlurmCluster, job: str, done, what: str, timeout: float = 420) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        info = _job(cluster, job)
        if done(info):
            return info
        if info["JobState"] in {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}:
            raise AssertionError(
                f"job {job} {info['JobState']} while waiting for {what}:\n"
                f"{Path(info['StdOut']).read_text(errors='replace')[-6000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job} not {what} after {timeout:.0f} s: {info}\n{cluster.logs()}")
        time.sleep(0.5)


def _records(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_recipe_runs_as_a_batch_job(cluster, tmp_path, tiny_llama_dir, perse_data):
    job = _submit(cluster, tmp_path, tiny_llama_dir, perse_data, "--max_steps", "4", "--save_steps", "2")
    info = _wait(cluster, job, lambda i: i["JobState"] == "COMPLETED", "completed")
    assert info["ExitCode"] == "0:0"

    run = tmp_path / "run"
    assert (run / "checkpoint-4" / "trainer_state.json").is_file()  # save_total_limit 1 keeps the last
    assert (run / "adapter_model.safetensors").is_file() and (run / "merged" / "model.safetensors").is_file()
    losses = [r["step"] for r in _records(run) if r["event"] == "log" and "loss" in r]
    assert losses == [1, 2, 3, 4]

    status = _persetrain("launch", "--status", job, env=cluster.env).stdout
    assert "JobState: COMPLETED" in status and "JobName: sft-test" in status
    log = _persetrain("launch", "--logs", job, env=cluster.env).stdout
    assert f"persetrain: job {job} (restart 0)" in log and "training step exited with 0" in log
    script = (tmp_path / "logs" / "sft-test.sbatch").read_text()
    assert "#SBATCH --requeue" in script and "#SBATCH --signal=B:USR1@300" in script


def test_usr1_checkpoints_requeues_and_resumes(cluster, tmp_path, tiny_llama_dir, perse_data):
    # No periodic checkpoint: the one the run resumes from can only come from the signal.
    job = _submit(cluster, tmp_path, tiny_llama_dir, perse_data, "--max_steps", "20", "--save_steps", "1000")
    run = tmp_path / "run"
    deadline = time.monotonic() + 300
    while not any(r["event"] == "log" for r in _records(run)):  # training has started
        assert time.monotonic() < deadline, f"no training step logged: {_job(cluster, job)}"
        assert _job(cluster, job)["JobState"] in {"PENDING", "RUNNING"}, _job(cluster, job)
        time.sleep(0.2)
    cluster.run("scancel", "--signal=USR1", "--batch", job)

    # Slurm holds a requeued job for two minutes (BeginTime) so that the node has cleaned up the last run
    # and the job's new credential is not dated within the second the old one was revoked. Here it is
    # released as soon as that holds.
    _wait(cluster, job, lambda i: i["JobState"] == "PENDING" and i["Restarts"] == "1", "requeued")
    _wait(cluster, job, lambda i: cluster.run("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", "node idle")
    time.sleep(2)
    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    info = _wait(cluster, job, lambda i: i["JobState"] == "COMPLETED", "completed after the requeue")
    assert info["Restarts"] == "1" and info["ExitCode"] == "0:0"

    records = _records(run)
    begins = [r["step"] for r in records if r["event"] == "train_begin"]
    assert len(begins) == 2 and begins[0] == 0
    saved = begins[1]
    assert 0 < saved < 20  # resumed where the signal stopped it, not from scratch, not after the end
    steps = [r["step"] for r in records if r["event"] == "log" and "loss" in r]
    assert steps == list(range(1, 21))  # every step once: nothing retrained, nothing skipped
    config = json.loads((run / "resolved_config.json").read_text())
    assert Path(config["resume_from_checkpoint"]).name == f"checkpoint-{saved}"
    log = Path(info["StdOut"]).read_text()
    assert "USR1" in log and f"persetrain: job {job} (restart 1)" in log


def test_unknown_partition_and_missing_sbatch_are_one_line_errors(cluster, tmp_path, perse_data):
    args = ["launch", "--slurm", "--config", RECIPE, "--log-dir", str(tmp_path)]
    result = _persetrain(
        *args, "--partition", "gpu-h100", "--", "--dataset_path", str(perse_data), env=cluster.env, check=False
    )
    assert result.returncode == 2
    assert (result.stdout + result.stderr).strip() == (
        f"error: unknown Slurm partition 'gpu-h100' (this cluster has: {PARTITION})"
    )

    no_slurm = {**cluster.env, "PATH": str(Path(sys.executable).parent)}
    result = _persetrain(*args, "--", "--dataset_path", str(perse_data), env=no_slurm, check=False)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2 and output.startswith("error: `sbatch` is not on PATH") and "\n" not in output


def test_a_zero3_recipe_runs_as_a_two_node_batch_job_on_cpu_ranks(cluster, tmp_path, tiny_llama_dir, perse_data):
    """The multi-node script of a DeepSpeed ZeRO-3 launch (``--nodes 2``, ``--gpus-per-node 0``: CPU ranks, no GPU
    request) runs under the real Slurm on its two nodes: one launcher per node (``srun``), rank 0's node the
    rendezvous, one run of world size 2, the merged model."""
    job = _submit(
        cluster,
        tmp_path,
        tiny_llama_dir,
        perse_data,
        *("--max_steps", "2", "--save_steps", "1000", "--per_device_train_batch_size", "1"),
        *("--gradient_accumulation_steps", "1"),
        launch_options=(
            "--accelerate-config",
            "accelerate_configs/deepspeed_zero3.yaml",
            "--nodes",
            "2",
            "--num-processes",
            "2",
            "--gpus-per-node",
            "0",
        ),
    )
    info = _wait(cluster, job, lambda i: i["JobState"] == "COMPLETED", "completed")
    assert info["ExitCode"] == "0:0" and info["NumNodes"] == "2"
    assert sorted(cluster.run("scontrol", "show", "hostnames", info["NodeList"]).stdout.split()) == sorted(
        cluster.nodes
    )
    run = tmp_path / "run"
    records = _records(run)
    assert records[0]["world_size"] == 2
    assert [r["step"] for r in records if r["event"] == "log" and "loss" in r] == [1, 2]
    assert (run / "merged" / "model.safetensors").is_file()
    script = (tmp_path / "logs" / "sft-test.sbatch").read_text()
    assert "--gpus-per-node" not in script and "--deepspeed_config_file" in script and "--machine_rank" in script
