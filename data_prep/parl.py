"""PARL data: readers for the three task layouts, negatives, and the rubric-induction datasets.

Readers turn each layout into ``persetrain.schema.RubricExample`` records, one per user: the user's
most recent item is the target and the history is up to ``history_size`` (10) latest earlier items,
oldest first. Layouts (documented with their fields in ``data_prep/README.md``):

* ``amazon`` — Amazon Reviews 2023: ``reviews.jsonl`` (``user_id``, ``parent_asin``, ``timestamp``,
  ``rating``, ``title``, ``text``) + ``meta.jsonl`` (``parent_asin``, ``title``, ``description``);
  the task input is the item's title and description, the rating and the review title.
* ``reddit`` — LongLaMP topic writing: JSON lines ``{name, input (summary), output (content),
  profile: [{summary, content}]}``, profile oldest first.
* ``news`` — LaMP-4: ``questions.json`` (``[{id, input: "Generate a headline for the following
  article: ...", profile: [{text, title}]}]``) + ``outputs.json`` (``{golds: [{id, output}]}``).

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
from collections.abc import Sequence
from pathlib import Path

from persetrain.io import InputError, atomic_dir, iter_jsonl, parse_record, write_json
from persetrain.prompts.parl import TASKS, induction_messages
from persetrain.schema import RubricExample

HISTORY_SIZE = 10
LAMP4_PREFIX = "Generate a headline for the following article: "
#: Files of each layout, relative to the task's folder.
LAYOUT_FILES: dict[str, tuple[str, ...]] = {
    "amazon": ("reviews.jsonl", "meta.jsonl"),
    "reddit": ("topic_writing.jsonl",),
    "news": ("questions.json", "outputs.json"),
}


def _text(path: Path, line: int | str, record: dict, field: str, required: bool = True) -> str:
    value = record.get(field)
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InputError(path, "missing or empty", record=line, field=field)
        return ""
    if not isinstance(value, str | int | float):
        raise InputError(path, f"expected text, got {type(value).__name__}", record=line, field=field)
    return str(value).strip()


def _example(
    task: str,
    user: str,
    id: str,
    items: list[tuple[str, str]],
    path: Path,
    line: int | str,
    field: str,
    min_history: int,
    history_size: int,
) -> RubricExample:
    """The example of one user from items oldest first (the last one is the target)."""
    history = items[:-1][-history_size:]
    if len(history) < min_history:
        raise InputError(
            path,
            f"user {user!r} has {len(history)} earlier items; at least {min_history} are "
            "required (lower --min-history or drop the user)",
            record=line,
            field=field,
        )
    return parse_record(
        RubricExample,
        {
            "id": id,
            "task": task,
            "user_id": user,
            "input": items[-1][0],
            "output": items[-1][1],
            "history": [{"input": i, "output": o} for i, o in history],
        },
        path,
        line,
    )


def amazon_input(item_title: str, description: str, rating: str, review_title: str) -> str:
    return f"Item title: {item_title}\nItem description: {description}\nRating: {rating}\nReview title: {review_title}"


def read_amazon(
    reviews_path: Path, meta_path: Path, min_history: int = 1, history_size: int = HISTORY_SIZE
) -> list[RubricExample]:
    meta: dict[str, tuple[str, str]] = {}
    for line, rec in iter_jsonl(meta_path):
        asin = _text(meta_path, line, rec, "parent_asin")
        meta.setdefault(
            asin, (_text(meta_path, line, rec, "title"), _text(meta_path, line, rec, "description", required=False))
        )
    by_user: dict[str, list[tuple[float, int, str, str]]] = defaultdict(list)
    for line, rec in iter_jsonl(reviews_path):
        user = _text(reviews_path, line, rec, "user_id")
        asin = _text(reviews_path, line, rec, "parent_asin")
        if asin not in meta:
            raise InputError(reviews_path, f"item {asin!r} is not in {meta_path}", record=line, field="parent_asin")
        try:
            stamp = float(rec.get("timestamp"))
        except (TypeError, ValueError):
            raise InputError(reviews_path, "expected a number", record=line, field="timestamp") from None
        title, description = meta[asin]
        rating = _text(reviews_path, line, rec, "rating")
        rating = rating[:-2] if rating.endswith(".0") else rating
        item_input = amazon_input(title, description, rating, _text(reviews_path, line, rec, "title", required=False))
        by_user[user].append((stamp, line, item_input, _text(reviews_path, line, rec, "text")))
    examples = []
    for user, items in by_user.items():
        items.sort()
        examples.append(
            _example(
                "amazon",
                user,
                f"amazon:{user}",
                [(i, o) for _, _, i, o in items],
                reviews_path,
                items[-1][1],
                "user_id",
                min_history,
                history_size,
            )
        )
    return examples


def read_longlamp(path: Path, min_history: int = 1, history_size: int = HISTORY_SIZE) -> list[RubricExample]:
    examples = []
    for line, rec in iter_jsonl(path):
        user = _text(path, line, rec, "name")
        profile = rec.get("profile")
        if not isinstance(profile, list):
            raise InputError(path, "expected a list of {summary, content} items", record=line, field="profile")
        items = [
            (_text(path, line, p, "summary"), _text(path, line, p, "content"))
            if isinstance(p, dict)
            else _bad_item(path, line, "profile")
            for p in profile
        ]
        items.append((_text(path, line, rec, "input"), _text(path, line, rec, "output")))
        examples.append(
            _example("reddit", user, f"reddit:{user}", items, path, line, "profile", min_history, history_size)
        )
    return examples


def _bad_item(path: Path, line: int | str, field: str):
    raise InputError(path, "every item must be an object", record=line, field=field)


def _load_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "missing file") from None
    except json.JSONDecodeError as err:
        raise InputError(path, f"not valid JSON ({err.msg})", record=err.lineno) from None


def read_lamp4(
    questions_path: Path, outputs_path: Path, min_history: int = 1, history_size: int = HISTORY_SIZE
) -> list[RubricExample]:
    questions, outputs = _load_json(questions_path), _load_json(outputs_path)
    if not isinstance(questions, list):
        raise InputError(questions_path, "expected a JSON list of questions")
    golds = outputs.get("golds") if isinstance(outputs, dict) else None
    if not isinstance(golds, list):
        raise InputError(outputs_path, 'expected {"golds": [{"id", "output"}, ...]}', field="golds")
    gold = {str(g.get("id")): g.get("output") for g in golds if isinstance(g, dict)}
    examples = []
    for n, rec in enumerate(questions):
        where = f"question {n}"
        if not isinstance(rec, dict):
            raise InputError(questions_path, "expected an object", record=where)
        qid = _text(questions_path, where, rec, "id")
        article = _text(questions_path, where, rec, "input").removeprefix(LAMP4_PREFIX)
        if not isinstance(gold.get(qid), str) or not gold[qid].strip():
            raise InputError(outputs_path, f"no headline for question {qid!r}", record=qid, field="output")
        profile = rec.get("profile")
        if not isinstance(profile, list):
            raise InputError(questions_path, "expected a list of {text, title} items", record=where, field="profile")
        if all(isinstance(p, dict) and "date" in p for p in profile):
            profile = sorted(profile, key=lambda p: str(p["date"]))
        items = [
            (_text(questions_path, where, p, "text"), _text(questions_path, where, p, "title"))
            if isinstance(p, dict)
            else _bad_item(questions_path, where, "profile")
            for p in profile
        ]
        items.append((article, gold[qid].strip()))
        user = str(rec.get("user_id") or qid)
        examples.append(
            _example("news", user, f"news:{qid}", items, questions_path, where, "profile", min_history, history_size)
        )
    return examples


def read_task(folder: Path, task: str, min_history: int = 1, history_size: int = HISTORY_SIZE) -> list[RubricExample]:
    """The examples of ``task`` from its layout's files in ``folder``."""
    paths = [folder / name for name in LAYOUT_FILES[task]]
    for p in paths:
        if not p.is_file():
            raise InputError(p, f"missing: the {task} layout needs {', '.join(LAYOUT_FILES[task])}")
    reader = {"amazon": read_amazon, "reddit": read_longlamp, "news": read_lamp4}[task]
    return reader(*paths, min_history=min_history, history_size=history_size)


