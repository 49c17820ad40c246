"""Every shipped recipe runs, and every accelerate / DeepSpeed config is what DeepSpeed and accelerate accept.

Each recipe in ``recipes/`` (recursively) runs for 2 steps through its trainer's own parser and ``main``
(the ones ``persetrain sft`` / ``python -m persetrain.train.<trainer>`` run), on data written by
``persetrain prepare`` into a directory laid out like a checkout, with only the model swapped for the
tiny random LLaMA and what this CPU cannot honour overridden (bf16 weights and mixed precision), plus
overrides for speed: no wandb side process (``report_to``), a 4-row evaluation at the end
(``max_eval_samples``) and, for GRPO, two short rollouts without activation checkpointing (below). A recipe
whose dataset path, keys or accelerate config do not fit fails here.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from persetrain.config_files import read_yaml_mapping
from persetrain.launch import LaunchError, plan_launch
from persetrain.launch.plan import TRAINERS, infer_trainer
from persetrain.models import load_model
from persetrain.train.trainers import recipe_keys

REPO = Path(__file__).resolve().parents[1]
PREFEVAL_DEV = REPO / "data" / "prefeval" / "dev"
RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))
ACCELERATE_CONFIGS = sorted((REPO / "accelerate_configs").glob("*.yaml"))
DEEPSPEED_CONFIGS = [
    c for c in ACCELERATE_CONFIGS if yaml.safe_load(c.read_text()).get("distributed_type") == "DEEPSPEED"
]


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.fixture
def restore_environ():
    """Recipes export their ``env``; keep it out of the other tests."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _prepare(*args: str) -> None:
    """Run ``persetrain prepare ...`` in-process, as a user would from a checkout."""
    from typer.testing import CliRunner

    from persetrain.cli import app

    result = CliRunner().invoke(app, ["--quiet", "prepare", *args])
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def prepared(prepared_root):
    """``prepared_root`` plus the PARL datasets (``data/parl/parl_<task>``), PARL's rule verifier data
    (``data/verifier/parl_news``), the preference datasets (``data/preference``) and the judge's verdict prompts
    in both modes (``data/verdict/prefeval``, ``data/verdict/prefeval_think``) and one candidate at a time
    (``data/verdict/prefeval-yes-no``), all from the given PrefEval dev topics,
    and the sample users' reference preference data (``data/preference-reference``) when a recipe trains on them."""
    data = prepared_root / "data"
    if any("parl" in r.relative_to(REPO).parts for r in RECIPES) and not (data / "parl").exists():
        _prepare("parl", "--raw", str(data / "raw" / "parl"), "--out", str(data / "parl"))
    verifier = data / "verifier" / "parl_news"
    if any("parl_news" in r.stem and "verifier" in r.parts for r in RECIPES) and not verifier.exists():
        _prepare("verifier", "--parl", str(data / "parl" / "parl_news"), "--out", str(verifier))
    if any({"rm", "verifier"} & set(r.relative_to(REPO).parts) for r in RECIPES) and not (data / "preference").exists():
        _prepare(
            "preference",
            "--prefeval",
            str(PREFEVAL_DEV),
            "--holdout-topics",
            "lifestyle_dietary",
            "--out",
            str(data / "preference"),
        )
    judge = [r for r in RECIPES if "verdict" in r.relative_to(REPO).parts]
    if judge and not (data / "verdict").exists():
        for mode, name in (("verdict", "prefeval"), ("think", "prefeval_think")):
            _prepare(
                "verdict",
                "--prefeval",
                str(PREFEVAL_DEV),
                "--holdout-topics",
                "lifestyle_dietary",
                "--mode",
                mode,
                "--out",
                str(data / "verdict" / name),
            )
        out = data / "verdict" / "prefeval-yes-no"  # the preference data's verifier view, prepared above
        _prepare("verdict", "--verifier", str(data / "preference" / "verifier"), "--balance-yes-no", "--out", str(out))
    reference = data / "preference-reference"
    if any("parl_reference" in r.stem for r in RECIPES) and not reference.exists():
        sources = []
        for task in ("amazon", "reddit", "news"):
            sources += ["--reference", str(data / f"reference-{task}")]
            raw = data / "raw" / "parl" / task
            _prepare(
                "reference",
                "--raw",
                str(raw),
                "--task",
                task,
                "--synthetic",
                "--baselines",
                str(raw / "baselines.jsonl"),
                "--out",
                sources[-1],
            )
        _prepare("preference", *sources, "--out", str(reference))
    return prepared_root


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RECIPES, ids=_id)
def test_recipe_runs_two_steps(recipe, prepared, tiny_llama_dir, tmp_path, monkeypatch, restore_environ):
    trainer = infer_trainer(read_yaml_mapping(recipe, "recipe"))
    module = importlib.import_module(TRAINERS[trainer])
    monkeypatch.chdir(prepared)  # the recipe's relative dataset_path, as in a checkout after `prepare`
    out = tmp_path / "out"
    overrides = [
        "--model_name_or_path",
        str(tiny_llama_dir),
        "--output_dir",
        str(out),
        "--max_steps",
        "2",
        "--logging_steps",
        "1",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--max_eval_samples",
        "4",
    ]
    if not torch.cuda.is_available():
        overrides += ["--bf16", "false", "--fp16", "false", "--dtype", "float32"]
    if trainer == "grpo":
        # No vLLM and no judge server here: rollouts by the policy itself, judged in-process by the tiny
        # model; two short rollouts per prompt keep 2 steps cheap. Without Triton, TRL's fused head scores
        # every prompt position against the whole vocabulary (on Triton devices, the rollout tokens only),
        # most of a step for the tiny model; the recipes' activation checkpointing sends the log-probs down
        # that path, so it is off here and each prompt runs once (persetrain.train.grpo_trainer). A judge's
        # batch holds one question's 2 orders (or 2 candidates) x 2 rollouts, what verdict-consistent compares.
        whole_items = "4" if "verdict" in recipe.relative_to(REPO).parts else "2"
        overrides += [
            "--activation_checkpointing",
            "false",
            "--use_vllm",
            "false",
            "--reward_judge_backend",
            "hf",
            "--reward_judge_model",
            str(tiny_llama_dir),
            "--num_generations",
            "2",
            "--per_device_train_batch_size",
            whole_items,
            "--max_completion_length",
            "8",
        ]
    parsed = module.make_parser().parse_args_and_config(["--config", str(recipe), *overrides])
    result = module.main(*parsed)
    assert result.global_step == 2
    logged = map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
    steps = [r for r in logged if r["event"] == "log" and "loss" in r]
    losses = [r["loss"] for r in steps]
    assert len(losses) == 2 and all(loss == loss for loss in losses)  # finite
    if trainer == "sft":
        assert all(loss > 0 for loss in losses)  # the completions survived truncation: labelled tokens
    assert (Path(result.model_dir) / "config.json").is_file()
    if trainer == "grpo" and "parl" in recipe.relative_to(REPO).parts:
        _check_parl_run(out, steps, parsed[0].dataset_path, parsed[3].reward_funcs)
        load_model(str(result.model_dir))  # the final policy loads like any persetrain model


