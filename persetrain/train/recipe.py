"""Recipes: one YAML file holds every argument of a training run, the command line overrides any of them.

A recipe is a flat YAML mapping, as in alignment-handbook: its keys are the field names of the
argument dataclasses of its trainer (for SFT: ``persetrain.train.configs``), plus two launch keys
that no trainer reads:

- ``env``: environment variables of the run. ``persetrain launch`` exports them before the
  processes start, which is where process tuning (allocator, thread count) has to happen; when the
  recipe is parsed inside an already running process they are only set if the shell has not set
  them (the shell overrides the recipe just as the command line does).
- ``accelerate_config``: the accelerate config file (``accelerate_configs/*.yaml``) the recipe was
  tuned for, which ``persetrain launch`` passes to ``accelerate launch``.

Precedence, lowest to highest: the dataclass defaults (where precision follows the machine, never a
library default such as TRL's ``bf16=True``), the recipe, the command line (``--learning_rate 2e-5``).
:class:`RecipeParser` is TRL's ``TrlParser`` with these differences: a key no dataclass knows is an
error naming the recipe file and the key, with the closest known key (TRL's message names neither, and a
misspelt key that is silently ignored trains a different model than the one the recipe describes); a value of
the wrong type is one line naming the file (or the command line) and the key, before any work
(:mod:`persetrain.train.recipe_keys`); a value the dataclasses reject is a :class:`RecipeError` naming where it
came from; ``--config=PATH`` works too; and ``--help`` lists every key with its type, default and help, one
group per dataclass (:mod:`persetrain.train.recipe_help`).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

import yaml
from trl import TrlParser

from persetrain.io import InputError
from persetrain.resources import recipe_file
from persetrain.train.recipe_help import RecipeHelpFormatter, arrange_help
from persetrain.train.recipe_keys import KeyValueError, key_types

#: Recipe keys that configure the launch, not a trainer's dataclasses.
LAUNCH_KEYS = ("env", "accelerate_config")


class RecipeError(ValueError):
    """A recipe that cannot be used as written; the message names the file and the offending key."""


def _pop_config_path(args: list[str]) -> str | None:
    """Remove ``--config PATH`` / ``--config=PATH`` from ``args`` and return PATH."""
    for i, arg in enumerate(args):
        if arg == "--config":
            if i + 1 >= len(args):
                raise RecipeError("--config needs a path to a YAML recipe")
            path = args[i + 1]
            del args[i : i + 2]
            return path
        if arg.startswith("--config="):
            del args[i]
            return arg.split("=", 1)[1]
    return None


def read_recipe(path: str | os.PathLike) -> dict[str, Any]:
    """Read a recipe file as a mapping; syntax errors name the file and the line. ``path`` may also be a shipped
    recipe's name (``perse/cpu_smollm2_per-mpst-k3``, :mod:`persetrain.resources`), as ``persetrain launch`` takes."""
    try:
        path = recipe_file(path)
    except InputError as err:  # one line listing close names
        raise RecipeError(str(err)) from None
    try:
        recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise RecipeError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if recipe is None:
        return {}
    if not isinstance(recipe, dict):
        raise RecipeError(f"{path}: a recipe must be a YAML mapping of argument names to values")
    return recipe


def _closest(name: str, known: Iterable[str]) -> str:
    """The "; did you mean 'X'?" of a misspelt name: the closest known one, or nothing when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


class RecipeParser(TrlParser):
    """``TrlParser`` whose recipe keys are checked, so that a recipe trains exactly what it says.

    ``key_notes`` adds this trainer's note to a shared key's help (``dataset_path``: the columns it reads). After
    :meth:`parse_args_and_config`, ``recipe_path`` and ``accelerate_config`` hold what the recipe named (None
    without a recipe), for messages and for the launcher.
    """

    recipe_path: str | None = None
    accelerate_config: str | None = None

    def __init__(self, dataclass_types, key_notes: Mapping[str, str] | None = None, **kwargs):
        kwargs.setdefault("usage", "%(prog)s [--config RECIPE.yaml] [--KEY VALUE ...]")
        kwargs.setdefault("formatter_class", RecipeHelpFormatter)
        super().__init__(dataclass_types, **kwargs)
        self.key_types = key_types(self.dataclass_types, self._actions)
        for action in self._actions:
            if action.dest in self.key_types and action.nargs != 0:
                action.type = self.key_types[action.dest]
        arrange_help(self, self.key_types, key_notes or {})

    def known_keys(self) -> set[str]:
        """Every key a recipe may set: the fields of the parser's dataclasses."""
        return set(self.key_types)

    def error(self, message: str) -> NoReturn:
        """A bad flag is one line naming the flag (argparse would print the whole usage first, a hundred lines)."""
        raise RecipeError("command line: " + re.sub(r"^argument (--?[\w-]+)(/--?[\w-]+)*: ", r"\1: ", message))

    def check_recipe_values(self, config_path: str, recipe: dict[str, Any]) -> dict[str, Any]:
        """The recipe's trainer keys, each checked against its type and converted as the command line would be."""
        keys = self.known_keys()
        values = {}
        for key, value in recipe.items():
            if key not in keys:
                raise RecipeError(f"{config_path}: unknown key '{key}'{_closest(key, keys | set(LAUNCH_KEYS))}")
            try:
                values[key] = self.key_types[key].from_recipe(value)
            except KeyValueError as err:
                raise RecipeError(f"{config_path}: key '{key}': {err}") from None
        return values

    def parse_args_and_config(
        self,
        args: Iterable[str] | None = None,
        return_remaining_strings: bool = False,
        fail_with_unknown_args: bool = True,
        separate_remaining_strings: bool = False,
    ) -> tuple[Any, ...]:
        """Parse ``[--config recipe.yaml] [--key value ...]`` (``sys.argv[1:]`` when ``args`` is None).

        Unknown recipe keys, unknown flags and values the dataclasses reject raise :class:`RecipeError`.
        """
        args = list(sys.argv[1:] if args is None else args)
        self.recipe_path = config_path = _pop_config_path(args)
        if config_path is not None:
            recipe = read_recipe(config_path)
            env = recipe.pop("env", None) or {}
            if not isinstance(env, dict):
                raise RecipeError(f"{config_path}: 'env' must be a mapping of variable names to values")
            self.accelerate_config = recipe.pop("accelerate_config", None)
            values = self.check_recipe_values(config_path, recipe)
            for name, value in env.items():
                os.environ.setdefault(str(name), str(value))
            self.set_defaults_with_config(**values)
        _, remaining = self.parse_known_args(args)  # before any dataclass is built: a bad flag fails before work
        if remaining and not return_remaining_strings:
            flag = next((arg.split("=", 1)[0] for arg in remaining if arg.startswith("-")), remaining[0])
            known = [option for action in self._actions for option in action.option_strings]
            raise RecipeError(f"command line: unknown option '{flag}'{_closest(flag, known)}")
        try:
            *parsed, remaining = self.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
        except ValueError as err:  # a value the dataclasses reject (bf16 on a CPU)
            source = " + ".join(filter(None, [config_path, "command line" if args else None])) or "arguments"
            raise RecipeError(f"{source}: {err}") from err
        if return_remaining_strings:
            return (*parsed, remaining)
        return tuple(parsed)
