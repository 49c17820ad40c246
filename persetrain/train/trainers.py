"""The trainers by name (``sft``, ``rm``, ``grpo``), and a recipe's keys read through the named trainer's own parser.

``persetrain launch`` plans a run (its batch rescaling, its checks of the accelerate config and the dataset) with the
values the trainer will train with; reading them with the trainer's ``make_parser()`` is what makes them the same,
dashed spellings, type checks and errors included. The launcher is a peer of training and does not import it: the
command line, which stands on both, hands it :func:`recipe_keys`.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.train.recipe import RecipeError, RecipeKeys, RecipeParser


def trainer_parser(trainer: str) -> RecipeParser:
    """The parser of the named trainer's entry points (imported on use: each pulls in TRL)."""
    if trainer == "sft":
        from persetrain.train.sft import make_parser
    elif trainer == "rm":
        from persetrain.train.rm import make_parser
    elif trainer == "grpo":
        from persetrain.train.grpo import make_parser
    else:
        raise RecipeError(f"unknown trainer '{trainer}' (known: sft, rm, grpo)")
    return make_parser()


def recipe_keys(trainer: str, args: Sequence[str]) -> RecipeKeys:
    """Every key of ``trainer`` as it will read ``args`` (``--config RECIPE --key value ...``)."""
    return trainer_parser(trainer).read_keys(args)
