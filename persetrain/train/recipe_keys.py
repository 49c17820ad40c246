"""What each recipe key takes: its type read from its dataclass field and argparse action, checked where it is given.

transformers' ``HfArgumentParser`` converts a command-line value with the key's type, but a recipe value only
when YAML read it as a string, and then inside argparse, whose error prints the whole usage (a hundred lines)
and names a flag instead of the file. A value YAML read as another type (``max_steps: [2]``) is not converted at
all and fails deep in ``TrainingArguments`` as a ``TypeError``. :class:`KeyType` checks both, and says in one line
what the key expects and what it got: ``recipes/x.yaml: key 'learning_rate': expected a float, got 'fast'``.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


class KeyValueError(ValueError):
    """A value a key does not take; the message says what the key expects and what it got."""


@dataclass(frozen=True)
class KeyType:
    """One key's value type: its ``kind`` (``int``, ``float``, ``bool`` or ``choice``, the kinds checked here; ``other``
    passes to the dataclass as it is), its choices and whether it may be null."""

    kind: str
    choices: tuple[Any, ...] = ()
    nullable: bool = True
    #: A list key (``nargs='+'``): a recipe gives a YAML list, each item of the key's type.
    many: bool = False
    #: The action's own converter of a command-line string (argparse's ``type``): for a bool, HfArgumentParser's
    #: yes / no / true / false ...; for a choice, the text to the choice (an enum's member); for the kinds not
    #: checked here, the whole conversion.
    convert: Callable[[str], Any] | None = None

    @property
    def expected(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(str(choice) for choice in self.choices)
        if self.kind == "other":
            return f"a {getattr(self.convert, '__name__', 'string')}"
        return {"int": "an integer", "float": "a float", "bool": "true or false"}[self.kind]

    def __call__(self, text: str) -> Any:
        """argparse's ``type`` of the key: a bad flag value says what the key expects, not the converter's name."""
        try:
            return self.from_text(text)
        except KeyValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    def _refuse(self, value: Any) -> KeyValueError:
        return KeyValueError(f"expected {self.expected}, got {_shown(value)}")

    def from_text(self, text: str) -> Any:
        """A command-line string (or a recipe value YAML read as a string) as the key's value."""
        if self.kind == "choice" and text not in {str(choice) for choice in self.choices}:
            raise self._refuse(text)
        parse = _PARSERS.get(self.kind, self.convert)
        if parse is None:
            return text
        try:
            return parse(text)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            raise self._refuse(text) from None

    def from_recipe(self, value: Any) -> Any:
        """A value as YAML read it, checked (and converted where YAML read a string)."""
        if value is None:
            if not self.nullable:
                raise self._refuse(value)
            return None
        if self.many and isinstance(value, list):
            return [self._one(item) for item in value]
        return self._one(value)

    def _one(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.from_text(value)
        if self.kind == "other":
            return value
        if isinstance(value, list | dict) or (isinstance(value, bool) and self.kind in ("int", "float")):
            raise self._refuse(value)
        if self.kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise self._refuse(value)
            return int(value)
        if self.kind == "float":  # an int stays one: TrainingArguments reads a whole save_steps as a step count
            return value
        if self.kind == "bool":
            if value not in (0, 1):
                raise self._refuse(value)
            return bool(value)
        if value not in self.choices:
            raise self._refuse(value)
        return value


#: How a command-line string becomes a number (the other kinds: the action's own converter).
_PARSERS: dict[str, Callable[[str], Any]] = {"int": int, "float": float}


def _shown(value: Any) -> str:
    """A value as a message shows it: YAML's null as null, anything else as Python writes it."""
    return "null" if value is None else repr(value)


def _allows_none(hint: Any) -> bool:
    return hint is type(None) or (
        typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)
    )


def key_type(field: dataclasses.Field, hint: Any, action: argparse.Action) -> KeyType:
    """The type of ``field``'s key: the kind argparse's converter ``action.type`` stands for, checked as TRL would."""
    common = {"nullable": _allows_none(hint) or field.default is None, "many": action.nargs in ("+", "*")}
    convert = action.type
    if action.choices:  # a Literal's converter maps each choice's text to the choice (HfArgumentParser's)
        return KeyType("choice", tuple(action.choices), convert=None if convert is str else convert, **common)
    if convert in (int, float):
        return KeyType(convert.__name__, **common)
    if getattr(convert, "__name__", None) == "string_to_bool":  # HfArgumentParser's (TRL ships its own copy)
        return KeyType("bool", convert=convert, **common)
    if isinstance(convert, type) and issubclass(convert, enum.Enum):
        return KeyType("choice", tuple(member.value for member in convert), convert=convert, **common)
    return KeyType("other", convert=None if convert in (str, None) else convert, **common)


def key_types(dataclass_types: Iterable[type], actions: Iterable[argparse.Action]) -> dict[str, KeyType]:
    """Every key's :class:`KeyType`, by key (the dataclass field name, argparse's ``dest``)."""
    by_dest = {action.dest: action for action in actions if action.option_strings and action.nargs != 0}
    found = {}
    for dtype in dataclass_types:
        hints = typing.get_type_hints(dtype)
        for field in dataclasses.fields(dtype):
            if field.init and field.name in by_dest:
                found[field.name] = key_type(field, hints[field.name], by_dest[field.name])
    return found
