"""The command that runs a training recipe on one machine: ``accelerate launch``, or ``torchrun`` on a CPU.

A recipe names the accelerate config it was tuned for (key ``accelerate_config``), and that config's
``num_processes`` fixes the world the recipe's global batch was tuned on: ``per_device_train_batch_size x
gradient_accumulation_steps x num_processes``. Launching on another number of processes keeps that global
batch by rescaling ``gradient_accumulation_steps`` (an optimizer step then sees the same number of
examples, so the learning rate and schedule still fit); a world size that does not divide it is an error.

Two launchers, because of how ``accelerate launch`` treats a CPU: with ``use_cpu`` (or no GPU) it takes
its single-process launcher whatever ``--num_processes`` says, so N > 1 CPU processes go through
``torchrun --standalone --nproc_per_node N``, which starts N gloo DDP ranks. ``ACCELERATE_USE_CPU=true``
(what ``accelerate launch --cpu`` sets) is what makes transformers join them: without it, a CPU-only rank
sees no GPU and no ``use_cpu``, and trains alone on the whole dataset. Each CPU rank gets ``cores / N``
threads (``OMP_NUM_THREADS``) so that the ranks do not oversubscribe the cores; like every process
setting, that belongs to the launch, not to the trainer.

The recipe file is passed on unchanged (``--config RECIPE``): the trainer parses it, and command-line
overrides after it win over its keys exactly as with ``persetrain sft``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from persetrain.io import InputError

#: trainer name -> the module with its ``make_parser()`` and ``main()``
TRAINERS = {"sft": "persetrain.train.sft", "grpo": "persetrain.train.grpo", "rm": "persetrain.train.rm"}
#: accelerate config keys that accelerate refuses next to a ``deepspeed_config_file`` (the JSON holds them)
_DEEPSPEED_JSON_KEYS = (
    "zero_stage",
    "offload_optimizer_device",
    "offload_param_device",
    "gradient_clipping",
    "gradient_accumulation_steps",
    "zero3_save_16bit_model",
    "offload_param_nvme_path",
    "offload_optimizer_nvme_path",
)
# Keys only TRL's GRPOConfig has (SFTConfig has none of them). Listed rather than computed from the two
# dataclasses because importing TRL takes seconds, and rendering a command should not.
GRPO_ONLY_KEYS = frozenset(
    {
        "num_generations",
        "reward_funcs",
        "reward_weights",
        "use_vllm",
        "vllm_mode",
        "max_completion_length",
        "beta",
        "num_iterations",
        "generation_batch_size",
    }
)
# Keys only persetrain's RMConfig (TRL's RewardConfig) has.
RM_ONLY_KEYS = frozenset({"loss", "person_contrast", "center_rewards_coefficient"})
# transformers.TrainingArguments defaults, for recipes that leave the batch keys out.
DEFAULT_PER_DEVICE_BATCH = 8
DEFAULT_GRADIENT_ACCUMULATION = 1


class LaunchError(ValueError):
    """A recipe, accelerate config or option combination that cannot be launched; one line, naming the file."""


@dataclass
class LaunchCommand:
    """A command line plus the environment variables it adds, and what was adjusted to build it."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def shell(self) -> str:
        """The command as one shell line, environment assignments first."""
        assignments = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        return " ".join([*assignments, shlex.join(self.argv)])


