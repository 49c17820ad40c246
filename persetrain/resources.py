"""The files persetrain ships beside its code: training recipes, accelerate configs and sbatch templates.

In the repository they are top-level folders (``recipes/``, ``accelerate_configs/``, ``launch/``), where a clone
edits them, as in the alignment-handbook. A wheel or an sdist install carries the same three folders inside the
package, as ``persetrain/_shipped/`` (``setup.py``'s build step copies them in), so that an installed persetrain
finds them from any folder, as TRL finds its ``trl/accelerate_configs``. This module is the one place that knows
both layouts: :func:`shipped_root` is the folder holding the three, laid out as the repository root is, so that a
recipe's ``accelerate_config: accelerate_configs/cpu.yaml`` names the same file in a checkout and in a wheel.

A shipped recipe or accelerate config can be named without a path (``perse/llama2-7b-chat_per-mpst-k3``,
``deepspeed_zero3``); a path that exists always wins over a name.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from persetrain.io import InputError

#: The repository folders a wheel carries; setup.py copies the same list (it cannot import the package).
SHIPPED_FOLDERS = ("recipes", "accelerate_configs", "launch")
RECIPES, ACCELERATE_CONFIGS, SBATCH_TEMPLATES = SHIPPED_FOLDERS
#: Where an installed wheel holds them.
PACKAGED = Path(__file__).resolve().parent / "_shipped"
#: Recipe folders renamed since they shipped, by their old name: ``--config judge/NAME`` is refused with the new one.
RENAMED_RECIPE_FOLDERS = {"judge": "verdict"}


def shipped_root() -> Path:
    """The folder that holds ``recipes/``, ``accelerate_configs/`` and ``launch/``: the package's own copy in an
    installed wheel, else the source checkout (an editable install or ``PYTHONPATH``) this module lies in."""
    return PACKAGED if PACKAGED.is_dir() else Path(__file__).resolve().parents[1]


def sbatch_templates() -> Path:
    """The folder of the shipped sbatch Jinja templates."""
    return shipped_root() / SBATCH_TEMPLATES


def shipped_names(folder: str) -> list[str]:
    """The shipped YAML files of ``folder`` by name: their path below it, without ``.yaml``."""
    base = shipped_root() / folder
    return sorted(path.relative_to(base).with_suffix("").as_posix() for path in base.rglob("*.yaml"))


def recipe_file(name: str | os.PathLike) -> Path:
    """A training recipe: ``name`` as a path when it is a file, else the shipped recipe ``name``
    (``perse/llama2-7b-chat_per-mpst-k3``, with or without ``.yaml`` or a leading ``recipes/``)."""
    return _find(name, RECIPES, "recipe")


def accelerate_config_file(name: str | os.PathLike) -> Path:
    """An accelerate config: ``name`` as a path when it is a file, else the shipped config ``name``
    (``deepspeed_zero3``, with or without ``.yaml`` or a leading ``accelerate_configs/``)."""
    return _find(name, ACCELERATE_CONFIGS, "accelerate config")


def shipped_file(relative: str | os.PathLike) -> Path | None:
    """A file named relative to the repository root (``accelerate_configs/deepspeed/zero3.json``) in the shipped
    copy, or None when it ships no such file."""
    candidate = shipped_root() / relative
    return candidate if not Path(relative).is_absolute() and candidate.is_file() else None


def _find(name: str | os.PathLike, folder: str, what: str) -> Path:
    """``name`` as a path, else as a shipped name in ``folder``; an unknown one is one line listing close names."""
    given = Path(name)
    if given.is_file():
        return given
    relative = given.as_posix().removeprefix(f"{folder}/")
    base = shipped_root() / folder
    for candidate in (base / relative, base / f"{relative}.yaml"):
        if not given.is_absolute() and candidate.is_file():
            return candidate
    old_folder, _, name = relative.partition("/")
    if folder == RECIPES and name and old_folder in RENAMED_RECIPE_FOLDERS:
        new_folder = RENAMED_RECIPE_FOLDERS[old_folder]
        raise InputError(
            given, f"the recipes of {old_folder}/ are now in {new_folder}/: {new_folder}/{name.removesuffix('.yaml')}"
        )
    names, wanted = shipped_names(folder), relative.removesuffix(".yaml")
    # Names holding what was typed (a prefix such as perse/cpu), then the nearest spellings.
    close = [name for name in names if wanted in name]
    close += [name for name in difflib.get_close_matches(wanted, names, n=4, cutoff=0.5) if name not in close]
    close = close[:4]
    if close:
        hint = f"close names: {', '.join(close)}"
    elif folder == RECIPES:
        hint = "`persetrain recipes` lists the shipped ones"
    else:
        hint = f"shipped: {', '.join(names)}"
    raise InputError(given, f"no such {what} file, nor a shipped {what} of that name ({hint})")
