"""A model soup: judges trained from one start, averaged tensor by tensor into one judge.

Why (Wortsman et al., 2022, "Model soups"): judges fine-tuned from one start on the same rows in different orders
(seeds) tend to sit in one basin of the loss, where their mean keeps what they all learned and drops what each fitted
to its own samples, at no training or inference cost. On the yes / no RL judge the mean of a fold's two seeds carried
further to unseen topics than either seed (``docs/findings/2026-12-07-rl-judge-weight-extrapolation.md``).

Only weights saved whole are averaged: a PEFT adapter's start is not beside it (merge it into its base first). Judges
of different architectures are refused, as their tensors' names or shapes differ; judges of different starts cannot
be told from their weights, so the caller vouches for that (their mean is no judge of either).

The mean is taken one tensor at a time, in float32, from the judges' files opened lazily (``safe_open``), so memory
holds the soup and one tensor of each judge, not every judge whole; the soup keeps the first judge's dtypes. It is
written as ``save_pretrained`` lays a model out, with the first judge's config and tokenizer, so that every reader of
a model folder (``persetrain evaluate``, ``serve``, the trainers) loads it; a ``soup.json`` beside it names its judges.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from persetrain.console import track
from persetrain.io import InputError, atomic_dir, write_json
from persetrain.models import unfinished_run

#: What a soup's folder records beside the weights: the judges it is the mean of.
SOUP_CARD = "soup.json"


def weight_files(folder: str | os.PathLike) -> list[Path]:
    """The safetensors files of a model saved whole in ``folder``; a folder that holds none, an adapter or a run
    that has not finished is one line naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(folder, "no such model folder")
    unfinished = unfinished_run(folder)
    if unfinished:
        raise InputError(folder, unfinished)
    if (folder / "adapter_config.json").is_file():
        raise InputError(folder, "a PEFT adapter, whose start is not beside it: use its model merged into its base")
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(folder, "no .safetensors weights: expected a model saved whole with save_pretrained")
    return files


def read_weights(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Every tensor of a model saved whole, across its shards."""
    return {name: tensor for file in weight_files(folder) for name, tensor in load_file(str(file)).items()}


def average(folders: Sequence[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """The mean of the models saved whole in ``folders``, every tensor, in float32, kept in the first one's dtype.
    A model whose tensors' names or shapes are not the first one's is refused in one line naming its folder."""
    folders = [Path(folder) for folder in folders]
    with contextlib.ExitStack() as stack:
        tables: list[dict] = []  # per model: tensor name -> the open file that holds it
        for folder in folders:
            table = {}
            for file in weight_files(folder):
                try:
                    handle = stack.enter_context(safe_open(str(file), framework="pt"))
                except SafetensorError as err:
                    raise InputError(file, f"not readable safetensors ({err})") from None
                table.update(dict.fromkeys(handle.keys(), handle))
            tables.append(table)
        for folder, table in zip(folders[1:], tables[1:], strict=True):
            if table.keys() != tables[0].keys():
                odd = sorted(table.keys() ^ tables[0].keys())
                raise InputError(
                    folder, f"its tensors are not {folders[0]}'s: {len(odd)} in one only, the first {odd[0]}"
                )
        soup = {}
        for name in track(sorted(tables[0]), "averaging"):
            tensors = [table[name].get_tensor(name) for table in tables]
            for folder, tensor in zip(folders[1:], tensors[1:], strict=True):
                if tensor.shape != tensors[0].shape:
                    raise InputError(
                        folder,
                        f"tensor {name} has shape {tuple(tensor.shape)} against {tuple(tensors[0].shape)} in "
                        f"{folders[0]}",
                    )
            soup[name] = torch.stack([tensor.float() for tensor in tensors]).mean(0).to(tensors[0].dtype)
    return soup


def save_model(weights: dict[str, torch.Tensor], like: str | os.PathLike, out: str | os.PathLike) -> None:
    """``weights`` saved in ``out`` as ``save_pretrained`` saves a model (safetensors shards and their index), with the
    config, generation config and tokenizer of the model folder ``like``."""
    from huggingface_hub import save_torch_state_dict
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    like, out = Path(like), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    AutoConfig.from_pretrained(like).save_pretrained(out)
    if (like / "generation_config.json").is_file():
        GenerationConfig.from_pretrained(like).save_pretrained(out)
    AutoTokenizer.from_pretrained(like).save_pretrained(out)
    save_torch_state_dict(weights, out, metadata={"format": "pt"})


def make_soup(judges: Sequence[str | os.PathLike], out: str | os.PathLike) -> Path:
    """The mean of ``judges`` (model folders trained whole from one start) written whole to ``out``: a killed run
    leaves no half-written soup, and a previous one stays until the new one is complete."""
    judges, out = [Path(judge) for judge in judges], Path(out)
    if len(judges) < 2:
        raise InputError(judges[0] if judges else out, "a soup needs at least two judges to average")
    for judge in judges:
        if out.resolve() == judge.resolve() or out.resolve() in judge.resolve().parents:
            raise InputError(out, f"the soup would replace {judge}, one of the judges it averages; give another --out")
    weights = average(judges)
    with atomic_dir(out) as folder:
        save_model(weights, judges[0], folder)
        write_json(folder / SOUP_CARD, {"method": "uniform mean", "judges": [str(judge) for judge in judges]})
    return out
