"""Recipes: one YAML file holds every argument of a training run, the command line overrides any of them.

A recipe is a flat YAML mapping, as in alignment-handbook: its keys are the field names of the argument
dataclasses of the run (for SFT: :class:`ModelArguments`, :class:`DataArguments`, :class:`PeftArguments`,
``persetrain.train.sft.SFTScriptArguments`` and every field of TRL's ``SFTConfig``, which holds all of
transformers' ``TrainingArguments``), plus an optional ``env`` mapping of environment variables.

Precedence, lowest to highest: the dataclass defaults, the hardware defaults the caller passes (so the
precision follows the machine and never a library default such as TRL's ``bf16=True``), the recipe,
the command line (``--learning_rate 2e-5``). Parsing goes through ``trl.TrlParser`` so that recipes and
flags behave exactly as with TRL's own scripts; the one addition is that a key no dataclass knows is an
error naming the recipe file and the key (TRL's message names neither), because a misspelt key that is
silently ignored trains a different model than the one the recipe describes.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from trl import TrlParser

from persetrain.models import DEFAULT_MODEL


class RecipeError(ValueError):
    """A recipe that cannot be used as written; the message names the file and the offending key."""


@dataclass
class ModelArguments:
    """Which model to train and how to load it."""

    model_name_or_path: str = field(
        default=DEFAULT_MODEL,
        metadata={"help": "A persetrain model spec: 'embedded:<name>', a local model directory, a .gguf file "
                          "or a Hub id such as 'meta-llama/Llama-2-7b-chat-hf'."},
    )
    model_revision: str = field(default="main", metadata={"help": "Hub revision (branch, tag or commit)."})
    dtype: str = field(
        default="auto",
        metadata={"help": "Dtype of the loaded weights. 'auto' follows the hardware: bfloat16 where it computes "
                          "natively (Ampere and later), float32 elsewhere (CPUs; fp16 GPUs train in fp32 "
                          "with fp16 autocast).",
                  "choices": ["auto", "float32", "bfloat16", "float16"]},
    )
    attn_implementation: str = field(
        default="sdpa",
        metadata={"help": "Attention kernel ('sdpa', 'eager', 'flash_attention_2', ...). sdpa is exact for "
                          "packed, padding-free batches: transformers builds the block-diagonal mask from "
                          "the position ids."},
    )


@dataclass
class DataArguments:
    """The instruction dataset: a ``DatasetDict`` written with ``datasets.save_to_disk``."""

    dataset_path: str | None = field(
        default=None,
        metadata={"help": "Directory written by `save_to_disk` (e.g. runs/demo/data/per-mpst-k3) whose rows "
                          "have TRL's prompt-completion columns `prompt` and `completion`."},
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    dataset_test_split: str = field(default="test", metadata={"help": "Split to evaluate on (when eval is on)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use a seeded random N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use a seeded random N eval rows."})


@dataclass
class PeftArguments:
    """LoRA / QLoRA. Off by default: the paper fine-tunes every weight."""

    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling numerator (scale = alpha / r)."})
    lora_dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: list[str] | None = field(
        default=None,
        metadata={"help": "Modules that get adapters; default 'all-linear' (every linear layer except the "
                          "LM head)."},
    )
    lora_modules_to_save: list[str] | None = field(
        default=None, metadata={"help": "Modules trained fully and saved next to the adapter."}
    )
    use_rslora: bool = field(default=False, metadata={"help": "Rank-stabilised LoRA scaling alpha/sqrt(r)."})
    use_dora: bool = field(default=False, metadata={"help": "Weight-decomposed LoRA (DoRA)."})
    load_in_4bit: bool = field(
        default=False, metadata={"help": "QLoRA: load the frozen base in 4 bit (needs bitsandbytes and a GPU)."}
    )
    load_in_8bit: bool = field(default=False, metadata={"help": "Load the frozen base in 8 bit."})
    bnb_4bit_quant_type: str = field(default="nf4", metadata={"help": "4-bit type.", "choices": ["nf4", "fp4"]})
    use_bnb_nested_quant: bool = field(default=False, metadata={"help": "Quantise the 4-bit scales too."})


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
    """Read a recipe file as a mapping; syntax errors name the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"{path}: recipe not found")
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


def _known_keys(parser: TrlParser) -> set[str]:
    return {action.dest for action in parser._actions if action.dest != "help"}


def parse_recipe(
    dataclass_types: Sequence[type],
    argv: Sequence[str] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
    prog: str | None = None,
) -> tuple[Any, ...]:
    """Parse ``[--config recipe.yaml] [--key value ...]`` into one instance of each dataclass.

    ``defaults`` replace dataclass defaults before the recipe is applied (the caller's hardware
    defaults), so both the recipe and the command line can still override them. The recipe's ``env``
    mapping is exported unless the variable is already set: the shell overrides the recipe just as
    the command line does. Unknown recipe keys, unknown flags and values the dataclasses reject
    raise :class:`RecipeError`.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    parser = TrlParser(list(dataclass_types), prog=prog)
    if defaults:
        parser.set_defaults(**defaults)
    config_path = _pop_config_path(args)
    if config_path is not None:
        recipe = read_recipe(config_path)
        env = recipe.pop("env", None) or {}
        if not isinstance(env, dict):
            raise RecipeError(f"{config_path}: 'env' must be a mapping of variable names to values")
        keys = _known_keys(parser)
        for key in recipe:
            if key not in keys:
                close = difflib.get_close_matches(key, sorted(keys), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise RecipeError(f"{config_path}: unknown key '{key}'{hint}")
        for name, value in env.items():
            os.environ.setdefault(str(name), str(value))
        parser.set_defaults_with_config(**recipe)
    try:
        return parser.parse_args_into_dataclasses(args=args)
    except ValueError as err:  # a value the dataclasses reject, e.g. bf16 on a machine without bf16
        source = " + ".join(filter(None, [config_path, "command line" if args else None])) or "arguments"
        raise RecipeError(f"{source}: {err}") from err
