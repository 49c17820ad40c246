"""``persetrain launch``: the command a recipe runs with, its checks, sbatch scripts, and a real 2-process run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from datasets import Dataset, DatasetDict
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.io import InputError
from persetrain.launch import LaunchError, local_command, plan_launch
from persetrain.launch.slurm import SlurmOptions, plan_slurm, render_sbatch
from persetrain.train.recipe import RecipeError, read_recipe
from persetrain.train.sft import make_parser
from persetrain.train.trainers import recipe_keys

REPO = Path(__file__).resolve().parents[1]
CPU_RECIPE = REPO / "recipes/perse/cpu_smollm2_per-mpst-k3.yaml"
ZERO3_RECIPE = REPO / "recipes/perse/llama2-7b-chat_per-mpst-k3.yaml"  # 8 x 4 x 1 = global batch 32


def _recipe(tmp_path: Path, name: str = "recipe.yaml", **keys) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"accelerate_config": str(REPO / "accelerate_configs/cpu.yaml"), **keys}))
    return path


def _persetrain(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "persetrain.cli", "-q", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("recipe", sorted((REPO / "recipes").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_recipe_names_an_accelerate_config_that_launches(recipe):
    plan = plan_launch(recipe, cpu=False, check_data=False, read_keys=recipe_keys)
    command = local_command(plan)
    assert command.argv[:4] == ["accelerate", "launch", "--config_file", str(plan.accelerate_config_path)]
    assert command.argv[-4:] == ["-m", f"persetrain.train.{plan.trainer}", "--config", str(recipe)]


def test_cpu_recipe_command_and_overrides():
    plan = plan_launch(
        CPU_RECIPE.relative_to(REPO), overrides=["--max_steps", "3"], check_data=False, read_keys=recipe_keys
    )
    assert local_command(plan).shell() == (
        "accelerate launch --config_file accelerate_configs/cpu.yaml -m persetrain.train.sft "
        "--config recipes/perse/cpu_smollm2_per-mpst-k3.yaml --max_steps 3"
    )


@pytest.mark.slow
def test_several_cpu_processes_go_through_torchrun_and_keep_the_global_batch(tmp_path):
    recipe = _recipe(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=4)
    command = local_command(plan_launch(recipe, num_processes=2, read_keys=recipe_keys))
    assert command.argv == [
        "torchrun",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "persetrain.train.sft",
        "--config",
        str(recipe),
        "--gradient_accumulation_steps",
        "2",
    ]
    assert command.env["ACCELERATE_USE_CPU"] == "true" and "global batch 8" in command.notes[0]


def test_world_size_that_does_not_divide_the_batch_is_refused():
    plan = plan_launch(ZERO3_RECIPE, num_processes=4, check_data=False, read_keys=recipe_keys)  # 32 = 4 x 4 x 2
    assert plan.overrides == ["--gradient_accumulation_steps", "2"]
    with pytest.raises(LaunchError) as refused:
        plan_launch(ZERO3_RECIPE, num_processes=3, check_data=False, read_keys=recipe_keys)
    assert str(refused.value) == (
        f"{ZERO3_RECIPE}: the global batch 32 (per_device_train_batch_size 4 x gradient_accumulation_steps 1 x 8 "
        "processes, those of the accelerate config it was tuned for) does not split into equal steps over 3 "
        "processes; launch on a number of processes that divides 32 (1, 2, 4, 8, 16, 32), or choose this world's "
        "global batch with -- --gradient_accumulation_steps N (global batch N x 4 x 3)"
    )
    # Accumulation given on the command line sets the batch: 3 x 4 x 3 = 36.
    given = plan_launch(
        ZERO3_RECIPE,
        num_processes=3,
        overrides=["--gradient_accumulation_steps", "3"],
        check_data=False,
        read_keys=recipe_keys,
    )
    assert "global batch 36 instead of the recipe's 32" in given.notes[0]


def test_a_rank_share_smaller_than_the_per_device_batch_shrinks_it():
    """32 over 32 ranks is one example each: per-device 4 -> 1 (less memory per rank, never more); a per-device
    batch given on the command line is kept, so it must divide each rank's share."""
    plan = plan_launch(ZERO3_RECIPE, num_processes=32, check_data=False, read_keys=recipe_keys)
    assert plan.overrides == ["--per_device_train_batch_size", "1"]
    assert plan.notes == ["per_device_train_batch_size 4 -> 1: 32 processes keep the global batch 32 tuned on 8"]
    assert plan_launch(ZERO3_RECIPE, num_processes=16, check_data=False, read_keys=recipe_keys).overrides == [
        "--per_device_train_batch_size",
        "2",
    ]
    with pytest.raises(LaunchError, match=r"does not split into equal steps of per_device_train_batch_size 4 \(given"):
        plan_launch(
            ZERO3_RECIPE,
            num_processes=16,
            overrides=["--per_device_train_batch_size", "4"],
            check_data=False,
            read_keys=recipe_keys,
        )


