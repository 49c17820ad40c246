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
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from huggingface_hub import DatasetCard, DatasetCardData, HfApi, ModelCardData, get_token
from huggingface_hub.errors import HfHubHTTPError

from persetrain.io import InputError, atomic_write

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
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
# The training settings a card lists (from the run's resolved configuration).
RECIPE_SETTINGS = (
    "learning_rate",
    "num_train_epochs",
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "packing",
    "seed",
)

CITATIONS = {
    "perse": (
        "PerSE (Wang et al., 2024)",
        """@inproceedings{wang2024perse,
  title     = {Learning Personalized Alignment for Evaluating Open-ended Text Generation},
  author    = {Wang, Danqing and Yang, Kevin and Zhu, Hanlin and Yang, Xiaomeng and Cohen, Andrew and Li, Lei
               and Tian, Yuandong},
  booktitle = {Proceedings of EMNLP},
  year      = {2024},
  note      = {arXiv:2310.03304}
}""",
    ),
    "parl": (
        "PARL",
        """@misc{parl,
  title = {Preference-Aware Rubric Learning for Personalized Evaluation},
  note  = {Code: https://github.com/SnowCharmQ/PARL}
}""",
    ),
    "rm": (
        "Bradley-Terry reward modelling (Ouyang et al., 2022)",
        """@inproceedings{ouyang2022training,
  title     = {Training language models to follow instructions with human feedback},
  author    = {Ouyang, Long and Wu, Jeff and Jiang, Xu and others},
  booktitle = {Advances in Neural Information Processing Systems},
  year      = {2022}
}""",
    ),
    "verifier": (
        "generative verifiers (Zhang et al., 2024)",
        """@misc{zhang2024generative,
  title  = {Generative Verifiers: Reward Modeling as Next-Token Prediction},
  author = {Zhang, Lunjun and Hosseini, Arian and Bansal, Hritik and Kazemi, Mehran and Kumar, Aviral and
            Agarwal, Rishabh},
  year   = {2024},
  note   = {arXiv:2408.15240}
}""",
    ),
}


class HubError(ValueError):
    """A push that cannot go ahead (no token, nothing to push); one line."""


@dataclass
class PushResult:
    folder: Path
    repo_id: str
    repo_type: str
    commit_url: str | None  # None for a dry run


