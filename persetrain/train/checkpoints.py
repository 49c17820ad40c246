"""Which checkpoint a run resumes from: the newest *complete* ``checkpoint-N``.

transformers writes a checkpoint directory in place (weights, then optimizer and scheduler, then RNG
states) and ``trainer_state.json`` last; its own ``get_last_checkpoint`` takes the highest N whatever
the directory holds. A process killed mid-save leaves a ``checkpoint-N`` with weights but no
optimizer state, or a truncated ``trainer_state.json``, and resuming from it crashes or, worse,
continues with a fresh optimizer. So a checkpoint counts only once its ``trainer_state.json`` parses
and records step N: that file's presence is the completion marker the Trainer already writes.
Other ranks' files are covered too: under DDP they write only their RNG state (a missing one costs a
warning, not the run), and DeepSpeed's ``save_checkpoint`` ends in a barrier before the Trainer goes
on to write the state file.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from persetrain.io import InputError
from persetrain.models import TRAINER_STATE

_STEP = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")
_RANK_RNG = re.compile(r"^rng_state_(\d+)\.pth$")
#: Files that hold one rank's part of the weights or optimizer state, by what wrote them.
_SHARDED = {"DeepSpeed ZeRO": ("global_step*/*_optim_states.pt",), "FSDP": ("pytorch_model_fsdp_*", "optimizer_*")}


def is_complete(checkpoint: str | os.PathLike) -> bool:
    """Whether ``checkpoint`` finished saving: its trainer state parses and records its step."""
    checkpoint = Path(checkpoint)
    match = _STEP.match(checkpoint.name)
    try:
        state = json.loads((checkpoint / TRAINER_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return match is not None and isinstance(state, dict) and state.get("global_step") == int(match.group(1))


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest complete ``checkpoint-N`` under ``output_dir`` (highest N), or None."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    candidates = [(int(m.group(1)), p) for p in output_dir.iterdir() if p.is_dir() and (m := _STEP.match(p.name))]
    for _, path in sorted(candidates, reverse=True):
        if is_complete(path):
            return str(path)
    return None


def saved_world_size(checkpoint: str | os.PathLike) -> int | None:
    """How many processes saved ``checkpoint``: each rank writes its RNG state (``rng_state_<rank>.pth``; one
    process writes ``rng_state.pth``). None when it has none."""
    names = [p.name for p in Path(checkpoint).glob("rng_state*.pth")]
    ranks = [int(m.group(1)) for name in names if (m := _RANK_RNG.match(name))]
    if ranks:
        return max(ranks) + 1
    return 1 if "rng_state.pth" in names else None


def check_world_size(checkpoint: str | os.PathLike, world_size: int) -> None:
    """Refuse to resume a checkpoint whose state is split by rank on another number of processes.

    Why: DeepSpeed's ZeRO partitions and FSDP's sharded state hold one part per rank; loaded by another number of
    ranks, DeepSpeed fails deep inside its loader and a sharded optimizer state could load into the wrong
    parameters. A DDP or one-process checkpoint holds the whole state, and resumes on any number of processes.
    """
    saved = saved_world_size(checkpoint)
    if saved is None or saved == world_size:
        return
    for writer, patterns in _SHARDED.items():
        if any(next(Path(checkpoint).glob(pattern), None) for pattern in patterns):
            raise InputError(
                Path(checkpoint),
                f"saved by {saved} processes ({writer} state, one part per rank); this run has {world_size}: "
                f"resume it on {saved} (persetrain launch --num-processes {saved}), or start a new output_dir",
            )
