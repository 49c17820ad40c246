"""The README.md cards a pushed judge or dataset carries: metadata for the Hub, then one section per question.

A model card says what the judge was trained from, on what, how, how it scored, how to use it and under which
terms; each section is its own function so that a section can change without reading the others. A dataset
card keeps the README ``persetrain prepare`` wrote and adds the Hub metadata and the method's citation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from huggingface_hub import DatasetCard, DatasetCardData, ModelCardData

from data_prep.licenses import License
from persetrain.hub.errors import HubError

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


def citation_section(method: str) -> str:
    """The ``## Citation`` section for ``method``; an unknown method is an error listing the known ones."""
    if method not in CITATIONS:
        raise HubError(f"unknown method '{method}' for the card's citation (known: {', '.join(CITATIONS)})")
    name, bibtex = CITATIONS[method]
    return f"## Citation\n\nThe method is {name}:\n\n```bibtex\n{bibtex}\n```\n"


# ------------------------------------------------------------------------------- model card sections
def _front_matter(*, adapter: bool, base_model: str | None, license: str, method: str, reward_model: bool) -> list[str]:
    # The Hub's metadata takes a repository id only; a local path or embedded spec stays in the text.
    hub_base = base_model if base_model and HUB_ID.match(base_model) and not Path(base_model).exists() else None
    data = ModelCardData(
        license=license,
        base_model=hub_base,
        library_name="peft" if adapter else "transformers",
        pipeline_tag="text-classification" if reward_model else "text-generation",
        tags=["persetrain", method, "personalized-evaluation"] + (["reward-model"] if reward_model else []),
    )
    return [f"---\n{data.to_yaml()}\n---", ""]


def _intro(*, method: str, adapter: bool, merged: bool) -> list[str]:
    what = (
        "a LoRA adapter"
        if adapter
        else "full weights (a LoRA adapter merged into its base)"
        if merged
        else "full weights"
    )
    return [
        f"# {method.upper()} judge",
        "",
        f"A personalized-evaluation judge trained with persetrain; this repository holds {what}.",
        "",
    ]


def _base_model_section(base_model: str | None) -> list[str]:
    return ["## Base model", "", f"`{base_model}`" if base_model else "_not recorded_", ""]


def _data_section(script: dict[str, Any]) -> list[str]:
    dataset_path = script.get("dataset_path")
    line = (
        f"Trained on `{dataset_path}` (split `{script.get('dataset_train_split', 'train')}`"
        + (f", {script['max_train_samples']} rows" if script.get("max_train_samples") else "")
        + ")."
        if dataset_path
        else "_not recorded_"
    )
    return ["## Data", "", line, ""]


def _recipe_section(training: dict[str, Any], model: dict[str, Any], recipe: Path | None) -> list[str]:
    lines = ["## Recipe", ""]
    settings = {k: training[k] for k in RECIPE_SETTINGS if k in training}
    settings.update({k: model[k] for k in ("use_peft", "lora_r", "lora_alpha") if model.get("use_peft")})
    if settings:
        lines += ["| setting | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in settings.items()] + [""]
    if recipe is not None:
        lines += [f"Recipe `{recipe.name}`:", "", "```yaml", recipe.read_text(encoding="utf-8").rstrip(), "```", ""]
    if not settings and recipe is None:
        lines += ["_not recorded_", ""]
    return lines


def _evaluation_section(metrics: dict[str, Any] | None, metrics_source: Path | None) -> list[str]:
    if metrics is None:
        return [
            "## Evaluation",
            "",
            "_No evaluation attached (pass `--metrics RUN/metrics.json` from `persetrain evaluate`)._",
            "",
        ]
    source = f"From `{metrics_source.name if metrics_source else 'metrics.json'}`"
    scope = f" ({metrics['n_examples']} examples, task `{metrics.get('kind')}`)" if "n_examples" in metrics else ""
    return ["## Evaluation", "", source + scope + ":", "", metrics_table(metrics), ""]


def _usage_section(*, adapter: bool, reward_model: bool) -> list[str]:
    if adapter:
        usage = ["# a PEFT adapter: `persetrain push --merge` pushes merged weights that load directly"]
    elif reward_model:
        usage = [
            "# a reward model: one scalar per (person + request, candidate), read by the `rm` evaluator",
            "# persetrain evaluate --evaluator rm --model <this repo id> --data DATA",
        ]
    else:
        usage = ["from persetrain.models import load_model", 'model, tokenizer = load_model("<this repo id>")']
    return ["## Usage", "", "```python", *usage, "```", ""]


def _license_section(license: str) -> list[str]:
    return ["## License", "", f"{license}. The base model's own license also applies.", ""]


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
    script, training, model = (resolved.get(k) or {} for k in ("script", "training", "model"))
    lines = [
        *_front_matter(
            adapter=adapter, base_model=base_model, license=license, method=method, reward_model=reward_model
        ),
        *_intro(method=method, adapter=adapter, merged=merged),
        *_base_model_section(base_model),
        *_data_section(script),
        *_recipe_section(training, model, recipe),
        *_evaluation_section(metrics, metrics_source),
        *_usage_section(adapter=adapter, reward_model=reward_model),
        citation_section(method),
        *_license_section(license),
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------- dataset card
def dataset_card(
    dataset: Path,
    info: dict[str, Any],
    splits: dict[str, Any],
    files: dict[str, str],
    *,
    license: License,
    method: str,
) -> str:
    """The README.md of a pushed dataset: ``prepare``'s README (or a title) with the Hub metadata added.

    ``splits`` maps each split to its rows, ``files`` to its Parquet path in the repository; the metadata
    gains the license, the Parquet ``configs``, the task and a ``synthetic`` tag where ``build_info`` says so.
    """
    readme = dataset / "README.md"
    card = (
        DatasetCard(readme.read_text(encoding="utf-8"))
        if readme.is_file()
        else DatasetCard(f"---\n{DatasetCardData().to_yaml()}\n---\n\n# {info.get('title', dataset.name)}\n")
    )
    data = card.data
    data.license = license.spdx
    if license.spdx == "other":  # the Hub shows these beside a licence of its own terms
        data.license_name, data.license_link = license.key or "other", license.link
    data.configs = [{"config_name": "default", "data_files": [{"split": s, "path": p} for s, p in files.items()]}]
    if info.get("task"):
        data.task = info["task"]
    if info.get("synthetic"):
        data.tags = sorted(set((data.get("tags") or []) + ["synthetic"]))
    body = card.text.rstrip() + "\n\n"
    if "## Splits" not in card.text:
        body += (
            "## Splits\n\n| split | rows |\n|---|---|\n"
            + "".join(f"| {s} | {len(r)} |\n" for s, r in splits.items())
            + "\n"
        )
    body += citation_section(method) + ("" if "## License" in card.text else "\n" + license.section())
    return f"---\n{data.to_yaml()}\n---\n\n{body.lstrip()}"