def require_token() -> str:
    token = get_token()
    if not token:
        raise HubError(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login` (persetrain reads it from "
            "huggingface_hub's standard locations and never prints it)"
        )
    return token


def _matches(path: Path, patterns: tuple[str, ...]) -> bool:
    return any(path.match(p) for p in patterns)


def checkpoint_kind(checkpoint: Path) -> str:
    """``"adapter"`` or ``"full"``; a directory with neither kind of weights is an error naming it."""
    if not checkpoint.is_dir():
        raise InputError(checkpoint, "no such checkpoint directory")
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


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except json.JSONDecodeError as err:
        raise InputError(path, f"not valid JSON: {err}") from None


def _fresh_folder(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)


def _copy_model_files(checkpoint: Path, out: Path) -> None:
    for path in sorted(checkpoint.iterdir()):
        if path.is_file() and not _matches(path, TRAINING_STATE):
            shutil.copy2(path, out / path.name)


def is_reward_model(checkpoint: Path) -> bool:
    """A sequence-classification checkpoint (``persetrain rm``): full weights or a ``SEQ_CLS`` adapter."""
    architectures = _read_json(checkpoint / "config.json").get("architectures") or []
    task = _read_json(checkpoint / "adapter_config.json").get("task_type")
    return task == "SEQ_CLS" or any(a.endswith("ForSequenceClassification") for a in architectures)


def _merge_adapter(checkpoint: Path, base: str, out: Path) -> None:
    """Load the base, apply the adapter, fold it in and save full weights + the checkpoint's tokenizer."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from persetrain.models import local_weights_dir

    if is_reward_model(checkpoint):
        model = AutoModelForSequenceClassification.from_pretrained(
            str(local_weights_dir(base)), num_labels=1, dtype="auto"
        )
    else:
        model = AutoModelForCausalLM.from_pretrained(str(local_weights_dir(base)), dtype="auto")
    merged = PeftModel.from_pretrained(model, str(checkpoint)).merge_and_unload()
    merged.save_pretrained(str(out))
    # The checkpoint's tokenizer (with the chat template training used); an adapter folder has no model
    # config, so it is read as a plain tokenizer folder.
    AutoTokenizer.from_pretrained(str(checkpoint)).save_pretrained(str(out))


def metrics_table(metrics: dict[str, Any]) -> str:
    """A markdown table of ``metrics.json`` (``systems.<name>.<metric>``): one row per system, numbers only."""
    systems = metrics.get("systems") or {}
    columns: list[str] = []
    for values in systems.values():
        columns += [k for k, v in values.items() if isinstance(v, int | float) and k not in columns]
    if not systems or not columns:
        return "_The metrics file holds no per-system numbers._"

    def cell(value: Any) -> str:
        return "–" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = ["| system | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [
        f"| {name} | " + " | ".join(cell(values.get(c)) for c in columns) + " |" for name, values in systems.items()
    ]
    return "\n".join(lines)


def _citation_section(method: str) -> str:
    if method not in CITATIONS:
        raise HubError(f"unknown method '{method}' for the card's citation (known: {', '.join(CITATIONS)})")
    name, bibtex = CITATIONS[method]
    return f"## Citation\n\nThe method is {name}:\n\n```bibtex\n{bibtex}\n```\n"


def model_card(
    *,
    kind: str,
    merged: bool,
    base_model: str | None,
    resolved: dict[str, Any],
    recipe: Path | None,
    metrics: dict[str, Any] | None,
    metrics_source: Path | None,
    license: str,
    method: str,
    reward_model: bool = False,
) -> str:
    """The README.md of a pushed judge: what it was trained from, on what, how, how it scored, and its terms."""
    adapter = kind == "adapter" and not merged
    # The Hub's metadata takes a repository id only; a local path or embedded spec stays in the text.
    hub_base = base_model if base_model and HUB_ID.match(base_model) and not Path(base_model).exists() else None
    data = ModelCardData(
        license=license,
        base_model=hub_base,
        library_name="peft" if adapter else "transformers",
        pipeline_tag="text-classification" if reward_model else "text-generation",
        tags=["persetrain", method, "personalized-evaluation"] + (["reward-model"] if reward_model else []),
    )
    script, training, model = (resolved.get(k) or {} for k in ("script", "training", "model"))
    dataset_path = script.get("dataset_path")
    what = (
        "a LoRA adapter"
        if adapter
        else "full weights (a LoRA adapter merged into its base)"
        if merged
        else "full weights"
    )
    lines = [
        f"---\n{data.to_yaml()}\n---",
        "",
        f"# {method.upper()} judge",
        "",
        f"A personalized-evaluation judge trained with persetrain; this repository holds {what}.",
        "",
        "## Base model",
        "",
        f"`{base_model}`" if base_model else "_not recorded_",
        "",
        "## Data",
        "",
    ]
    lines += [
        f"Trained on `{dataset_path}` (split `{script.get('dataset_train_split', 'train')}`"
        + (f", {script['max_train_samples']} rows" if script.get("max_train_samples") else "")
        + ")."
        if dataset_path
        else "_not recorded_",
        "",
        "## Recipe",
        "",
    ]
    settings = {k: training[k] for k in RECIPE_SETTINGS if k in training}
    settings.update({k: model[k] for k in ("use_peft", "lora_r", "lora_alpha") if model.get("use_peft")})
    if settings:
        lines += ["| setting | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in settings.items()] + [""]
    if recipe is not None:
        lines += [f"Recipe `{recipe.name}`:", "", "```yaml", recipe.read_text(encoding="utf-8").rstrip(), "```", ""]
    if not settings and recipe is None:
        lines += ["_not recorded_", ""]
    lines += ["## Evaluation", ""]
    if metrics is not None:
        lines += [
            f"From `{metrics_source.name if metrics_source else 'metrics.json'}`"
            + (f" ({metrics['n_examples']} examples, task `{metrics.get('kind')}`)" if "n_examples" in metrics else "")
            + ":",
            "",
            metrics_table(metrics),
            "",
        ]
    else:
        lines += ["_No evaluation attached (pass `--metrics RUN/metrics.json` from `persetrain evaluate`)._", ""]
    if adapter:
        usage = ["# a PEFT adapter: `persetrain push --merge` pushes merged weights that load directly"]
    elif reward_model:
        usage = [
            "# a reward model: one scalar per (person + request, candidate), read by the `rm` evaluator",
            "# persetrain evaluate --evaluator rm --model <this repo id> --data DATA",
        ]
    else:
        usage = ["from persetrain.models import load_model", 'model, tokenizer = load_model("<this repo id>")']
    lines += [
        "## Usage",
        "",
        "```python",
        *usage,
        "```",
        "",
        _citation_section(method),
        "## License",
        "",
        f"{license}. The base model's own license also applies.",
        "",
    ]
    return "\n".join(lines)


