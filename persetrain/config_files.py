"""The configuration files persetrain is given, read in one place: YAML mappings (recipes, accelerate configs,
evaluation configs), the files a config names, and an accelerate config with the DeepSpeed JSON it names.

Below training, launch and evaluation alike, so that the trainer, the launcher and the verl export read an
accelerate config the same way, and every YAML file's error is the same one line naming the file and the line.
What a recipe's keys mean is the trainer's parser's (:mod:`persetrain.train.recipe`), never this module's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from persetrain import resources
from persetrain.io import InputError

#: The parts of a model a DeepSpeed config can offload to CPU or NVMe.
OFFLOAD_PARTS = ("offload_optimizer", "offload_param")


def read_yaml_mapping(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """A YAML file that must hold a mapping (an empty file is an empty one); a missing or unreadable file or a syntax
    error is one line naming the file (and the line: pyyaml's own message spans several, quoting the text)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, f"no such {what} file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(path, f"not a readable YAML {what} ({err})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or type(err).__name__
        if mark is None:
            raise InputError(path, f"not valid YAML: {problem}") from None
        raise InputError(path, f"not valid YAML: {problem} (column {mark.column + 1})", record=mark.line + 1) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(path, f"the {what} must be a YAML mapping of keys to values")
    return data


def resolve_relative(path: str | os.PathLike, anchor: Path) -> Path:
    """``path`` as given when it exists from the working directory, else relative to ``anchor``'s folders, else
    the shipped file of that name (``path`` itself when none exists).

    Recipes name configs relative to the repository root (``accelerate_configs/cpu.yaml``); this also
    finds them when the command runs elsewhere, by trying each folder above the file that names them, and from an
    installed wheel, whose shipped folders are laid out as the repository root.
    """
    candidate = Path(path)
    if candidate.is_absolute() or candidate.exists():
        return candidate
    for parent in anchor.resolve().parents:
        if (parent / candidate).exists():
            return parent / candidate
    return resources.shipped_file(candidate) or candidate


def accelerate_config_path(named: str | os.PathLike, named_by: Path) -> Path:
    """The accelerate config a recipe (``named_by``) or ``--accelerate-config`` names: a path (from here or from the
    recipe's folders), else a shipped name; an unknown one is one line listing close names."""
    found = resolve_relative(named, named_by)
    return found if found.is_file() else resources.accelerate_config_file(named)


def read_accelerate_config(named: str | os.PathLike, named_by: Path) -> tuple[Path, dict[str, Any]]:
    """The path and the settings of the accelerate config ``named_by`` names."""
    path = accelerate_config_path(named, named_by)
    return path, read_yaml_mapping(path, "accelerate config")


def read_deepspeed_json(name: str, named_by: Path) -> tuple[Path, dict[str, Any]]:
    """The path and the settings of the DeepSpeed JSON an accelerate config or a recipe (``named_by``) names."""
    path = resolve_relative(name, named_by)
    if not path.is_file():
        raise InputError(path, f"no such DeepSpeed config file (named by {named_by})")
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise InputError(path, f"not valid JSON: {err}") from None


def deepspeed_offloads(config_path: Path, config: dict[str, Any]) -> set[str]:
    """The parts (:data:`OFFLOAD_PARTS`) an accelerate config's DeepSpeed section, or the JSON it names, offloads."""
    section = config.get("deepspeed_config") or {}
    parts = {part for part in OFFLOAD_PARTS if section.get(f"{part}_device", "none") not in (None, "none")}
    if section.get("deepspeed_config_file"):
        _, ds = read_deepspeed_json(section["deepspeed_config_file"], config_path)
        zero = ds.get("zero_optimization") or {}
        parts |= {part for part in OFFLOAD_PARTS if (zero.get(part) or {}).get("device", "none") not in (None, "none")}
    return parts