def test_a_dashed_override_sets_the_batch_the_launch_rescales_as_the_trainer_reads_it(tmp_path):
    """The trainer's parser takes ``--gradient-accumulation-steps`` as well as ``--gradient_accumulation_steps``; the
    launch reads the recipe through that parser, so it sees the value the trainer trains with and rescales nothing
    over it (a rescaled ``--gradient_accumulation_steps`` appended after it would win in the trainer)."""
    recipe = _recipe(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=1)
    plan = plan_launch(
        recipe,
        read_keys=recipe_keys,
        num_processes=2,
        overrides=["--gradient-accumulation-steps", "4"],
        check_data=False,
    )
    _, trained, _ = make_parser().parse_args_and_config(plan.trainer_args)
    assert plan.overrides == ["--gradient-accumulation-steps", "4"]
    assert plan.value("gradient_accumulation_steps") == trained.gradient_accumulation_steps == 4
    assert plan.notes == [
        "gradient_accumulation_steps 4 given on the command line: global batch 16 instead of the recipe's 2"
    ]

    # A per-device batch given dashed is kept as given; accumulation takes the rest of each rank's share (4 / 2).
    recipe = _recipe(tmp_path, "per_device.yaml", per_device_train_batch_size=4, gradient_accumulation_steps=1)
    plan = plan_launch(
        recipe,
        read_keys=recipe_keys,
        num_processes=2,
        overrides=["--per-device-train-batch-size", "1"],
        check_data=False,
    )
    _, trained, _ = make_parser().parse_args_and_config(plan.trainer_args)
    assert plan.overrides == ["--per-device-train-batch-size", "1", "--gradient_accumulation_steps", "2"]
    batch = (trained.per_device_train_batch_size, trained.gradient_accumulation_steps)
    assert batch == (plan.value("per_device_train_batch_size"), plan.value("gradient_accumulation_steps")) == (1, 2)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("learning_rate", "fast", "key 'learning_rate': expected a float, got 'fast'"),
        ("max_steps", [2], "key 'max_steps': expected an integer, got [2]"),
    ],
)
@pytest.mark.parametrize("slurm", [False, True], ids=["here", "slurm"])
def test_a_recipe_value_of_the_wrong_type_fails_a_dry_run_with_the_trainers_own_line(
    tmp_path, key, value, message, slurm
):
    """``launch --dry-run`` (and ``--slurm --dry-run``) checks what the trainer checks: a value of the wrong type is
    the trainer's one line, before any script is written or job submitted."""
    recipe = _recipe(tmp_path, **{key: value})
    with pytest.raises(RecipeError) as trainer:
        make_parser().parse_args_and_config(["--config", str(recipe)])
    assert str(trainer.value) == f"{recipe}: {message}"
    log_dir = tmp_path / "slurm"
    args = ["-q", "launch", "--config", str(recipe), "--dry-run"]
    result = CliRunner().invoke(app, [*args, "--slurm", "--log-dir", str(log_dir)] if slurm else args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: {trainer.value}"]
    assert not result.stdout and not log_dir.exists()


def test_another_accelerate_config_keeps_the_global_batch_the_recipe_was_tuned_for():
    """The CPU recipe (batch 1 on cpu.yaml's one process) launched under the 8-GPU ZeRO-3 config on 2 ranks keeps
    its global batch of 1, which 2 ranks cannot split, rather than taking the config's 8 x 1."""
    with pytest.raises(LaunchError, match=r"global batch 1 \(per_device_train_batch_size 1 .* x 1 processes, those of"):
        plan_launch(
            CPU_RECIPE,
            accelerate_config=REPO / "accelerate_configs/deepspeed_zero3.yaml",
            num_processes=2,
            check_data=False,
            read_keys=recipe_keys,
        )


def test_launch_passes_the_hardware_precision_and_an_absolute_deepspeed_json():
    """fsdp.yaml is written for bf16 GPUs; a recipe that leaves precision to the hardware trains in fp32 on this CPU.
    accelerate reads a config's DeepSpeed JSON from the working directory; the launch names it absolutely."""
    overrides = ["--gradient_accumulation_steps", "1"]
    fsdp = local_command(
        plan_launch(
            CPU_RECIPE,
            accelerate_config=REPO / "accelerate_configs/fsdp.yaml",
            num_processes=2,
            overrides=overrides,
            check_data=False,
            read_keys=recipe_keys,
        )
    )
    assert fsdp.argv[fsdp.argv.index("--mixed_precision") + 1] == "no" and fsdp.elastic
    zero3 = local_command(
        plan_launch(
            CPU_RECIPE,
            accelerate_config=REPO / "accelerate_configs/deepspeed_zero3.yaml",
            num_processes=2,
            overrides=overrides,
            check_data=False,
            read_keys=recipe_keys,
        )
    )
    json_path = Path(zero3.argv[zero3.argv.index("--deepspeed_config_file") + 1])
    assert json_path.is_absolute() and json_path == REPO / "accelerate_configs/deepspeed/zero3.json"
    assert "--mixed_precision" not in zero3.argv  # DeepSpeed's JSON decides ("auto": the recipe's)


def test_a_deepspeed_config_deepspeed_cannot_run_and_cuda_devices_without_a_gpu_are_one_line_each(tmp_path):
    ds = tmp_path / "zero4.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 4, "offload_param": {"device": "gpu"}}}))
    config = yaml.safe_load((REPO / "accelerate_configs/deepspeed_zero3.yaml").read_text())
    config["deepspeed_config"]["deepspeed_config_file"] = str(ds)
    (tmp_path / "zero.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(LaunchError) as refused:
        plan_launch(ZERO3_RECIPE, accelerate_config=tmp_path / "zero.yaml", check_data=False, read_keys=recipe_keys)
    assert f"{ds}: zero_optimization.stage 4: DeepSpeed's ZeRO stages are 0-3" in str(refused.value)
    assert f"{ds}: zero_optimization.offload_param.device 'gpu': DeepSpeed offloads to cpu or nvme" in str(
        refused.value
    )

    config = yaml.safe_load((REPO / "accelerate_configs/multi_gpu.yaml").read_text())
    (tmp_path / "two_gpus.yaml").write_text(yaml.safe_dump({**config, "gpu_ids": "0,1"}))
    with pytest.raises(LaunchError, match=r"two_gpus.yaml: gpu_ids 0,1 names CUDA devices, and this machine has none$"):
        plan_launch(ZERO3_RECIPE, accelerate_config=tmp_path / "two_gpus.yaml", check_data=False, read_keys=recipe_keys)


def test_deepspeed_config_must_match_the_accelerate_config(tmp_path):
    ds = tmp_path / "zero2.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}))
    zero3 = str(REPO / "accelerate_configs/deepspeed_zero3.yaml")
    recipe = _recipe(tmp_path, accelerate_config=zero3, deepspeed=str(ds))
    with pytest.raises(LaunchError, match=r"DeepSpeed ZeRO stages disagree: .*: stage 3, .*zero2.json: stage 2"):
        plan_launch(recipe, read_keys=recipe_keys)
    with pytest.raises(LaunchError, match=r"'deepspeed' names a DeepSpeed config .* runs distributed_type NO"):
        plan_launch(_recipe(tmp_path, "cpu.yaml", deepspeed=str(ds)), read_keys=recipe_keys)
    with pytest.raises(InputError, match=r"missing.json: no such DeepSpeed config file"):
        plan_launch(
            _recipe(tmp_path, "gone.yaml", accelerate_config=zero3, deepspeed=str(tmp_path / "missing.json")),
            read_keys=recipe_keys,
        )


def test_a_dataset_the_trainer_would_refuse_is_refused_before_any_process_starts(tmp_path, tiny_dataset):
    recipe = _recipe(tmp_path, dataset_path=str(tmp_path / "data/perse/per_mpst_k3"))
    with pytest.raises(
        LaunchError,
        match=r"recipe key 'dataset_path' names .*per_mpst_k3, which does not exist; "
        r"write it with `persetrain prepare` \(e.g. persetrain prepare perse",
    ):
        plan_launch(recipe, read_keys=recipe_keys)
    with pytest.raises(LaunchError, match=r"--dataset_path 'dataset_path' names .*recipe.yaml, which is not a folder"):
        plan_launch(recipe, overrides=["--dataset_path", str(recipe)], read_keys=recipe_keys)
    with pytest.raises(InputError, match=r"not a dataset saved with save_to_disk \(no dataset_dict.json\)"):
        plan_launch(recipe, overrides=["--dataset_path", str(tmp_path)], read_keys=recipe_keys)
    evaluating = ["--dataset_path", str(tiny_dataset), "--eval_strategy", "steps", "--dataset_test_split", "dev"]
    with pytest.raises(LaunchError, match=r"dataset_test_split 'dev' is not a split of .* \(it has: train, test\)"):
        plan_launch(recipe, overrides=evaluating, read_keys=recipe_keys)
    assert plan_launch(recipe, overrides=["--dataset_path", str(tiny_dataset)], read_keys=recipe_keys).overrides == [
        "--dataset_path",
        str(tiny_dataset),
    ]


@pytest.mark.slow
def test_missing_files_are_one_line_errors(tmp_path):
    result = _persetrain("launch", "--config", "recipes/none.yaml", "--dry-run")
    assert result.returncode == 2 and (result.stdout + result.stderr).strip() == (
        "error: recipes/none.yaml: no such recipe file, nor a shipped recipe of that name (`persetrain recipes` "
        "lists the shipped ones)"
    )
    result = _persetrain("launch", "--config", "perse/llama2-7b-chat_per-mpst", "--dry-run")
    assert result.returncode == 2 and (result.stdout + result.stderr).strip() == (
        "error: perse/llama2-7b-chat_per-mpst: no such recipe file, nor a shipped recipe of that name (close names: "
        "perse/llama2-7b-chat_per-mpst-k3, perse/llama2-13b-chat_per-mpst-k3, perse/llama2-13b-chat_per-doc, "
        "perse/mistral-7b_per-mpst-k3)"
    )
    recipe = _recipe(tmp_path, accelerate_config="accelerate_configs/tpu.yaml")
    result = _persetrain("launch", "--config", str(recipe), "--dry-run")
    assert result.returncode == 2
    output = (result.stdout + result.stderr).strip()
    assert output == (
        "error: accelerate_configs/tpu.yaml: no such accelerate config file, nor a shipped accelerate config of that "
        "name (close names: cpu, multi_gpu)"
    )


@pytest.mark.slow
def test_shipped_recipes_and_accelerate_configs_are_named_without_a_path(tmp_path):
    """From any folder: ``perse/NAME`` is recipes/perse/NAME.yaml, ``deepspeed_zero3`` accelerate_configs/'s; a
    recipe path that exists wins over a shipped name, and a recipe's own relative config name is found beside it."""
    plan = plan_launch(
        "perse/llama2-7b-chat_per-mpst-k3", accelerate_config="deepspeed_zero3", check_data=False, read_keys=recipe_keys
    )
    assert (
        plan.recipe_path == ZERO3_RECIPE
        and plan.accelerate_config_path == REPO / "accelerate_configs/deepspeed_zero3.yaml"
    )
    assert plan_launch(
        "recipes/perse/cpu_smollm2_per-mpst-k3.yaml", check_data=False, read_keys=recipe_keys
    ).recipe_path == (
        Path("recipes/perse/cpu_smollm2_per-mpst-k3.yaml")  # from the checkout root: the path as given
    )
    # The trainers take the same names (persetrain sft --config perse/NAME).
    assert read_recipe("perse/cpu_smollm2_per-mpst-k3") == yaml.safe_load(CPU_RECIPE.read_text())
    with pytest.raises(RecipeError, match=r"^perse/cpu: no such recipe file, nor a shipped recipe .*close names: "):
        read_recipe("perse/cpu")
    own = tmp_path / "perse" / "llama2-7b-chat_per-mpst-k3.yaml"
    own.parent.mkdir()
    own.write_text(yaml.safe_dump({"accelerate_config": "cpu", "per_device_train_batch_size": 2}))
    result = _persetrain("launch", "--config", "perse/llama2-7b-chat_per-mpst-k3.yaml", "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == (
        f"accelerate launch --config_file {REPO}/accelerate_configs/cpu.yaml -m persetrain.train.sft "
        "--config perse/llama2-7b-chat_per-mpst-k3.yaml"
    )


@pytest.mark.parametrize(
    ("argv", "given"),
    [
        (["grpo", "--config", "recipes/judge/cpu_smollm2_prefeval.yaml"], "recipes/judge/cpu_smollm2_prefeval.yaml"),
        (["launch", "--config", "judge/cpu_smollm2_prefeval", "--dry-run"], "judge/cpu_smollm2_prefeval"),
    ],
    ids=["grpo", "launch"],
)
def test_a_recipe_named_by_its_renamed_folder_is_refused_with_its_new_name(argv, given):
    """The verdict judges' recipes were recipes/judge/: a command naming one there fails in one line that gives
    the name to use (exit 2), before anything is read or launched."""
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert result.output == (
        f"error: {given}: the recipes of judge/ are now in verdict/: verdict/cpu_smollm2_prefeval\n"
    )


@pytest.mark.slow
def test_recipes_lists_every_shipped_recipe_with_its_model_method_and_scale():
    result = _persetrain("recipes")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["recipe", "method", "model", "scale"]
    shipped = sorted(
        p.relative_to(REPO / "recipes").with_suffix("").as_posix() for p in (REPO / "recipes").rglob("*.yaml")
    )
    assert [line.split()[0] for line in lines[1:]] == shipped
    rows = {line.split()[0]: " ".join(line.split()[1:]) for line in lines[1:]}
    assert rows["perse/llama2-13b-chat_per-mpst-k3"] == (
        "perse / sft meta-llama/Llama-2-13b-chat-hf 8 GPUs, DeepSpeed ZeRO-3, global batch 16, full weights"
    )
    assert rows["parl/qwen3-8b_news_parl-a"] == (
        "parl / grpo Qwen/Qwen3-8B 8 GPUs, DeepSpeed ZeRO-3 + offload, global batch 40, full weights"
    )
    assert rows["perse/cpu_smollm2_per-mpst-k3"] == (
        "perse / sft embedded:smollm2-135m-instruct CPU, 1 process, global batch 1, LoRA r 64"
    )
    assert rows["rm/cpu_smollm2_prefeval"].startswith("rm / rm embedded:smollm2-135m-instruct CPU")


def _bash_syntax_ok(script: str, tmp_path: Path) -> None:
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    subprocess.run(["bash", "-n", str(path)], check=True)


def test_single_node_sbatch(tmp_path):
    options = SlurmOptions(
        partition="cpu", time="01:00:00", mem="16G", log_dir=tmp_path / "logs", extra_sbatch=["--account=nlp"]
    )
    script = render_sbatch(
        plan_slurm(CPU_RECIPE, options, overrides=["--max_steps", "3"], check_data=False, read_keys=recipe_keys),
        options,
    )
    _bash_syntax_ok(script, tmp_path)
    for line in (
        "#SBATCH --partition=cpu",
        "#SBATCH --nodes=1",
        "#SBATCH --time=01:00:00",
        "#SBATCH --mem=16G",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@300",
        f"#SBATCH --output={tmp_path}/logs/%x-%j.out",
        f"source {sys.prefix}/bin/activate",
        "#SBATCH --account=nlp",
        'scancel --signal=USR1 "$SLURM_JOB_ID"',
        'scontrol requeue "$SLURM_JOB_ID"',
        "trap checkpoint_and_requeue USR1",
    ):
        assert line in script
    assert (
        "srun --ntasks=1 --kill-on-bad-exit=1 bash -c \"trap '' USR1; exec accelerate launch --config_file "
        f'accelerate_configs/cpu.yaml -m persetrain.train.sft --config {CPU_RECIPE} --max_steps 3" &'
    ) in script
    assert "--gpus-per-node" not in script


def test_multi_node_sbatch_escapes_the_node_rank(tmp_path):
    recipe = _recipe(
        tmp_path,
        accelerate_config=str(REPO / "accelerate_configs/deepspeed_zero3.yaml"),
        per_device_train_batch_size=1,
        gradient_accumulation_steps=8,
    )  # 1 x 8 x 8 = 64
    options = SlurmOptions(nodes=4, log_dir=tmp_path)
    plan = plan_slurm(recipe, options, read_keys=recipe_keys)
    assert plan.num_processes == 32 and plan.overrides == ["--gradient_accumulation_steps", "2"]
    script = render_sbatch(plan, options)
    _bash_syntax_ok(script, tmp_path)
    assert "#SBATCH --gpus-per-node=8" in script and "#SBATCH --nodes=4" in script
    assert 'MAIN_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in script
    srun = re.search(r'^srun .*?bash -c "(.*)" &$', script, re.M | re.S).group(1)
    assert (
        f"accelerate launch --config_file {REPO}/accelerate_configs/deepspeed_zero3.yaml "
        f"--deepspeed_config_file {REPO}/accelerate_configs/deepspeed/zero3.json --num_machines $NNODES "
        "--num_processes $WORLD_SIZE --machine_rank \\$SLURM_PROCID --main_process_ip $MAIN_NODE "
        "--main_process_port $MAIN_PORT --rdzv_backend static -m persetrain.train.sft"
    ) in srun
    executable = [ln for ln in script.splitlines() if not ln.lstrip().startswith("#")]
    assert not [ln for ln in executable if re.search(r"(?<!\\)\$SLURM_PROCID", ln)]  # never expanded by the batch shell

    # A world that the recipe's batch cannot be split over is refused before anything is written.
    with pytest.raises(LaunchError, match="the global batch 32 .* does not split into equal steps over 64 processes"):
        plan_slurm(ZERO3_RECIPE, SlurmOptions(nodes=8), check_data=False, read_keys=recipe_keys)


@pytest.mark.slow
def test_the_readme_slurm_example_runs_once_its_data_is_there_and_a_dry_run_checks_what_a_submission_does(
    tmp_path, tiny_dataset
):
    """The 13B recipe's global batch 16 (2 x 1 x 8 GPUs) on two 8-GPU nodes: one example per rank and step. Without
    the data, the dry run refuses it exactly as the submission does (before looking for sbatch)."""
    example = ["launch", "--slurm", "--config", "recipes/perse/llama2-13b-chat_per-mpst-k3.yaml", "--partition", "gpu"]
    example += ["--time", "2-00:00:00", "--nodes", "2"]
    work = tmp_path / "work"
    work.mkdir()
    refused = [_persetrain(*example, *dry, cwd=work) for dry in ([], ["--dry-run"])]
    assert [result.returncode for result in refused] == [2, 2]
    refusals = {(result.stdout + result.stderr).strip() for result in refused}
    assert len(refusals) == 1 and refusals.pop() == (
        f"error: {REPO}/recipes/perse/llama2-13b-chat_per-mpst-k3.yaml: recipe key 'dataset_path' names "
        "data/perse/per_mpst_k3, which does not exist; write it with `persetrain prepare` (e.g. persetrain prepare "
        "perse --raw RAW --out data/perse) or pass -- --dataset_path PATH"
    )
    (work / "data/perse").mkdir(parents=True)
    (work / "data/perse/per_mpst_k3").symlink_to(tiny_dataset, target_is_directory=True)
    result = _persetrain(*example, "--dry-run", cwd=work)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "note: per_device_train_batch_size 2 -> 1: 16 processes keep the global batch 16 tuned on 8",
        "wrote runs/slurm/llama2-13b-chat_per-mpst-k3.sbatch (not submitted)",
    ]
    script = (work / "runs/slurm/llama2-13b-chat_per-mpst-k3.sbatch").read_text()
    _bash_syntax_ok(script, tmp_path)
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=gpu",
        "#SBATCH --time=2-00:00:00",
    ):
        assert line in script
    assert "--per_device_train_batch_size 1" in script