@dataclass
class LaunchPlan:
    """What a recipe needs to be launched: its files, trainer, world size and batch arithmetic."""

    recipe_path: Path
    recipe: dict[str, Any]
    trainer: str
    accelerate_config_path: Path
    accelerate_config: dict[str, Any]
    num_processes: int
    overrides: list[str]
    cpu: bool
    notes: list[str] = field(default_factory=list)

    @property
    def module(self) -> str:
        return TRAINERS[self.trainer]

    @property
    def trainer_args(self) -> list[str]:
        """``-m``-module arguments: the recipe, then the overrides (which win)."""
        return ["--config", str(self.recipe_path), *self.overrides]

    @property
    def num_machines(self) -> int:
        return int(self.accelerate_config.get("num_machines") or 1)


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping; a missing file or a syntax error is one line naming the file."""
    if not path.is_file():
        raise InputError(path, f"no such {what} file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(path, f"not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    if not isinstance(data, dict):
        raise InputError(path, f"a {what} must be a YAML mapping of keys to values")
    return data


def resolve_relative(path: str | os.PathLike, anchor: Path) -> Path:
    """``path`` as given when it exists from the working directory, else relative to ``anchor``'s folders.

    Recipes name configs relative to the repository root (``accelerate_configs/cpu.yaml``); this also
    finds them when the command runs elsewhere, by trying each folder above the file that names them.
    """
    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists():
        return candidate
    for parent in anchor.resolve().parents:
        if (parent / candidate).exists():
            return parent / candidate
    return candidate


def override_value(overrides: Sequence[str], key: str) -> str | None:
    """The value of ``--key value`` / ``--key=value`` among command-line overrides (the last one wins)."""
    value = None
    for i, arg in enumerate(overrides):
        if arg == f"--{key}" and i + 1 < len(overrides):
            value = overrides[i + 1]
        elif arg.startswith(f"--{key}="):
            value = arg.split("=", 1)[1]
    return value


def recipe_value(plan_recipe: dict[str, Any], overrides: Sequence[str], key: str, default: Any = None) -> Any:
    """A recipe key as the trainer will see it: the command line over the recipe over ``default``."""
    given = override_value(overrides, key)
    if given is not None:
        return yaml.safe_load(given)
    return plan_recipe.get(key, default)


def infer_trainer(recipe: dict[str, Any]) -> str:
    if GRPO_ONLY_KEYS & recipe.keys():
        return "grpo"
    return "rm" if RM_ONLY_KEYS & recipe.keys() else "sft"


def _gpu_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _enabled(value: Any) -> bool | None:
    """A DeepSpeed ``enabled`` value: True/False, or None for "auto" (the recipe decides)."""
    return None if value == "auto" else bool(value)


def _read_deepspeed_json(name: str, named_by: Path) -> tuple[Path, dict[str, Any]]:
    path = resolve_relative(name, named_by)
    if not path.is_file():
        raise InputError(path, f"no such DeepSpeed config file (named by {named_by})")
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(path, f"not valid JSON: {err}") from None


def config_problems(
    recipe_path: Path, recipe: dict[str, Any], overrides: Sequence[str], config_path: Path, config: dict[str, Any]
) -> list[str]:
    """Every way a recipe (with its command-line overrides) and its accelerate config disagree.

    Launched together, a mismatch either fails deep inside accelerate or DeepSpeed after the processes
    started, or silently trains with one of the two settings; so all of them are reported at once, each
    naming the files, before anything starts. An unreadable DeepSpeed JSON is an :class:`InputError`.
    """

    def value(key: str) -> Any:
        return recipe_value(recipe, overrides, key)

    where = f"{recipe_path} with {config_path}"
    distributed = str(config.get("distributed_type", "NO"))
    ds_section = config.get("deepspeed_config") or {}
    recipe_json = value("deepspeed")
    bf16, fp16 = bool(value("bf16")), bool(value("fp16"))
    problems = []
    if config.get("use_cpu"):
        if bf16 or fp16:
            problems.append(
                f"{where}: the recipe trains in {'bf16' if bf16 else 'fp16'}, which a CPU config "
                "cannot honour (pass --bf16 false --fp16 false)"
            )
    elif distributed != "DEEPSPEED":
        precision = config.get("mixed_precision") or "no"
        wanted = "bf16" if bf16 else "fp16" if fp16 else "no"
        if precision != wanted:
            problems.append(f"{where}: mixed_precision '{precision}' but the recipe trains in '{wanted}'")
    if (
        distributed == "FSDP"
        and value("activation_checkpointing")
        and (config.get("fsdp_config") or {}).get("fsdp_activation_checkpointing")
    ):
        problems.append(f"{where}: activation checkpointing is on in both the recipe and fsdp_config")
    if distributed != "DEEPSPEED":
        if ds_section:
            problems.append(
                f"{config_path}: has a deepspeed_config section but distributed_type is "
                f"{distributed}; set distributed_type: DEEPSPEED or remove the section"
            )
        if recipe_json:
            problems.append(
                f"{recipe_path}: 'deepspeed' names a DeepSpeed config ({recipe_json}) but the "
                f"accelerate config {config_path} runs distributed_type {distributed}; launch with "
                "a DeepSpeed accelerate config (accelerate_configs/deepspeed_zero*.yaml)"
            )
        return problems
    return problems + _deepspeed_problems(recipe_path, value, config_path, config, where)


def _deepspeed_problems(
    recipe_path: Path, value: Callable[[str], Any], config_path: Path, config: dict[str, Any], where: str
) -> list[str]:
    """The DeepSpeed part of :func:`config_problems`; ``value(key)`` is a recipe key with its overrides."""
    section = config.get("deepspeed_config") or {}
    stages: dict[str, int] = {}
    if "zero_stage" in section:
        stages[f"{config_path} (zero_stage)"] = int(section["zero_stage"])
    jsons = []
    if section.get("deepspeed_config_file"):
        jsons.append(_read_deepspeed_json(section["deepspeed_config_file"], config_path))
    recipe_json = value("deepspeed")
    if isinstance(recipe_json, str):
        jsons.append(_read_deepspeed_json(recipe_json, recipe_path))
    elif isinstance(recipe_json, dict):
        jsons.append((recipe_path, recipe_json))
    if not jsons and not stages:
        return [f"{where}: a DeepSpeed accelerate config with neither zero_stage nor deepspeed_config_file"]
    problems = []
    if section.get("deepspeed_config_file"):
        json_name = jsons[0][0].name
        problems += [
            f"{where}: '{key}' is set in the accelerate config, which accelerate refuses next to "
            f"{json_name} (set it there)"
            for key in _DEEPSPEED_JSON_KEYS
            if key in section
        ]
        if config.get("mixed_precision") not in (None, "no"):
            problems.append(
                f"{where}: mixed_precision is set in the accelerate config; {json_name}'s bf16/fp16 "
                "decide it (accelerate refuses both)"
            )
    for path, ds in jsons:
        zero = ds.get("zero_optimization") or {}
        if isinstance(zero.get("stage"), int):
            stages[str(path)] = zero["stage"]
        for key in ("bf16", "fp16"):
            enabled = _enabled((ds.get(key) or {}).get("enabled", False))
            if enabled is not None and enabled != bool(value(key)):
                problems.append(f"{where}: {path.name} sets {key}.enabled {enabled}, the recipe {key} {value(key)}")
        for ds_key, recipe_key in (
            ("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
            ("gradient_accumulation_steps", "gradient_accumulation_steps"),
            ("gradient_clipping", "max_grad_norm"),
        ):
            given, wanted = ds.get(ds_key, "auto"), value(recipe_key)
            if given != "auto" and wanted is not None and given != wanted:
                problems.append(f"{where}: {path.name} sets {ds_key} {given}, the recipe {recipe_key} {wanted}")
    if len(set(stages.values())) > 1:
        listed = ", ".join(f"{name}: stage {stage}" for name, stage in stages.items())
        return [f"DeepSpeed ZeRO stages disagree: {listed}", *problems]
    stage = next(iter(stages.values()), 0)
    if "zero3_init_flag" in section and bool(section["zero3_init_flag"]) != (stage == 3):
        problems.append(
            f"{where}: zero3_init_flag {section['zero3_init_flag']} does not fit ZeRO stage {stage} "
            "(it shards weights at load time, for stage 3 only)"
        )
    # A config's file name states what it is for (deepspeed_zero3_offload.yaml): its settings must do that.
    named = re.search(r"zero(\d)(_offload)?", config_path.stem)
    if named and int(named.group(1)) != stage:
        problems.append(f"{where}: named for ZeRO-{named.group(1)} but sets stage {stage}")
    offloads = sorted(
        {
            part
            for _, ds in jsons
            for part in ("offload_optimizer", "offload_param")
            if ((ds.get("zero_optimization") or {}).get(part) or {}).get("device", "none") != "none"
        }
        | {part for part in ("offload_optimizer", "offload_param") if section.get(f"{part}_device", "none") != "none"}
    )
    if named and bool(named.group(2)) != bool(offloads):
        problems.append(
            f"{where}: {'named' if named.group(2) else 'not named'} for offload but offloads "
            f"{', '.join(offloads) or 'nothing'}"
        )
    return problems


def plan_launch(
    recipe_path: str | os.PathLike,
    *,
    accelerate_config: str | os.PathLike | None = None,
    num_processes: int | None = None,
    trainer: str | None = None,
    overrides: Sequence[str] = (),
    cpu: bool | None = None,
    detect_gpu: bool = True,
    check_data: bool = True,
) -> LaunchPlan:
    """Read and check a recipe and its accelerate config; decide the trainer and the world size.

    ``cpu`` None means: the accelerate config's ``use_cpu``, or (with ``detect_gpu``) no GPU on this
    machine for more than one process of a DDP config. A batch job is planned without ``detect_gpu``: the machine that
    submits it is not the one it runs on. ``check_data`` False skips the dataset check (a dry run only
    shows the command).
    """
    recipe_path = Path(recipe_path)
    recipe = read_yaml_mapping(recipe_path, "recipe")
    overrides = list(overrides)
    trainer = trainer or infer_trainer(recipe)
    if trainer not in TRAINERS:
        raise LaunchError(f"unknown trainer '{trainer}' (known: {', '.join(TRAINERS)})")
    named = accelerate_config or recipe_value(recipe, overrides, "accelerate_config")
    if not named:
        raise LaunchError(
            f"{recipe_path}: no 'accelerate_config' key naming the accelerate config it was tuned "
            "for; add one or pass --accelerate-config"
        )
    config_path = resolve_relative(named, recipe_path)
    config = read_yaml_mapping(config_path, "accelerate config")
    problems = config_problems(recipe_path, recipe, overrides, config_path, config)
    if problems:
        raise LaunchError("\n".join(problems))

    tuned_world = int(config.get("num_processes") or 1)
    world = num_processes or tuned_world
    if world < 1:
        raise LaunchError(f"--num-processes must be at least 1, not {world}")
    if cpu is None:
        sharded = config.get("distributed_type") in ("DEEPSPEED", "FSDP")  # GPU-only: never rerouted to torchrun
        cpu = bool(config.get("use_cpu")) or (detect_gpu and world > 1 and not sharded and not _gpu_available())
    if check_data:
        _check_dataset(recipe_path, recipe, overrides)
    plan = LaunchPlan(recipe_path, recipe, trainer, config_path, config, world, overrides, cpu)
    _keep_global_batch(plan, tuned_world)
    return plan


def _check_dataset(recipe_path: Path, recipe: dict[str, Any], overrides: Sequence[str]) -> None:
    """Refuse a missing ``dataset_path`` before any process starts (or a batch job waits in the queue for it).

    The trainer makes the same check with the exact `persetrain prepare` command; this one only fails early.
    """
    dataset = recipe_value(recipe, overrides, "dataset_path")
    if dataset and not Path(str(dataset)).exists():
        source = "--dataset_path" if override_value(overrides, "dataset_path") is not None else "recipe key"
        raise LaunchError(
            f"{recipe_path}: {source} 'dataset_path' names {dataset}, which does not exist; write it "
            f"with `persetrain prepare` (e.g. persetrain prepare perse --raw RAW --out "
            f"{Path(str(dataset)).parent.as_posix()}) or pass -- --dataset_path DIR"
        )


def _keep_global_batch(plan: LaunchPlan, tuned_world: int) -> None:
    """Rescale gradient accumulation so that ``plan.num_processes`` ranks see the recipe's global batch."""
    per_device = int(recipe_value(plan.recipe, plan.overrides, "per_device_train_batch_size", DEFAULT_PER_DEVICE_BATCH))
    accumulation = int(
        recipe_value(plan.recipe, plan.overrides, "gradient_accumulation_steps", DEFAULT_GRADIENT_ACCUMULATION)
    )
    global_batch = per_device * accumulation * tuned_world
    if plan.num_processes == tuned_world:
        return
    if override_value(plan.overrides, "gradient_accumulation_steps") is not None:
        plan.notes.append(
            f"gradient_accumulation_steps {accumulation} given on the command line: global batch "
            f"{per_device * accumulation * plan.num_processes} instead of the recipe's {global_batch}"
        )
        return
    if global_batch % (per_device * plan.num_processes):
        raise LaunchError(
            f"{plan.recipe_path}: {plan.num_processes} processes do not divide the global batch {global_batch} "
            f"(per_device_train_batch_size {per_device} x gradient_accumulation_steps {accumulation} x "
            f"{tuned_world} processes of {plan.accelerate_config_path}); use a number of processes that divides "
            f"{global_batch // per_device}, or choose another global batch with --gradient_accumulation_steps"
        )
    new_accumulation = global_batch // (per_device * plan.num_processes)
    plan.overrides += ["--gradient_accumulation_steps", str(new_accumulation)]
    plan.notes.append(
        f"gradient_accumulation_steps {accumulation} -> {new_accumulation}: {plan.num_processes} "
        f"processes keep the global batch {global_batch} tuned on {tuned_world}"
    )


