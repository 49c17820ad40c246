"""``persetrain prepare preference``: preference datasets for reward models and yes/no verifiers.

Sources (``data_prep.preference.sources``) become groups: one context (a person and a request), its
options and the preferred one. Each group is written in three views, HF ``DatasetDict``s with
``train`` / ``validation`` splits under ``out``:

- ``listwise`` (task kind ``mcq``): one row per group, the options and ``gold``, for listwise training
  and for ``persetrain evaluate`` (the rows are valid ``McqExample`` records);
- ``pairs``: TRL ``RewardTrainer``'s standard format, ``prompt`` / ``chosen`` / ``rejected``, one row per
  (preferred, other) option pair, so a group of n options gives n - 1 rows;
- ``verifier``: TRL's conversational prompt-completion format for ``persetrain sft``, one row per option
  answered ``yes`` (the preferred one) or ``no``. Every row is kept, so ``no`` outnumbers ``yes``
  (3:1 on PrefEval); the card records the balance and training decides how to weigh it.

The reward model's context is ``rm_context`` and the verifier's prompt the ``VERIFIER`` template, the
same wording the ``rm`` and ``verifier`` evaluators use, and each view also holds the person-blind
form (``prompt_blind``) for the ablation. Everything is checked before anything is written; the
views are written to a temporary folder and renamed into place, so ``out`` never holds a mix.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from datasets import Dataset, DatasetDict

from data_prep.card import write_card
from data_prep.preference.card import VIEWS, build_info, readme
from data_prep.preference.sources import (
    TRAIN,
    VALIDATION,
    Group,
    SourceRead,
    perse_groups,
    prefeval_groups,
    reference_groups,
)
from persetrain.console import console, track
from persetrain.io import InputError, atomic_dir
from persetrain.prompts.perse import PROFILE_WORDS
from persetrain.prompts.preference import VERIFIER, VERIFIER_BLIND, rm_context
from persetrain.prompts.yes_no import YES_NO

SPLITS = (TRAIN, VALIDATION)


def listwise_row(group: Group) -> dict:
    """The group as an ``McqExample`` (``preference`` holds the person, ``question`` the request) plus contexts."""
    return {
        "id": group.id,
        "source": group.source,
        "topic": group.topic,
        "person_label": group.person_label,
        "preference": group.person,
        "question": group.request,
        "options": list(group.options),
        "gold": group.gold,
        "explanation": group.explanation,
        "prompt": rm_context(group.person, group.request, group.person_label),
        "prompt_blind": rm_context(None, group.request),
    }


def pair_rows(group: Group) -> list[dict]:
    """One row per option other than the preferred one: ``chosen`` is always ``options[gold]``."""
    base = {
        "group_id": group.id,
        "source": group.source,
        "topic": group.topic,
        "prompt": rm_context(group.person, group.request, group.person_label),
        "prompt_blind": rm_context(None, group.request),
        "chosen": group.options[group.gold],
    }
    return [
        {"id": f"{group.id}:{k}", **base, "rejected": option}
        for k, option in enumerate(group.options)
        if k != group.gold
    ]


def verifier_rows(group: Group) -> list[dict]:
    """One row per option: the VERIFIER question about it, answered ``yes`` for the preferred one, else ``no``."""
    rows = []
    for k, option in enumerate(group.options):
        label = YES_NO[0] if k == group.gold else YES_NO[1]
        prompt = VERIFIER.render(
            person_label=group.person_label, person=group.person, request=group.request, candidate=option
        )
        blind = VERIFIER_BLIND.render(request=group.request, candidate=option)
        rows.append(
            {
                "id": f"{group.id}:{k}",
                "group_id": group.id,
                "source": group.source,
                "topic": group.topic,
                "label": label,
                "person": group.person,
                "prompt": prompt.chat_messages(),
                "prompt_blind": blind.chat_messages(),
                "completion": [{"role": "assistant", "content": label}],
            }
        )
    return rows


def view_rows(groups: Sequence[Group]) -> dict[str, dict[str, list[dict]]]:
    """``{view: {split: rows}}`` for the three views, groups in the order given."""
    rows: dict[str, dict[str, list[dict]]] = {view: {split: [] for split in SPLITS} for view in VIEWS}
    for group in track(groups, description="preference rows"):
        rows["listwise"][group.split].append(listwise_row(group))
        rows["pairs"][group.split].extend(pair_rows(group))
        rows["verifier"][group.split].extend(verifier_rows(group))
    return rows


def _check_unique(reads: Sequence[SourceRead]) -> None:
    """Two groups with one id would be one question twice (a source given twice, or in two folders)."""
    owner: dict[str, str] = {}
    for read in reads:
        where = read.source.get("path") or ", ".join(read.source.get("paths", []))
        for group in read.groups:
            if group.id in owner:
                raise InputError(
                    where,
                    f"group {group.id!r} also comes from {owner[group.id]}; give each source once",
                    record=group.id,
                    field="id",
                )
            owner[group.id] = where


def _dataset_dict(rows: dict[str, list[dict]]) -> DatasetDict:
    """One schema for every split (an empty validation split included), taken from the train rows."""
    features = Dataset.from_list(rows[TRAIN]).features
    # ``from_list([])`` would drop the columns; an empty split still needs them.
    return DatasetDict(
        {
            split: Dataset.from_dict({k: [row[k] for row in r] for k in features}, features=features)
            for split, r in rows.items()
        }
    )


def write_views(
    rows: dict[str, dict[str, list[dict]]], out: Path, reads: Sequence[SourceRead], settings: dict
) -> dict[str, Path]:
    """Write every view with its ``README.md`` and ``build_info.json``; no view replaces its folder until all are
    written, so a failure leaves every previous view as it was."""
    sources = [read.source for read in reads]
    dropped = sum((read.dropped for read in reads), Counter())
    with contextlib.ExitStack() as folders:
        for view, by_split in rows.items():
            tmp = folders.enter_context(atomic_dir(out / view))
            # One shard per split: `datasets` saves an empty split (no held-out topic) as zero shards,
            # which it cannot load back; the views are small enough for one file each.
            _dataset_dict(by_split).save_to_disk(str(tmp), num_shards=dict.fromkeys(by_split, 1))
            info = build_info(view, by_split, sources, dropped, settings)
            write_card(tmp, info, readme(info))
    return {view: out / view for view in rows}


def read_prefeval_and_perse(
    prefeval: Sequence[str | Path],
    perse: Sequence[str | Path],
    holdout_topics: Sequence[str],
    seed: int,
    profile_items: int,
    profile_words: int,
    max_pairs_per_person: int | None,
    prefeval_columns: Mapping[str, str] | None,
) -> list[SourceRead]:
    """The PrefEval and PerSE sources, read the same way for the preference views and the verdict judges' data,
    once the settings are checked: held-out topics name PrefEval topics, and every size of how a person is shown
    (PerSE profiles, reference users) is at least 1."""
    if holdout_topics and not prefeval:
        raise ValueError("--holdout-topics names PrefEval topics; give --prefeval")
    if profile_items < 1 or profile_words < 1 or (max_pairs_per_person is not None and max_pairs_per_person < 1):
        raise ValueError("--profile-items, --profile-words and --max-pairs-per-person must be at least 1")
    reads = (
        [prefeval_groups([Path(p) for p in prefeval], list(holdout_topics), seed, prefeval_columns)] if prefeval else []
    )
    return reads + [perse_groups(Path(p), seed, profile_items, profile_words, max_pairs_per_person) for p in perse]


def prepare_preference(
    out: str | Path,
    prefeval: Sequence[str | Path] = (),
    perse: Sequence[str | Path] = (),
    reference: Sequence[str | Path] = (),
    holdout_topics: Sequence[str] = (),
    seed: int = 0,
    profile_items: int = 3,
    profile_words: int = PROFILE_WORDS,
    max_pairs_per_person: int | None = None,
    prefeval_columns: Mapping[str, str] | None = None,
) -> dict[str, Path]:
    """Read every source, build the three views and write ``out/listwise``, ``out/pairs``, ``out/verifier``.

    ``holdout_topics`` names PrefEval topics for the validation split (default none: every topic in
    train). ``profile_items`` / ``profile_words``: how many earlier items show a PerSE reviewer or a
    reference user, and the words kept of each. ``max_pairs_per_person`` caps a PerSE reviewer's pairs
    (a seeded sample; default all: a reviewer with n texts has up to n(n-1)/2). ``prefeval_columns``: the PrefEval
    items' keys for our fields (``--columns``).
    """
    if not (prefeval or perse or reference):
        raise ValueError("no source: give --prefeval, --perse and/or --reference")
    reads = read_prefeval_and_perse(
        prefeval, perse, holdout_topics, seed, profile_items, profile_words, max_pairs_per_person, prefeval_columns
    )
    reads += [reference_groups(Path(p), seed, profile_items, profile_words) for p in reference]
    _check_unique(reads)
    rows = view_rows([group for read in reads for group in read.groups])
    if not rows["listwise"][TRAIN]:
        raise InputError(out, "the train split would be empty: every group of the sources fell in validation")
    settings = {
        "seed": seed,
        "holdout_topics": list(holdout_topics),
        "profile_items": profile_items,
        "profile_words": profile_words,
        "max_pairs_per_person": max_pairs_per_person,
    }
    written = write_views(rows, Path(out), reads, settings)
    for view, path in written.items():
        sizes = {split: len(r) for split, r in rows[view].items()}
        console.print(f"[green]wrote[/green] {view} -> {path} {sizes}")
    return written
