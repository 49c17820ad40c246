"""What a checkpoint folder holds and what of it a model repository receives.

A full model (``model*.safetensors`` / ``pytorch_model*.bin`` + ``config.json``) or a PEFT adapter
(``adapter_model.*`` + ``adapter_config.json``; ``persetrain.adapters`` folds one into its base). Optimizer,
scheduler, RNG and trainer state stay behind: they resume a run, they do not serve a model.
"""

from __future__ import annotations

import os
from pathlib import Path

from persetrain.io import InputError

FULL_WEIGHTS = ("model.safetensors", "model-*-of-*.safetensors", "pytorch_model.bin", "pytorch_model-*-of-*.bin")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
# What a run directory or checkpoint holds to resume training, not to use the model.
TRAINING_STATE = (
    "optimizer.pt",
    "scheduler.pt",
    "rng_state*.pth",
    "trainer_state.json",
    "training_args.bin",
    "metrics.jsonl",
    "all_results.json",
    "train_results.json",
    "eval_results.json",
    "resolved_config.json",
    "README.md",
)
RESOLVED_CONFIG = "resolved_config.json"


def _matches(path: Path, patterns: tuple[str, ...]) -> bool:
    return any(path.match(p) for p in patterns)


def checkpoint_kind(checkpoint: Path) -> str:
    """``"adapter"`` or ``"full"``; a directory with neither kind of weights, or a run that has not finished, is an
    error naming it."""
    from persetrain.models import unfinished_run

    if not checkpoint.is_dir():
        raise InputError(checkpoint, "no such checkpoint directory")
    unfinished = unfinished_run(checkpoint)
    if unfinished:
        raise InputError(checkpoint, unfinished)
    files = [p for p in checkpoint.iterdir() if p.is_file()]
    if any(_matches(p, ADAPTER_WEIGHTS) for p in files) and (checkpoint / "adapter_config.json").is_file():
        return "adapter"
    if any(_matches(p, FULL_WEIGHTS) for p in files) and (checkpoint / "config.json").is_file():
        return "full"
    raise InputError(
        checkpoint,
        "no model weights to push: expected a full model (model*.safetensors or "
        "pytorch_model*.bin with config.json) or a PEFT adapter (adapter_model.safetensors "
        "with adapter_config.json)",
    )


def check_upload_folder(out: Path, source: Path) -> None:
    """Refuse an upload folder that is ``source`` or holds it: the folder is replaced whole, and that would delete
    the checkpoint or dataset being pushed."""
    out, source = out.resolve(), source.resolve()
    if out == source or out in source.parents:
        raise InputError(out, f"the upload folder would replace {source}, which it is built from; give another --out")


def link_model_files(checkpoint: Path, out: Path) -> None:
    """Put the checkpoint's files that serve the model (weights, config, tokenizer), not its training state, into
    ``out`` as links: a hard link where ``out`` is on the checkpoint's filesystem, else a symbolic link to it.

    Why links: a 7B checkpoint's weights are gigabytes, which every build (each ``--dry-run``) would copy only for
    the upload to read them once; a link costs nothing, and the upload reads the same bytes through it.
    """
    for path in sorted(checkpoint.iterdir()):
        if path.is_file() and not _matches(path, TRAINING_STATE):
            try:
                os.link(path, out / path.name)
            except OSError:  # another filesystem, or one without hard links
                (out / path.name).symlink_to(path.resolve())
