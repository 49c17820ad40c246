"""The exact folder a repository receives, built locally so that ``persetrain push --dry-run`` can stop there.

A model folder holds the serving files of a checkpoint (or the merged weights) and its card; a dataset folder
holds one Parquet file per split, the Hub's native layout that ``load_dataset(repo)`` reads, and its card.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from data_prep.licenses import License
from persetrain.adapters import is_reward_model, merge_adapter
from persetrain.hub.cards import dataset_card, model_card
from persetrain.hub.checkpoint import RESOLVED_CONFIG, check_upload_folder, checkpoint_kind, link_model_files
from persetrain.hub.errors import HubError
from persetrain.io import InputError, atomic_dir, read_json
from persetrain.saved import load_prepared


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
    resolved = read_json(checkpoint / RESOLVED_CONFIG) or read_json(checkpoint.parent / RESOLVED_CONFIG)
    # The spec the run was given (a Hub id, embedded:NAME) names the base in the card; the adapter's own
    # record (the local weights it was trained on) is what a merge loads.
    adapter_base = read_json(checkpoint / "adapter_config.json").get("base_model_name_or_path")
    spec = (resolved.get("model") or {}).get("model_name_or_path")
    base = adapter_base or spec
    if merge and not base:
        raise InputError(checkpoint / "adapter_config.json", "no base_model_name_or_path to merge the adapter into")

    check_upload_folder(out, checkpoint)
    card = model_card(
        kind=kind,
        merged=merge,
        base_model=spec or base,
        resolved=resolved,
        recipe=recipe_path,
        metrics=read_json(metrics_path) if metrics_path.is_file() else None,
        metrics_source=metrics_path,
        license=license,
        method=method,
        reward_model=is_reward_model(checkpoint),
    )
    # Built whole, then renamed into place: a push killed mid-merge leaves the previous folder, not half of one.
    with atomic_dir(out) as tmp:
        if merge:
            merge_adapter(checkpoint, base, tmp)
        else:
            link_model_files(checkpoint, tmp)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out


def dataset_license(dataset: Path, info: dict, given: str | None) -> License:
    """The licence a pushed dataset's card carries: the one its ``build_info.json`` records from its sources, which
    ``--license`` cannot change (Amazon's reviews stay Amazon's whatever the flag says); ``given`` only for a dataset
    that records none."""
    recorded = License.from_info(info)
    where = dataset / "build_info.json"
    if recorded is None:
        if given is None:
            raise InputError(
                where, "records no licence for the data: give its sources' licence with --license", field="license"
            )
        return License(given, given)
    if given is not None and given != recorded.spdx:
        raise InputError(
            where,
            f"the data is under {recorded.spdx} ({recorded.name}), its sources' licence; --license {given} cannot "
            "change it",
            field="license",
        )
    return recorded


def build_dataset_folder(
    dataset: str | os.PathLike, out: str | os.PathLike, *, license: str | None = None, method: str | None = None
) -> Path:
    """Write the folder a dataset repository receives: one Parquet file per split and the README.md card.

    The card keeps the README ``persetrain prepare`` wrote (sources, filters, settings, the synthetic-data
    note) and adds the Hub metadata: license (the sources', :func:`dataset_license`), the Parquet ``configs``, the
    task, and the method's citation.
    """
    dataset, out = Path(dataset), Path(out)
    splits = dict(load_prepared(dataset, "persetrain prepare", lone=True))
    info = read_json(dataset / "build_info.json")
    method = method or ("parl" if "parl" in str(info.get("name", "")) else "perse")

    check_upload_folder(out, dataset)
    files = {split: f"data/{split}-00000-of-00001.parquet" for split in splits}
    card = dataset_card(dataset, info, splits, files, license=dataset_license(dataset, info, license), method=method)
    with atomic_dir(out) as tmp:
        (tmp / "data").mkdir()
        for split, rows in splits.items():
            rows.to_parquet(str(tmp / files[split]))
        for extra in ("build_info.json", "dataset.json"):
            if (dataset / extra).is_file():
                shutil.copy2(dataset / extra, tmp / extra)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return out