def build_model_folder(
    checkpoint: str | os.PathLike,
    out: str | os.PathLike,
    *,
    merge: bool = False,
    metrics: str | os.PathLike | None = None,
    recipe: str | os.PathLike | None = None,
    license: str = "apache-2.0",
    method: str = "perse",
) -> Path:
    """Write the folder a model repository receives: weights, config, tokenizer, README.md card."""
    checkpoint, out = Path(checkpoint), Path(out)
    kind = checkpoint_kind(checkpoint)
    if merge and kind != "adapter":
        raise HubError(f"{checkpoint}: --merge needs a PEFT adapter checkpoint; this one holds full weights")
    metrics_path = Path(metrics) if metrics is not None else checkpoint / "metrics.json"
    if metrics is not None and not metrics_path.is_file():
        raise InputError(metrics_path, "no such metrics file")
    recipe_path = Path(recipe) if recipe is not None else None
    if recipe_path is not None and not recipe_path.is_file():
        raise InputError(recipe_path, "no such recipe file")
    resolved = _read_json(checkpoint / RESOLVED_CONFIG) or _read_json(checkpoint.parent / RESOLVED_CONFIG)
    # The spec the run was given (a Hub id, embedded:NAME) names the base in the card; the adapter's own
    # record (the local weights it was trained on) is what a merge loads.
    adapter_base = _read_json(checkpoint / "adapter_config.json").get("base_model_name_or_path")
    spec = (resolved.get("model") or {}).get("model_name_or_path")
    base = adapter_base or spec
    if merge and not base:
        raise InputError(checkpoint / "adapter_config.json", "no base_model_name_or_path to merge the adapter into")

    _fresh_folder(out)
    if merge:
        _merge_adapter(checkpoint, base, out)
    else:
        _copy_model_files(checkpoint, out)
    card = model_card(
        kind=kind,
        merged=merge,
        base_model=spec or base,
        resolved=resolved,
        recipe=recipe_path,
        metrics=_read_json(metrics_path) if metrics_path.is_file() else None,
        metrics_source=metrics_path,
        license=license,
        method=method,
        reward_model=is_reward_model(checkpoint),
    )
    with atomic_write(out / "README.md") as f:
        f.write(card)
    return out