@pytest.mark.slow
def test_grpo_with_a_vllm_server_keeps_one_node_for_generation(tmp_path):
    recipe = tmp_path / "grpo.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "accelerate_config": str(REPO / "accelerate_configs/deepspeed_zero2.yaml"),
                "model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct",
                "use_vllm": True,
                "vllm_mode": "server",
                "num_generations": 8,
                "per_device_train_batch_size": 8,
                "gradient_accumulation_steps": 2,
            }
        )
    )
    options = SlurmOptions(nodes=3, log_dir=tmp_path)
    plan = plan_slurm(recipe, options, read_keys=recipe_keys)
    assert plan.trainer == "grpo" and plan.num_processes == 16  # two training nodes x 8 GPUs: accumulation 2 -> 1
    script = render_sbatch(plan, options)
    _bash_syntax_ok(script, tmp_path)
    assert "trl vllm-serve --model Qwen/Qwen2.5-1.5B-Instruct" in script and "NNODES=$((SLURM_NNODES - 1))" in script
    assert "-m persetrain.train.grpo" in script and "--vllm_server_host $VLLM_NODE" in script
    with pytest.raises(LaunchError, match="needs --nodes 2 or more"):
        plan_slurm(recipe, SlurmOptions(nodes=1), read_keys=recipe_keys)