def _check_parl_run(out: Path, steps: list[dict], dataset_path: str, rewards: list[str]) -> None:
    """A PARL run's reward parts and metrics: TRL called the reward with the dataset's columns, every scored
    completion has its line in reward_parts.jsonl, and each step logged the reward, its valid share and its wall time.
    The tiny random policy writes no valid rubric, so most completions score 0.0 (unparsable) or 0.1 (too few rules);
    the reward math and the batched judge are ``tests/test_parl_reward.py``'s."""
    from datasets import load_from_disk

    from persetrain.train.grpo import REWARD_PARTS_FILE

    parts = [json.loads(line) for line in (out / REWARD_PARTS_FILE).read_text().splitlines()]
    assert parts and {p["variant"] for p in parts} == set(rewards)
    assert sorted({p["step"] for p in parts}) == [1, 2]  # every generation batch's completions
    assert {p["id"] for p in parts} <= set(load_from_disk(dataset_path)["train"]["id"])  # each names its example
    assert all(p["reward"] in (0.0, 0.1) or p["valid_rules"] >= 2 for p in parts)
    for record in steps:
        assert 0.0 <= record["parl/valid_share"] <= 1.0
        assert record["time/reward_s"] > 0 and record["step_time"] >= record["time/reward_s"]
        assert all(f"rewards/{name.replace('-', '_')}/mean" in record for name in rewards)
    resolved = json.loads((out / "resolved_config.json").read_text())
    assert resolved["rewards"]["reward_funcs"] == rewards  # the reward arguments are recorded with the run