def build_dataset_folder(
    dataset: str | os.PathLike, out: str | os.PathLike, *, license: str = "apache-2.0", method: str | None = None
) -> Path:
    """Write the folder a dataset repository receives: one Parquet file per split and the README.md card.

    The card keeps the README ``persetrain prepare`` wrote (sources, filters, settings, the synthetic-data
    note) and adds the Hub metadata: license, the Parquet ``configs``, the task, and the method's citation.
    """
    from datasets import Dataset, load_from_disk

    dataset, out = Path(dataset), Path(out)
    if not (dataset / "dataset_dict.json").is_file() and not (dataset / "dataset_info.json").is_file():
        raise InputError(dataset, "not a dataset folder written by `persetrain prepare` (no dataset_dict.json)")
    info = _read_json(dataset / "build_info.json")
    loaded = load_from_disk(str(dataset))
    splits = {"train": loaded} if isinstance(loaded, Dataset) else dict(loaded)
    method = method or ("parl" if "parl" in str(info.get("name", "")) else "perse")

    _fresh_folder(out)
    files = {}
    for split, rows in splits.items():
        files[split] = f"data/{split}-00000-of-00001.parquet"
        (out / "data").mkdir(exist_ok=True)
        rows.to_parquet(str(out / files[split]))
    for extra in ("build_info.json", "dataset.json"):
        if (dataset / extra).is_file():
            shutil.copy2(dataset / extra, out / extra)

    readme = dataset / "README.md"
    card = (
        DatasetCard(readme.read_text(encoding="utf-8"))
        if readme.is_file()
        else DatasetCard(f"---\n{DatasetCardData().to_yaml()}\n---\n\n# {info.get('title', dataset.name)}\n")
    )
    data = card.data
    data.license = license
    data.configs = [{"config_name": "default", "data_files": [{"split": s, "path": p} for s, p in files.items()]}]
    if info.get("task"):
        data.task = info["task"]
    if info.get("synthetic"):
        data.tags = sorted(set((data.tags or []) + ["synthetic"]))
    body = card.text.rstrip() + "\n\n"
    if "## Splits" not in card.text:
        body += (
            "## Splits\n\n| split | rows |\n|---|---|\n"
            + "".join(f"| {s} | {len(r)} |\n" for s, r in splits.items())
            + "\n"
        )
    body += _citation_section(method) + f"\n## License\n\n{license}.\n"
    with atomic_write(out / "README.md") as f:
        f.write(f"---\n{data.to_yaml()}\n---\n\n{body.lstrip()}")
    return out


def push_folder(
    folder: Path,
    repo_id: str,
    *,
    repo_type: str = "model",
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    commit_message: str = "Upload with persetrain push",
) -> str:
    """Create the repository (and branch) when missing and upload ``folder`` as one commit; return its URL."""
    token = token or require_token()
    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, repo_type=repo_type, exist_ok=True)
        commit = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type=repo_type,
            revision=revision,
            commit_message=commit_message,
        )
    except (HfHubHTTPError, httpx.TransportError) as err:
        # The client's message spans several lines (URL, request id, server text); the first says what failed.
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise HubError(
            f"pushing {folder} to {repo_type} repo {repo_id} on {api.endpoint} failed: {first_line}"
        ) from None
    return commit.commit_url


def push(
    path: str | os.PathLike,
    repo_id: str,
    *,
    dataset: bool = False,
    merge: bool = False,
    metrics: str | os.PathLike | None = None,
    recipe: str | os.PathLike | None = None,
    private: bool = False,
    revision: str | None = None,
    license: str = "apache-2.0",
    method: str | None = None,
    out: str | os.PathLike | None = None,
    dry_run: bool = False,
    endpoint: str | None = None,
) -> PushResult:
    """Build the upload folder for a checkpoint or a prepared dataset and (unless ``dry_run``) push it.

    The token is checked before any work, so a push without one fails at once; a dry run needs none.
    """
    path = Path(path)
    token = None if dry_run else require_token()
    repo_type = "dataset" if dataset else "model"
    folder = Path(out) if out is not None else Path("runs/push") / repo_id.replace("/", "__")
    if dataset:
        build_dataset_folder(path, folder, license=license, method=method)
    else:
        default = "rm" if is_reward_model(path if path.is_dir() else Path(".")) else "perse"
        build_model_folder(
            path, folder, merge=merge, metrics=metrics, recipe=recipe, license=license, method=method or default
        )
    url = (
        None
        if dry_run
        else push_folder(
            folder, repo_id, repo_type=repo_type, private=private, revision=revision, token=token, endpoint=endpoint
        )
    )
    return PushResult(folder=folder, repo_id=repo_id, repo_type=repo_type, commit_url=url)


def describe_folder(folder: Path) -> list[str]:
    """``path  size`` lines for every file of an upload folder, for the command's output."""
    return [f"{p.relative_to(folder)}  {p.stat().st_size:,} bytes" for p in sorted(folder.rglob("*")) if p.is_file()]
