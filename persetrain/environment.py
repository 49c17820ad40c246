"""Where a run ran, as one record: a training run's ``resolved_config.json`` and an evaluation's
``environment.json`` hold the same fields, so that two run directories compare field by field."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from persetrain.models import best_device


def environment(model_dtype: torch.dtype | None = None) -> dict[str, Any]:
    """Python, platform, device, threads, library versions, git commit (and the model's dtype, given one)."""
    import accelerate
    import datasets
    import peft
    import transformers
    import trl

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=Path(__file__).parent
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    record = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(best_device()),
        "cuda": torch.cuda.is_available(),
        "torch_threads": torch.get_num_threads(),
        "versions": {m.__name__: m.__version__ for m in (torch, transformers, trl, peft, accelerate, datasets)},
        "git_commit": commit,
    }
    if model_dtype is not None:
        record["model_dtype"] = str(model_dtype).removeprefix("torch.")
    return record