def test_a_missing_dataset_names_the_key_and_the_prepare_command(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from persetrain.cli import app

    monkeypatch.chdir(tmp_path)  # no data/ here
    recipe = REPO / "recipes" / "perse" / "llama2-13b-chat_per-doc.yaml"
    result = CliRunner().invoke(app, ["sft", "--config", str(recipe), "--bf16", "false"])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "data/perse/per_doc" in message and "'dataset_path'" in message
    assert "persetrain prepare perse --raw RAW --out data/perse" in message


def test_trainer_is_detected_from_the_keys():
    assert infer_trainer({"packing": True, "learning_rate": 1.0e-4}) == "sft"
    assert infer_trainer({"num_generations": 8, "learning_rate": 1.0e-6}) == "grpo"
    assert infer_trainer({"loss": "listwise", "learning_rate": 1.0e-6}) == "rm"


# ------------------------------------------------------------------------------------ launch configs


@pytest.mark.parametrize("config", ACCELERATE_CONFIGS, ids=_id)
def test_accelerate_config_loads(config):
    from accelerate.commands.config.config_args import ClusterConfig

    loaded = ClusterConfig.from_yaml_file(str(config))
    assert loaded.num_processes == (1 if config.stem in {"cpu", "single_gpu"} else 8)
    assert loaded.use_cpu == (config.stem == "cpu")


def test_the_shipped_configs_cover_every_setup():
    kinds = {yaml.safe_load(c.read_text())["distributed_type"] for c in ACCELERATE_CONFIGS}
    assert kinds == {"NO", "MULTI_GPU", "DEEPSPEED", "FSDP"}
    assert {c.stem for c in DEEPSPEED_CONFIGS} == {"deepspeed_zero2", "deepspeed_zero3", "deepspeed_zero3_offload"}


@pytest.mark.parametrize("config", DEEPSPEED_CONFIGS, ids=_id)
def test_deepspeed_json_is_accepted_by_deepspeed(config):
    """The JSON, with its "auto" values filled from a recipe as transformers fills them, parses in
    DeepSpeed's own config class, and its ZeRO stage / offload are what the accelerate config says."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    from persetrain.train.sft import make_parser

    accelerate = read_yaml_mapping(config, "accelerate config")
    ds = json.loads((REPO / accelerate["deepspeed_config"]["deepspeed_config_file"]).read_text())
    _, training, _ = make_parser().parse_args_and_config(
        [
            "--config",
            str(REPO / "recipes" / "perse" / "llama2-7b-chat_per-mpst-k3.yaml"),
            "--bf16",
            "false",
            "--output_dir",
            "unused",
        ]
    )
    filled = HfTrainerDeepSpeedConfig(ds)
    filled.trainer_config_process(training)
    llama_7b = SimpleNamespace(config=SimpleNamespace(hidden_size=4096))  # the bucket sizes scale with it
    filled.trainer_config_finalize(training, model=llama_7b, num_training_steps=100)
    parsed = DeepSpeedConfig(filled.config)
    stage = 3 if "zero3" in config.stem else 2
    assert parsed.zero_optimization_stage == stage
    assert parsed.train_micro_batch_size_per_gpu == training.per_device_train_batch_size
    offload = parsed.zero_config.offload_optimizer
    assert (offload is not None and offload.device == "cpu") == config.stem.endswith("offload")
    assert bool(accelerate["deepspeed_config"]["zero3_init_flag"]) == (stage == 3)


def test_mismatched_deepspeed_and_accelerate_configs_are_reported(tmp_path, monkeypatch):
    """Every disagreement is listed at once, before any process starts."""
    monkeypatch.chdir(tmp_path)  # accelerate reads deepspeed_config_file from the launch directory
    (tmp_path / "accelerate_configs" / "deepspeed").mkdir(parents=True)
    ds = json.loads((REPO / "accelerate_configs" / "deepspeed" / "zero3.json").read_text())
    ds["zero_optimization"]["stage"] = 2  # a "zero3" file that is not
    ds["train_micro_batch_size_per_gpu"] = 8
    (tmp_path / "accelerate_configs" / "deepspeed" / "zero3.json").write_text(json.dumps(ds))
    accelerate = yaml.safe_load((REPO / "accelerate_configs" / "deepspeed_zero3_offload.yaml").read_text())
    accelerate["deepspeed_config"]["deepspeed_config_file"] = "accelerate_configs/deepspeed/zero3.json"
    accelerate["deepspeed_config"]["offload_param_device"] = "cpu"
    (tmp_path / "accelerate_configs" / "deepspeed_zero3_offload.yaml").write_text(yaml.safe_dump(accelerate))
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "accelerate_config: accelerate_configs/deepspeed_zero3_offload.yaml\nbf16: true\n"
        "per_device_train_batch_size: 4\n"
    )
    with pytest.raises(LaunchError) as refused:
        plan_launch(recipe, check_data=False, read_keys=recipe_keys)
    problems = str(refused.value)
    assert (
        "'offload_param_device' is set in the accelerate config, which accelerate refuses next to zero3.json"
        in problems
    )
    assert "zero3_init_flag True does not fit ZeRO stage 2" in problems
    assert "named for ZeRO-3 but sets stage 2" in problems
    assert "zero3.json sets train_micro_batch_size_per_gpu 8, the recipe per_device_train_batch_size 4" in problems

    accelerate["deepspeed_config"]["zero_stage"] = 3
    (tmp_path / "accelerate_configs" / "deepspeed_zero3_offload.yaml").write_text(yaml.safe_dump(accelerate))
    with pytest.raises(
        LaunchError,
        match=r"DeepSpeed ZeRO stages disagree: .*\(zero_stage\): stage 3, "
        r".*zero3.json: stage 2",
    ):
        plan_launch(recipe, check_data=False, read_keys=recipe_keys)

    recipe.write_text("accelerate_config: accelerate_configs/cpu.yaml\nbf16: true\n")
    (tmp_path / "accelerate_configs" / "cpu.yaml").write_text((REPO / "accelerate_configs" / "cpu.yaml").read_text())
    with pytest.raises(LaunchError, match="the recipe trains in bf16, which a CPU config cannot honour"):
        plan_launch(recipe, check_data=False, read_keys=recipe_keys)
    assert plan_launch(recipe, overrides=["--bf16", "false"], check_data=False, read_keys=recipe_keys).cpu