# ----------------------------------------------------------------------------------- negatives
def read_baselines(path: Path) -> dict[str, dict[str, str]]:
    """``{example id: {generator: text}}`` from a file ``generate-baselines`` wrote."""
    found: dict[str, dict[str, str]] = defaultdict(dict)
    for line, rec in iter_jsonl(path):
        found[_text(path, line, rec, "id")][_text(path, line, rec, "generator")] = _text(path, line, rec, "output")
    return found


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
) -> dict[str, dict[str, int]]:
    """Read every task in ``raw_dir/<task>/``, attach negatives, write ``out_dir/parl_<task>``.

    Negatives come from ``baselines`` files, or by default from ``raw_dir/<task>/baselines.jsonl``
    (the sample data ships synthetic ones; ``generate-baselines`` writes real ones there too).
    ``user_negatives``: other users' texts per row (module docstring).
    """
    truth = raw_dir / "ground_truth.json"
    synthetic = truth.is_file() and bool(json.loads(truth.read_text(encoding="utf-8")).get("synthetic"))
    written = {}
    for task in tasks:
        if task not in TASKS:
            raise ValueError(f"unknown PARL task {task!r}; expected one of {TASKS}")
        folder = raw_dir / task
        examples = read_task(folder, task, min_history=min_history, history_size=history_size)
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
