"""Push trained judges and prepared datasets to the Hugging Face Hub, each with a generated card.

``persetrain push`` builds the exact folder a repository receives (``--dry-run`` stops there), then uploads
it with one ``HfApi.upload_folder`` commit. The card is written as the folder's ``README.md`` rather than
pushed with ``ModelCard.push_to_hub``: that method validates the card against the public Hub whatever
endpoint the client is given, while ``upload_folder`` talks only to ``HfApi(endpoint=...)`` / ``HF_ENDPOINT``
(create repo, preupload, commit, and the card's YAML check), so the same code pushes to a private Hub
mirror. The token comes from huggingface_hub's standard places (``HF_TOKEN``, ``hf auth login``) and is
never printed.

- A **checkpoint** is a full model (``model*.safetensors`` / ``pytorch_model*.bin`` + ``config.json``) or a
  PEFT adapter (``adapter_model.*`` + ``adapter_config.json``); ``merge`` folds an adapter into its base and
  pushes the merged weights. Optimizer, scheduler, RNG and trainer state stay behind: they resume a run,
  they do not serve a model.
- A **dataset** is a folder ``persetrain prepare`` writes (``datasets.save_to_disk`` + ``build_info.json`` +
  its README). Splits are pushed as Parquet, the Hub's native layout, so ``load_dataset(repo)`` reads them.

One job per module: ``checkpoint`` (what a checkpoint holds), ``cards`` (the README cards), ``folders`` (the
upload folders), ``upload`` (token, commit, ``push``).
"""

from persetrain.adapters import is_reward_model
from persetrain.hub.cards import metrics_table, model_card
from persetrain.hub.checkpoint import checkpoint_kind
from persetrain.hub.errors import HubError
from persetrain.hub.folders import build_dataset_folder, build_model_folder
from persetrain.hub.upload import PushResult, describe_folder, push, push_folder, require_token

__all__ = [
    "HubError",
    "PushResult",
    "build_dataset_folder",
    "build_model_folder",
    "checkpoint_kind",
    "describe_folder",
    "is_reward_model",
    "metrics_table",
    "model_card",
    "push",
    "push_folder",
    "require_token",
]
