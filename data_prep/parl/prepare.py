"""PARL data: negatives and the rubric-induction datasets.

The readers of the three layouts are ``data_prep.parl.readers``.

Negatives are files in the layout ``persetrain generate-baselines`` writes (JSON lines ``{id,
generator, output}``); every example needs one from every generator named. ``build_parl`` writes
the rubric-induction dataset: a ``DatasetDict`` (train / test by user) whose rows are
``RubricExample`` fields plus the columns the GRPO reward reads (``prompt`` messages, ``history_inputs``,
``history_outputs``, ``target_input``, ``ground_truth``, ``negatives``, ``negative_names``), and
verl's parquet layout (``verl/{train,test}.parquet``: ``prompt``, ``data_source``, ``ability``,
``reward_model.ground_truth``, ``extra_info.{metadata, profile, baseline}``).

*User negatives* (``user_negatives`` K > 0): every row also holds K other users' own target texts, drawn from
its split, with the inputs they answer (``user_negatives``, ``user_negative_inputs``, ``user_negative_ids``).
The generators' negatives are generic, so a rubric set separates a user from them by any rule a quirky writer
fits, and a judge that passes unfamiliar rules on any quirky text rewards such rules; a rule that also fits
other users' texts does not separate them. The PARL reward adds them to its margin product
(``persetrain.rewards.parl``). They are columns of their own: the ``negatives`` that the evaluator's Max-Diff
and ``prepare verifier`` read stay the generators', and the verl export carries those only.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from data_prep.licenses import AMAZON_REVIEWS, SYNTHETIC, combine, source_terms
from data_prep.parl.readers import HISTORY_SIZE, read_baselines, read_task
from persetrain.io import InputError, atomic_dir, write_json
from persetrain.prompts.parl import TASKS, check_task, induction_messages
from persetrain.schema import RubricExample

#: The licence of each PARL task's real source (``data_prep.parl.readers``): Amazon's reviews are Amazon's, the
#: Reddit posts and the news headlines are under their sources' own terms.
TASK_LICENSES = {
    "amazon": AMAZON_REVIEWS,
    "reddit": source_terms("Reddit posts"),
    "news": source_terms("news headlines"),
}


# ----------------------------------------------------------------------------------- negatives
def attach_baselines(examples: Sequence[RubricExample], files: Sequence[Path]) -> list[RubricExample]:
    """Every example with the negatives of every generator found in ``files``; a missing one is an error."""
    merged: dict[str, dict[str, str]] = defaultdict(dict)
    for path in files:
        for id, outputs in read_baselines(path).items():
            merged[id].update(outputs)
    generators = sorted({g for outputs in merged.values() for g in outputs})
    if not generators:
        raise InputError(
            files[0] if files else Path("."),
            "no negatives given: PARL needs the outputs of at least "
            "one generator per example (run `persetrain generate-baselines`)",
        )
    out = []
    for ex in examples:
        missing = [g for g in generators if g not in merged.get(ex.id, {})]
        if missing:
            raise InputError(
                files[0],
                f"example {ex.id!r} has no negative from {missing} (generators: {generators}); "
                "rerun `persetrain generate-baselines` to complete it",
                record=ex.id,
                field="generator",
            )
        out.append(ex.model_copy(update={"baselines": {g: merged[ex.id][g] for g in generators}}))
    return out


# ------------------------------------------------------------------------------------ datasets
def split_of(user_id: str, seed: int = 0, test_share: int = 4) -> str:
    """``test`` for one user in ``test_share`` (by a hash, so a user's split never changes), else ``train``."""
    return "test" if int(hashlib.sha256(f"{seed}:{user_id}".encode()).hexdigest(), 16) % test_share == 0 else "train"


def grpo_row(ex: RubricExample, others: Sequence[RubricExample] | None = None) -> dict:
    """A dataset row: the example's fields plus the prompt and the reward's columns; ``others``: the users
    whose target texts are its user negatives (module docstring; None: no such columns)."""
    names = sorted(ex.baselines)
    users = (
        {}
        if others is None
        else {
            "user_negatives": [o.output for o in others],
            "user_negative_inputs": [o.input for o in others],
            "user_negative_ids": [o.user_id for o in others],
        }
    )
    return {
        **ex.model_dump(mode="json"),
        "prompt": induction_messages(ex.task, [h.input for h in ex.history], [h.output for h in ex.history]),
        "history_inputs": [h.input for h in ex.history],
        "history_outputs": [h.output for h in ex.history],
        "target_input": ex.input,
        "ground_truth": ex.output,
        "negatives": [ex.baselines[n] for n in names],
        "negative_names": names,
        **users,
    }


def draw_user_negatives(rows: Sequence[RubricExample], k: int, seed: int) -> list[list[RubricExample]]:
    """For each example of a split, ``k`` other users' examples of the same split, drawn per example id."""
    return [
        random.Random(f"{seed}:user-negatives:{ex.id}").sample([o for o in rows if o.user_id != ex.user_id], k)
        for ex in rows
    ]


def verl_row(ex: RubricExample, split: str, index: int) -> dict:
    """verl's RL dataset layout, as the public PARL recipe reads it (``persetrain.rewards.parl_verl``)."""
    return {
        "data_source": f"parl/{ex.task}",
        "prompt": induction_messages(ex.task, [h.input for h in ex.history], [h.output for h in ex.history]),
        "ability": "personalized_rubrics",
        "reward_model": {"style": "rule", "ground_truth": ex.output},
        "extra_info": {
            "split": split,
            "index": index,
            "id": ex.id,
            "user_id": ex.user_id,
            "metadata": ex.input,
            "profile": [h.model_dump() for h in ex.history],
            "baseline": dict(ex.baselines),
        },
    }


def build_parl(
    examples: Sequence[RubricExample],
    out_dir: Path,
    seed: int = 0,
    sources: dict | None = None,
    synthetic: bool = False,
    user_negatives: int = 0,
) -> dict[str, int]:
    """Write the dataset (train / test by user) and its verl parquet files; return the split sizes.
    ``user_negatives``: other users' texts per row, from its split (module docstring)."""
    import pandas as pd
    from datasets import Dataset, DatasetDict

    splits: dict[str, list[RubricExample]] = {"train": [], "test": []}
    for ex in examples:
        splits[split_of(ex.user_id, seed)].append(ex)
    for name, rows in splits.items():
        if not rows:
            raise InputError(
                out_dir, f"split {name!r} would be empty ({len(examples)} users in all); more users are needed"
            )
        if user_negatives and (users := len({ex.user_id for ex in rows})) <= user_negatives:
            raise InputError(
                out_dir,
                f"user_negatives {user_negatives} needs more than {user_negatives} users in every split; split "
                f"{name!r} has {users}",
            )
    others = {
        s: draw_user_negatives(rows, user_negatives, seed) if user_negatives else [None] * len(rows)
        for s, rows in splits.items()
    }
    with atomic_dir(out_dir) as tmp:
        DatasetDict(
            {
                s: Dataset.from_list([grpo_row(ex, o) for ex, o in zip(rows, others[s], strict=True)])
                for s, rows in splits.items()
            }
        ).save_to_disk(str(tmp))
        (tmp / "verl").mkdir()
        for s, rows in splits.items():
            pd.DataFrame([verl_row(ex, s, i) for i, ex in enumerate(rows)]).to_parquet(tmp / "verl" / f"{s}.parquet")
        sizes = {s: len(rows) for s, rows in splits.items()}
        write_json(
            tmp / "build_info.json",
            {
                "task": "rubric",
                "parl_task": sorted({ex.task for ex in examples}),
                "synthetic": synthetic,
                "seed": seed,
                "splits": sizes,
                "generators": sorted({g for ex in examples for g in ex.baselines}),
                "user_negatives": user_negatives,
                "history_size": max(len(ex.history) for ex in examples),
                "sources": sources or {},
                **(SYNTHETIC if synthetic else combine(TASK_LICENSES[ex.task] for ex in examples)).info(),
                "split_rule": "test when int(sha256(f'{seed}:{user_id}'), 16) % 4 == 0",
            },
        )
    return sizes


def prepare_parl(
    raw_dir: Path,
    out_dir: Path,
    tasks: Sequence[str] = TASKS,
    baselines: Sequence[Path] = (),
    seed: int = 0,
    min_history: int = 1,
    history_size: int = HISTORY_SIZE,
    user_negatives: int = 0,
    columns: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, dict[str, int]]:
    """Read every task in ``raw_dir/<task>/`` (``columns``: ``--columns``, ``readers.PARL_TABLES``), attach negatives,
    write ``out_dir/parl_<task>``.

    Negatives come from ``baselines`` files, or by default from ``raw_dir/<task>/baselines.jsonl``
    (the sample data ships synthetic ones; ``generate-baselines`` writes real ones there too).
    ``user_negatives``: other users' texts per row (module docstring).
    """
    truth = raw_dir / "ground_truth.json"
    synthetic = truth.is_file() and bool(json.loads(truth.read_text(encoding="utf-8")).get("synthetic"))
    for task in tasks:
        check_task(task)  # every task before the first is written
    written = {}
    for task in tasks:
        folder = raw_dir / task
        examples = read_task(folder, task, min_history=min_history, history_size=history_size, columns=columns)
        files = list(baselines) or [folder / "baselines.jsonl"]
        for f in files:
            if not f.is_file():
                raise InputError(f, "missing negatives file (write it with `persetrain generate-baselines`)")
        examples = attach_baselines(examples, files)
        sources = {"raw": str(folder), "baselines": [str(f) for f in files]}
        written[task] = build_parl(
            examples,
            out_dir / f"parl_{task}",
            seed=seed,
            sources=sources,
            synthetic=synthetic,
            user_negatives=user_negatives,
        )
    return written