def cpu_threads_per_process(num_processes: int) -> int:
    return max(1, (os.cpu_count() or 1) // num_processes)


def local_command(plan: LaunchPlan) -> LaunchCommand:
    """The command that runs ``plan`` on this machine."""
    if plan.cpu and plan.num_processes > 1:
        argv = [
            "torchrun",
            "--standalone",
            "--nproc_per_node",
            str(plan.num_processes),
            "-m",
            plan.module,
            *plan.trainer_args,
        ]
        env = {"ACCELERATE_USE_CPU": "true"}
        if "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = str(cpu_threads_per_process(plan.num_processes))
        return LaunchCommand(argv, env, list(plan.notes))
    argv = ["accelerate", "launch", "--config_file", str(plan.accelerate_config_path)]
    if plan.num_processes != int(plan.accelerate_config.get("num_processes") or 1):
        argv += ["--num_processes", str(plan.num_processes)]
    return LaunchCommand([*argv, "-m", plan.module, *plan.trainer_args], {}, list(plan.notes))


def run(command: LaunchCommand) -> int:
    """Run ``command`` with this interpreter's scripts first on PATH; forward SIGTERM/SIGINT/SIGUSR1 to it.

    Forwarding lets a scheduler's preemption signal reach the trainer, which saves a checkpoint on SIGUSR1.
    """
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, **command.env, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")])}
    proc = subprocess.Popen(command.argv, env=env)
    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
    previous = {sig: signal.signal(sig, lambda s, _f: proc.send_signal(s)) for sig in forwarded}
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
