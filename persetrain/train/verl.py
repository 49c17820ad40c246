"""The verl backend of ``persetrain grpo``: the same recipe as a config for verl's PPO trainer (GRPO).

``persetrain grpo --backend verl --config recipes/parl/<recipe>.yaml [--run]`` writes
``<output_dir>/verl/<name>.yaml`` and prints (``--run``: runs) ``python -m verl.trainer.main_ppo
--config-path <dir> --config-name <name>``. The file is a Hydra config on top of verl's own
``ppo_trainer.yaml`` (found through ``hydra.searchpath: pkg://verl.trainer.config``), so every key verl
has and the recipe does not set keeps verl's default. This is how the paper trained PARL (8 GPUs,
FSDP with parameter and optimizer offload, vLLM rollouts); the TRL backend is for everything else.

Written against verl 0.9.x, where the reward settings live under ``reward:``
(``reward.custom_reward_function.{path,name,reward_kwargs}``, ``reward.reward_manager.name``) and the
old top-level ``custom_reward_function`` / ``reward_model.reward_manager`` keys of the public PARL
recipe are ignored without a word. Only per-sample reward managers remain (``naive``, ``dapo``, ...):
verl calls ``persetrain.rewards.parl_verl.compute_score(data_source=, solution_str=, ground_truth=,
extra_info=, **reward_kwargs)`` once per rollout.

How the TRL recipe keys become verl's (TRL counts completions per device, verl counts prompts):

===================================  =================================================================
recipe (TRL ``GRPOConfig``)          verl
===================================  =================================================================
num_generations                      actor_rollout_ref.rollout.n
per_device_train_batch_size x        data.train_batch_size (prompts per generation batch) and
processes x steps / n                actor.ppo_mini_batch_size (prompts per optimizer step)
beta, loss_type                      actor.use_kl_loss / kl_loss_coef (kl_loss_type low_var_kl),
                                     actor.loss_agg_mode (dapo/bnpo: token-mean, grpo:
                                     seq-mean-token-mean, dr_grpo: seq-mean-token-sum-norm)
learning_rate, lr_scheduler_type,    actor.optim.lr, lr_scheduler_type (cosine / constant),
lr_scheduler_kwargs.min_lr_rate      min_lr_ratio
temperature, top_p, top_k            rollout.temperature, top_p, top_k (TRL's 0 = verl's -1)
max_prompt_length,                   data.max_prompt_length (overlong prompts filtered),
max_completion_length                data.max_response_length
accelerate_config                    trainer.n_gpus_per_node (its num_processes), FSDP param/optimizer
                                     offload (its DeepSpeed offload devices or fsdp_offload_params)
===================================  =================================================================
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from persetrain.config_files import deepspeed_offloads, read_accelerate_config
from persetrain.io import atomic_write
from persetrain.models import local_weights_dir
from persetrain.rewards.registry import PARL_REWARDS
from persetrain.train.configs import ModelConfig, RewardArguments, ScriptArguments
from persetrain.train.grpo import GRPOConfig, make_parser
from persetrain.train.recipe import RecipeError

#: verl loads the reward by module path; ``pkg://`` imports the installed module instead of a file copy.
REWARD_MODULE = "pkg://persetrain.rewards.parl_verl"
REWARD_FUNCTION = "compute_score"
#: The venv that ``make verl-env`` builds (verl pins an older transformers than persetrain's main venv).
VERL_VENV_PYTHON = Path(__file__).resolve().parents[2] / ".venv-verl" / "bin" / "python"

_LOSS_AGG_MODE = {
    "dapo": "token-mean",
    "bnpo": "token-mean",
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}


def _accelerate_settings(named: str | None, recipe_path: str | None) -> tuple[int, bool]:
    """(processes, weights offloaded) of the accelerate config a recipe names, read and found (a path, from here or
    the recipe's folders, or a shipped name) as ``persetrain launch`` reads it; (1, False) without one."""
    if named is None:
        return 1, False
    path, config = read_accelerate_config(named, Path(recipe_path or "."))
    offload = "offload_param" in deepspeed_offloads(path, config) or bool(
        (config.get("fsdp_config") or {}).get("fsdp_offload_params", False)
    )
    return int(config.get("num_processes") or 1), offload


def _prompts_per(completions: int, n: int, key: str) -> int:
    if completions % n:
        raise RecipeError(f"{key}: {completions} completions is not a whole number of groups of num_generations {n}")
    return completions // n


def _check_recipe(training_args: GRPOConfig, reward_args: RewardArguments) -> str:
    """The recipe's PARL reward variant, after refusing what verl cannot run."""
    rewards = [name for name in reward_args.reward_funcs if name in PARL_REWARDS]
    if len(rewards) != 1 or len(reward_args.reward_funcs) != 1:
        raise RecipeError(
            f"reward_funcs: the verl backend takes exactly one PARL reward ({', '.join(PARL_REWARDS)}), "
            f"got {reward_args.reward_funcs}"
        )
    if training_args.loss_type not in _LOSS_AGG_MODE:
        raise RecipeError(
            f"loss_type: verl has no equivalent of '{training_args.loss_type}' (one of {', '.join(_LOSS_AGG_MODE)})"
        )
    if training_args.verl_train_files is None:
        raise RecipeError(
            "verl_train_files is not set: the verl backend reads the parquet export of `persetrain prepare parl`"
        )
    return rewards[0]


def _algorithm_section(training_args: GRPOConfig) -> dict[str, Any]:
    return {
        "adv_estimator": "grpo",
        "norm_adv_by_std_in_grpo": training_args.scale_rewards != "none",
        "use_kl_in_reward": False,
    }


def _data_section(training_args: GRPOConfig, train_batch: int) -> dict[str, Any]:
    return {
        "train_files": training_args.verl_train_files,
        "val_files": training_args.verl_train_files,  # never read: val_before_train false, test_freq -1
        "train_batch_size": train_batch,
        "max_prompt_length": training_args.max_prompt_length,
        "max_response_length": training_args.max_completion_length,
        "filter_overlong_prompts": True,
        "truncation": "error",
        "seed": training_args.seed,
    }


def _model_path(model_args: ModelConfig) -> str:
    """The model as verl reads it: a persetrain spec (``name:...``, a GGUF file) becomes its local weights."""
    model_path = model_args.model_name_or_path
    if ":" in model_path or Path(model_path).suffix == ".gguf":
        model_path = str(local_weights_dir(model_path))
    return model_path


def _optim_section(training_args: GRPOConfig) -> dict[str, Any]:
    scheduler = str(training_args.lr_scheduler_type).removeprefix("SchedulerType.").lower()
    warmup = float(training_args.warmup_steps or 0)  # transformers: < 1 is a ratio of the training steps
    kwargs = training_args.lr_scheduler_kwargs if isinstance(training_args.lr_scheduler_kwargs, dict) else {}
    return {
        "lr": training_args.learning_rate,
        "lr_scheduler_type": "cosine" if "cosine" in scheduler else "constant",
        "min_lr_ratio": float(kwargs.get("min_lr_rate", 0.0)),
        "lr_warmup_steps_ratio": warmup if warmup < 1 else 0.0,
        "lr_warmup_steps": int(warmup) if warmup >= 1 else -1,
        "weight_decay": training_args.weight_decay,
    }


def _actor_section(training_args: GRPOConfig, mini_batch: int, offload: bool) -> dict[str, Any]:
    return {
        "optim": _optim_section(training_args),
        "ppo_mini_batch_size": mini_batch,
        "ppo_micro_batch_size_per_gpu": training_args.per_device_train_batch_size,
        "ppo_epochs": training_args.num_iterations,
        "clip_ratio_low": training_args.epsilon,
        "clip_ratio_high": training_args.epsilon_high or training_args.epsilon,
        "loss_agg_mode": _LOSS_AGG_MODE[training_args.loss_type],
        "use_kl_loss": training_args.beta > 0,
        "kl_loss_coef": training_args.beta,
        "kl_loss_type": "low_var_kl",
        "entropy_coeff": training_args.entropy_coef,
        "grad_clip": training_args.max_grad_norm,
        "fsdp_config": {
            "param_offload": offload,
            "optimizer_offload": offload,
            "model_dtype": "bf16" if training_args.bf16 else "fp32",
        },
    }


def _rollout_section(training_args: GRPOConfig) -> dict[str, Any]:
    return {
        "name": "vllm",
        "n": training_args.num_generations,
        "temperature": training_args.temperature,
        "top_p": training_args.top_p,
        "top_k": training_args.top_k or -1,
        "gpu_memory_utilization": training_args.vllm_gpu_memory_utilization,
        "tensor_model_parallel_size": training_args.vllm_tensor_parallel_size,
        "log_prob_micro_batch_size_per_gpu": training_args.per_device_train_batch_size,
    }


def _actor_rollout_ref_section(
    training_args: GRPOConfig, model_args: ModelConfig, mini_batch: int, offload: bool
) -> dict[str, Any]:
    return {
        "model": {
            "path": _model_path(model_args),
            "use_remove_padding": True,
            "enable_gradient_checkpointing": bool(training_args.activation_checkpointing),
        },
        "actor": _actor_section(training_args, mini_batch, offload),
        "rollout": _rollout_section(training_args),
        "ref": {
            "log_prob_micro_batch_size_per_gpu": training_args.per_device_train_batch_size,
            "fsdp_config": {"param_offload": offload},
        },
    }


def _reward_section(reward_args: RewardArguments, variant: str) -> dict[str, Any]:
    return {
        "reward_manager": {"name": "naive"},
        "custom_reward_function": {
            "path": REWARD_MODULE,
            "name": REWARD_FUNCTION,
            "reward_kwargs": {
                "variant": variant,
                "judge_model": reward_args.reward_judge_model,
                "judge_backend": reward_args.reward_judge_backend,
                "judge_base_url": reward_args.reward_judge_base_url,
            },
        },
    }


def _trainer_section(training_args: GRPOConfig, processes: int) -> dict[str, Any]:
    report = [r for r in (training_args.report_to or []) if r in ("wandb", "tensorboard", "mlflow")]
    output_dir = Path(training_args.output_dir).resolve()
    return {
        "project_name": "persetrain",
        "experiment_name": training_args.run_name or output_dir.name,
        "logger": ["console", *report],
        "n_gpus_per_node": processes,
        "nnodes": 1,
        "total_epochs": int(training_args.num_train_epochs),
        "total_training_steps": training_args.max_steps if training_args.max_steps > 0 else None,
        "save_freq": int(training_args.save_steps) if training_args.save_strategy == "steps" else -1,
        "default_local_dir": str(output_dir / "verl-checkpoints"),
        "resume_mode": "auto" if training_args.auto_resume else "disable",
        "val_before_train": False,
        "test_freq": -1,
        "critic_warmup": 0,
    }


def verl_config(
    script_args: ScriptArguments,
    training_args: GRPOConfig,
    model_args: ModelConfig,
    reward_args: RewardArguments,
    accelerate_config: str | None = None,
    recipe_path: str | None = None,
) -> dict[str, Any]:
    """The verl overrides (nested mapping) equivalent to a ``persetrain grpo`` recipe, one helper per section;
    ``accelerate_config`` is the one the recipe (``recipe_path``) names."""
    variant = _check_recipe(training_args, reward_args)
    processes, offload = _accelerate_settings(accelerate_config, recipe_path)
    n = training_args.num_generations
    per_step = training_args.per_device_train_batch_size * processes
    train_batch = _prompts_per(per_step * training_args.steps_per_generation, n, "generation batch")
    mini_batch = _prompts_per(per_step * training_args.gradient_accumulation_steps, n, "optimizer step batch")
    return {
        "algorithm": _algorithm_section(training_args),
        "data": _data_section(training_args, train_batch),
        "actor_rollout_ref": _actor_rollout_ref_section(training_args, model_args, mini_batch, offload),
        "reward": _reward_section(reward_args, variant),
        "trainer": _trainer_section(training_args, processes),
    }


def write_verl_config(config: dict[str, Any], path: Path) -> Path:
    """Write ``config`` as a Hydra config that extends verl's ``ppo_trainer`` (atomically)."""
    document = {"hydra": {"searchpath": ["pkg://verl.trainer.config"]}, "defaults": ["ppo_trainer", "_self_"], **config}
    header = (
        "# Written by `persetrain grpo --backend verl`; run with:\n"
        f"#   python -m verl.trainer.main_ppo --config-path {path.parent} --config-name {path.stem}\n"
    )
    with atomic_write(path) as f:
        f.write(header + yaml.safe_dump(document, sort_keys=False))
    return path


def verl_command(config_path: Path, python: str | None = None) -> list[str]:
    """The command that trains with ``config_path``: verl's own entry point."""
    if python is None:
        python = str(VERL_VENV_PYTHON) if VERL_VENV_PYTHON.exists() else sys.executable
    return [
        python,
        "-m",
        "verl.trainer.main_ppo",
        "--config-path",
        str(config_path.parent.resolve()),
        "--config-name",
        config_path.stem,
    ]


def main(argv: Sequence[str] | None = None, run: bool = False, python: str | None = None) -> list[str]:
    """Parse a recipe like the TRL backend does, write the verl config, print (and with ``run``, run) verl."""
    parser = make_parser()
    script_args, training_args, model_args, reward_args = parser.parse_args_and_config(argv)
    config = verl_config(
        script_args,
        training_args,
        model_args,
        reward_args,
        accelerate_config=parser.accelerate_config,
        recipe_path=parser.recipe_path,
    )
    name = Path(parser.recipe_path).stem if parser.recipe_path else "ppo_parl"
    path = write_verl_config(config, Path(training_args.output_dir) / "verl" / f"{name}.yaml")
    command = verl_command(path, python)
    print(shlex.join(command))
    if run:
        subprocess.run(command, check=True)
    return command
