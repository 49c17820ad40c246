"""A trainer's ``--help``: every recipe key with its type, default and help, one group per argument dataclass.

``HfArgumentParser`` lists every field in one ``options`` list, shows a field's name in capitals where its type
belongs (``--learning_rate LEARNING_RATE``) and prints the doc markup of the help texts as it is. Here each
dataclass is its own group, as ``HfArgumentParser`` makes one for a dataclass with an ``_argument_group_name``
(script, training and model arguments, the three of every TRL script), and its description says which keys are
persetrain's own and which defaults persetrain sets, found from the classes that declare them (so a field added
to a config appears without a change here). A key shows its type (``--learning_rate FLOAT``), and help is plain
text (:func:`persetrain.helptext.plain_text`).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from persetrain.helptext import plain_text

if TYPE_CHECKING:
    from persetrain.train.recipe_keys import KeyType

#: A choice metavar longer than this is shown as CHOICE, with the choices listed in the help.
MAX_CHOICES_WIDTH = 40
_BUILTIN_NAMES = {int: "INT", float: "FLOAT", str: "STR", bool: "BOOL", dict: "DICT", list: "LIST"}
#: argparse %-formats help: a lone "%" is escaped, "%%" and "%(default)s" are left as they are.
_UNESCAPED_PERCENT = re.compile(r"(?<!%)%(?![%(])")


class RecipeHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each key once, as its recipe key's flag and its type (``--learning_rate FLOAT``), not every alias."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        metavar = self._format_args(action, self._get_default_metavar_for_optional(action))
        return f"{action.option_strings[0]} {metavar}"


def _type_name(hint: Any) -> str:
    """``int | None`` -> INT, ``dict | str`` -> DICT|STR, ``list[str]`` -> LIST, a class by its name."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(arg) for arg in typing.get_args(hint) if arg is not type(None)]
        return "|".join(dict.fromkeys(names))
    if origin is typing.Literal:
        return "|".join(str(arg) for arg in typing.get_args(hint))
    hint = origin or hint
    return _BUILTIN_NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def _item_hint(hint: Any) -> Any:
    """The item type of the list a list key's hint holds (``list[str] | None`` -> ``str``)."""
    for arg in (hint, *typing.get_args(hint)):
        if typing.get_origin(arg) is list and typing.get_args(arg):
            return typing.get_args(arg)[0]
    return str


def _declared_by(dtype: type, name: str) -> list[type]:
    """The classes of ``dtype``'s MRO that declare the field ``name``, nearest first."""
    return [cls for cls in dtype.__mro__ if name in cls.__dict__.get("__annotations__", {})]


def _ours(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "persetrain"


def _group_description(dtype: type, names: list[str]) -> str:
    """The class's first docstring paragraph, and which of its keys persetrain adds or re-defaults."""
    doc = plain_text(" ".join((inspect.getdoc(dtype) or "").split("\n\n")[0].split()))
    own, redefaulted = [], []
    for name in names:
        declared = _declared_by(dtype, name)
        if declared and _ours(declared[0]):
            (redefaulted if any(not _ours(cls) for cls in declared) else own).append(name)
    parts = [doc]
    if own:
        parts.append(f"persetrain's own keys: {', '.join(own)}.")
    if redefaulted:
        parts.append(f"persetrain's defaults for: {', '.join(redefaulted)}.")
    return " ".join(part for part in parts if part)


def arrange_help(parser: argparse.ArgumentParser, key_types: Mapping[str, KeyType], key_notes: Mapping[str, str]):
    """Group ``parser``'s keys by dataclass, with types as metavars and plain-text help (plus ``key_notes``)."""
    parser._optionals.title = "recipe"
    parser.add_argument(
        "--config",
        metavar="RECIPE.yaml",
        default=argparse.SUPPRESS,
        help="A YAML mapping of the keys below (plus env and accelerate_config); a flag given here overrides it.",
    )
    for dtype in parser.dataclass_types:
        hints = typing.get_type_hints(dtype)
        names = [field.name for field in dataclasses.fields(dtype) if field.name in key_types]
        title = getattr(dtype, "_argument_group_name", None) or dtype.__name__
        group = parser.add_argument_group(title, _group_description(dtype, names))
        for action in [action for action in parser._actions if action.dest in names]:
            for other in parser._action_groups:
                if action in other._group_actions:
                    other._group_actions.remove(action)
            group._group_actions.append(action)
            if action.nargs == 0:  # the --no_KEY complement of a true-by-default flag: `--KEY false` says it
                action.help = argparse.SUPPRESS
                continue
            key_type, hint = key_types[action.dest], hints[action.dest]
            text = plain_text(" ".join(filter(None, [action.help, key_notes.get(action.dest)])))
            if key_type.kind == "choice":
                listed = "{" + ",".join(str(choice) for choice in key_type.choices) + "}"
                if len(listed) > MAX_CHOICES_WIDTH:
                    listed = "CHOICE"
                    text += f" Choices: {', '.join(str(choice) for choice in key_type.choices)}."
                action.metavar = listed
            else:
                action.metavar = _type_name(_item_hint(hint) if key_type.many else hint)
            action.help = _UNESCAPED_PERCENT.sub("%%", text)
