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
group per dataclass (:mod:`persetrain.train.recipe_help`). :meth:`RecipeParser.read_keys` reads the same arguments
into every key's value without building the dataclasses: how ``persetrain launch`` plans with the values its trainer
will train with (:mod:`persetrain.train.trainers`).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from trl import TrlParser

from persetrain.config_files import read_yaml_mapping
from persetrain.io import InputError
from persetrain.resources import recipe_file
from persetrain.train.recipe_help import RecipeHelpFormatter, arrange_help
from persetrain.train.recipe_keys import KeyValueError, key_types

#: Recipe keys that configure the launch, not a trainer's dataclasses.
LAUNCH_KEYS = ("env", "accelerate_config")


class RecipeError(ValueError):
    """A recipe that cannot be used as written; the message names the file and the offending key."""


@dataclass(frozen=True)
class RecipeKeys:
    """Every key of a trainer as it will read it (dataclass default < recipe < command line), read by the trainer's
    own parser: what ``persetrain launch`` plans with, so that its batch rescaling and checks see the values the
    trainer trains with, under every spelling of a flag (``--gradient-accumulation-steps``)."""

    values: dict[str, Any]
    #: the values before the command line: the dataclass defaults under the recipe's
    recipe_values: dict[str, Any]
    #: the keys the command line set
    given: frozenset[str]
    #: the accelerate config the recipe names (None when it names none)
    accelerate_config: str | None


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
        return read_yaml_mapping(recipe_file(path), "recipe")
    except InputError as err:  # one line: close names, or the file and the line of a syntax error
        raise RecipeError(str(err)) from None


def _closest(name: str, known: Iterable[str]) -> str:
    """The "; did you mean 'X'?" of a misspelt name: the closest known one, or nothing when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


class RecipeParser(TrlParser):
    """``TrlParser`` whose recipe keys are checked, so that a recipe trains exactly what it says.

    ``key_notes`` adds this trainer's note to a shared key's help (``dataset_path``: the columns it reads), and
    ``renamed_keys`` maps a key's old name to its new one, so that a recipe or flag with the old name is refused with
    one line naming the new (read as unknown, it would point at the closest key, not the renamed one). After
    :meth:`parse_args_and_config`, ``recipe_path`` and ``accelerate_config`` hold what the recipe named (None
    without a recipe), for messages and for the launcher.
    """

    recipe_path: str | None = None
    accelerate_config: str | None = None

    def __init__(
        self,
        dataclass_types,
        key_notes: Mapping[str, str] | None = None,
        renamed_keys: Mapping[str, str] | None = None,
        **kwargs,
    ):
        kwargs.setdefault("usage", "%(prog)s [--config RECIPE.yaml] [--KEY VALUE ...]")
        kwargs.setdefault("formatter_class", RecipeHelpFormatter)
        super().__init__(dataclass_types, **kwargs)
        self.key_types = key_types(self.dataclass_types, self._actions)
        for action in self._actions:
            if action.dest in self.key_types and action.nargs != 0:
                action.type = self.key_types[action.dest]
        arrange_help(self, self.key_types, key_notes or {})
        self.renamed_keys = dict(renamed_keys or {})

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
            if key in self.renamed_keys:
                raise RecipeError(f"{config_path}: key '{key}' is now '{self.renamed_keys[key]}'")
            if key not in keys:
                raise RecipeError(f"{config_path}: unknown key '{key}'{_closest(key, keys | set(LAUNCH_KEYS))}")
            try:
                values[key] = self.key_types[key].from_recipe(value)
            except KeyValueError as err:
                raise RecipeError(f"{config_path}: key '{key}': {err}") from None
        return values

    def _apply_recipe(self, args: list[str]) -> dict[str, Any]:
        """Take ``--config PATH`` out of ``args`` and make the recipe's checked values the parser's defaults; keep
        ``recipe_path`` and ``accelerate_config``, and return the recipe's ``env`` mapping."""
        self.recipe_path = config_path = _pop_config_path(args)
        if config_path is None:
            return {}
        recipe = read_recipe(config_path)
        env = recipe.pop("env", None) or {}
        if not isinstance(env, dict):
            raise RecipeError(f"{config_path}: 'env' must be a mapping of variable names to values")
        self.accelerate_config = recipe.pop("accelerate_config", None)
        self.set_defaults_with_config(**self.check_recipe_values(config_path, recipe))
        return env

    def _parse_flags(
        self, args: list[str], namespace: argparse.Namespace | None = None, keep_remaining: bool = False
    ) -> argparse.Namespace:
        """The flags over the defaults, before any dataclass is built (a bad flag fails before work); a flag no key
        has is an error unless ``keep_remaining``."""
        parsed, remaining = self.parse_known_args(args, namespace)
        if remaining and not keep_remaining:
            flag = next((arg.split("=", 1)[0] for arg in remaining if arg.startswith("-")), remaining[0])
            old = flag.lstrip("-").replace("-", "_")
            if old in self.renamed_keys:
                raise RecipeError(f"command line: {flag} is now --{self.renamed_keys[old]}")
            known = [option for action in self._actions for option in action.option_strings]
            raise RecipeError(f"command line: unknown option '{flag}'{_closest(flag, known)}")
        return parsed

    def read_keys(self, args: Iterable[str]) -> RecipeKeys:
        """``[--config recipe.yaml] [--key value ...]`` read as :meth:`parse_args_and_config` reads it, with the same
        errors, into every key's value; no dataclass is built and no environment variable is set."""
        args = list(args)
        self._apply_recipe(args)
        keys = self.known_keys()
        recipe_values = {key: self.get_default(key) for key in keys}
        values = vars(self._parse_flags(args))
        unset = object()  # a key the command line leaves keeps it: which keys were given, under any spelling
        seen = vars(self._parse_flags(args, argparse.Namespace(**dict.fromkeys(keys, unset))))
        return RecipeKeys(
            values={key: values.get(key) for key in keys},
            recipe_values=recipe_values,
            given=frozenset(key for key in keys if seen.get(key, unset) is not unset),
            accelerate_config=self.accelerate_config,
        )

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
        for name, value in self._apply_recipe(args).items():
            os.environ.setdefault(str(name), str(value))
        self._parse_flags(args, keep_remaining=return_remaining_strings)
        try:
            *parsed, remaining = self.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
        except ValueError as err:  # a value the dataclasses reject (bf16 on a CPU)
            source = " + ".join(filter(None, [self.recipe_path, "command line" if args else None])) or "arguments"
            raise RecipeError(f"{source}: {err}") from err
        if return_remaining_strings:
            return (*parsed, remaining)
        return tuple(parsed)
