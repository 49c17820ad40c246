"""What a launch reads: the recipe and accelerate config files, and recipe keys as the trainer will see them.

The trainer parses the recipe itself; a launch only needs a few of its keys (batch sizes, precision, DeepSpeed,
the dataset), read here with the command-line overrides applied the way the trainer applies them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from persetrain.io import InputError
from persetrain.resources import shipped_file


class LaunchError(ValueError):
    """A recipe, accelerate config or option combination that cannot be launched; one line, naming the file."""


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
    return shipped_file(candidate) or candidate


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
