"""What a launch reads from a recipe: its keys as the trainer will read them, through the trainer's own parser.

A launch needs a few of a recipe's keys (batch sizes, precision, DeepSpeed, the dataset). It reads them with the
parser of the trainer it launches (``make_parser()``), so that the launch and the trainer see the same values: the
dataclass defaults, the recipe over them, the command line over both, under any spelling of a flag
(``--gradient-accumulation-steps 4``), and the same one-line error for a value of the wrong type. Training is a peer
of the launcher, never imported here: whoever stands on both (the command line, a test) passes a :data:`KeyReader`,
``persetrain.train.trainers.recipe_keys``. The files themselves are read by :mod:`persetrain.config_files`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any, Protocol


class LaunchError(ValueError):
    """A recipe, accelerate config or option combination that cannot be launched; one line, naming the file."""


class RecipeKeys(Protocol):
    """A recipe's keys as its trainer reads them (``persetrain.train.recipe.RecipeKeys``)."""

    @property
    def values(self) -> Mapping[str, Any]:
        """Every key: the dataclass default, the recipe over it, the command line over both."""

    @property
    def recipe_values(self) -> Mapping[str, Any]:
        """Every key before the command line."""

    @property
    def given(self) -> Set[str]:
        """The keys the command line set."""

    @property
    def accelerate_config(self) -> str | None:
        """The accelerate config the recipe names."""


#: ``(trainer, ["--config", RECIPE, *overrides]) -> RecipeKeys``: a recipe read by the named trainer's parser.
KeyReader = Callable[[str, Sequence[str]], RecipeKeys]