@pytest.fixture(scope="module")
def tiny_dataset(tmp_path_factory) -> Path:
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Profile: likes war films. Plot {i}: a siege in winter."}],
            "completion": [{"role": "assistant", "content": f"[Review] Tense. [Score] {2 + i % 8}"}],
        }
        for i in range(16)
    ]
    path = tmp_path_factory.mktemp("launch-data") / "per_mpst_k3"
    DatasetDict(train=Dataset.from_list(rows), test=Dataset.from_list(rows[:4])).save_to_disk(str(path))
    return path


@pytest.mark.slow
def test_launch_runs_two_cpu_processes_as_one_ddp_group(tiny_llama_dir, tiny_dataset, tmp_path, monkeypatch):
    """``persetrain launch --num-processes 2`` on a CPU: two gloo ranks sharing the data, not two lone runs.

    (tests/test_multiprocess.py shows that such ranks match one process's losses at the same global batch.)
    """
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # as a user's shell has it: the launch sets it per rank
    out = tmp_path / "np2"
    result = _persetrain(
        "launch",
        "--config",
        str(CPU_RECIPE),
        "--num-processes",
        "2",
        "--",
        "--model_name_or_path",
        str(tiny_llama_dir),
        "--dataset_path",
        str(tiny_dataset),
        "--output_dir",
        str(out),
        "--max_steps",
        "1",
        "--logging_steps",
        "1",
        "--save_steps",
        "1",
        "--packing",
        "false",
        "--disable_tqdm",
        "true",
        "--merge_adapter",
        "false",
        "--per_device_train_batch_size",
        "2",
        "--gradient_accumulation_steps",
        "1",
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.splitlines()[1].startswith("ACCELERATE_USE_CPU=true OMP_NUM_THREADS=")
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r for r in logged if "loss" in r]
    # One record (rank 0 logs) and a quarter epoch: 16 rows in global batches of 2 ranks x 2. Two lone
    # processes would log twice, each an eighth of an epoch.
    assert len(losses) == 1 and losses[0]["epoch"] == 0.25
    assert {p.name for p in (out / "checkpoint-1").glob("rng_state*")} == {"rng_state_0.pth", "rng_state_1.pth"}
    assert (out / "checkpoint-1" / "adapter_model.safetensors").is_file()
