"""A PEFT adapter folded into its base model: what a training run's ``merge_adapter`` and ``push --merge`` both run.

It lives below both (``persetrain.train`` and ``persetrain.hub``) so that neither reaches up into the other for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from persetrain.io import read_json

if TYPE_CHECKING:
    import torch


def is_reward_model(checkpoint: Path) -> bool:
    """A sequence-classification checkpoint (``persetrain rm``): full weights or a ``SEQ_CLS`` adapter."""
    architectures = read_json(checkpoint / "config.json").get("architectures") or []
    task = read_json(checkpoint / "adapter_config.json").get("task_type")
    return task == "SEQ_CLS" or any(a.endswith("ForSequenceClassification") for a in architectures)


def merge_adapter(checkpoint: Path, base: str, out: Path, dtype: torch.dtype | str = "auto") -> None:
    """Load the base (in ``dtype``; "auto": as it was saved), apply the adapter, fold it in and save full weights
    + the checkpoint's tokenizer."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from persetrain.models import local_weights_dir

    if is_reward_model(checkpoint):
        model = AutoModelForSequenceClassification.from_pretrained(
            str(local_weights_dir(base)), num_labels=1, dtype=dtype
        )
    else:
        model = AutoModelForCausalLM.from_pretrained(str(local_weights_dir(base)), dtype=dtype)
    # The checkpoint's tokenizer (with the chat template training used); an adapter folder has no model
    # config, so it is read as a plain tokenizer folder.
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    if model.config.pad_token_id is None:  # as the trainers set it: a classifier reads its last non-pad token
        model.config.pad_token_id = tokenizer.pad_token_id
    merged = PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload()
    merged.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
