"""``persetrain prepare verdict``: verdict prompts with their gold verdict, for a judge trained by GRPO on its own
verdicts (the ``verdict-*`` rewards of ``persetrain.rewards.verdict``).

A judge rewarded for the right letter can earn much of that reward by favouring a position, so every multiple-choice
question (an *item*) is written in several orders of its options (``orders``, its *order variants*): variant 0 is the
group's own order (for PrefEval the order ``persetrain evaluate`` shows), variant 1 its reverse, further ones its
rotations, seeded so that the gold lands on positions the first two leave out (:func:`orders_of`). The variants of
an item share ``item_id`` and differ in ``order``, which is what ``verdict-consistent`` groups by: it pays only a judge
that is right in every order.

Rows are shuffled by item (``random.Random(seed)``), the variants of an item kept ADJACENT and in variant order.
GRPO trains on this data with ``shuffle_dataset: false``, so that one step holds every order of an item; a
shuffled dataloader would scatter them and leave the consistency reward nothing to compare.

Sources, read by ``data_prep.preference.sources`` so the splits are those of ``prepare preference`` (PrefEval topics
held out whole, PerSE reviewers person-disjoint):

- PrefEval (``--prefeval``): ``choice_request``, which in ``verdict`` mode is exactly ``mcq-letter``'s prompt, so the
  trained judge is measured by ``mcq-letter`` as any model is;
- PerSE (``--perse``): ``pair_request``, a reviewer shown by their past reviews and two plots;
- verifier datasets (``--verifier``, ``persetrain prepare verifier`` output, or the ``verifier`` view of ``persetrain
  prepare preference``): yes / no checks in their own prompt (``yes_no_request``), their train / validation split
  kept. A check alone is an item of one variant; rows that share a ``group_id`` (the preference view: one question,
  one row per candidate) are one item whose variants are its candidates, so ``verdict-consistent`` pays only a judge
  right on every candidate of the question: "no" to everything, right on three rows of four, earns nothing there.

Every row has every column (one schema, :data:`FEATURES`); yes / no rows hold empty choice columns. Everything is
checked before anything is written, and the dataset goes through a temporary folder renamed into place, so ``out``
never holds a half-written dataset.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import chain, permutations
from pathlib import Path

from datasets import Dataset, DatasetDict, Features, List, Value

from data_prep.card import write_card
from data_prep.preference.prepare import listwise_row, read_prefeval_and_perse
from data_prep.preference.sources import (
    TRAIN,
    VALIDATION,
    Group,
    is_synthetic,
)
from data_prep.verdict.card import build_info, readme
from persetrain.console import console, track
from persetrain.io import InputError, atomic_dir, write_json
from persetrain.person import other_persons
from persetrain.prompts.mcq_letter import LETTERS
from persetrain.prompts.perse import PROFILE_WORDS
from persetrain.prompts.verdict import (
    check_mode,
    choice_request,
    pair_request,
    prompt_messages,
    yes_no_request,
)
from persetrain.prompts.yes_no import YES_NO
from persetrain.saved import load_prepared

SPLITS = (TRAIN, VALIDATION)
#: Where the validation topics' questions (an ``mcq`` dataset) go inside the judge dataset: a yes / no row holds one
#: candidate, not its question, and the evaluator that judges each checkpoint of a GRPO run
#: (``validation_evaluator``) reads whole questions.
QUESTIONS_DIR = "questions"
#: The ``source`` of the rows read from a verifier dataset.
VERIFIER_SOURCE = "parl-verifier"

_MESSAGES = List({"role": Value("string"), "content": Value("string")})
#: The one schema of every row and split (an empty split or a split of yes / no rows only keeps every column).
FEATURES = Features(
    {
        "id": Value("string"),
        "item_id": Value("string"),
        "order": List(Value("int64")),
        "n_orders": Value("int64"),
        "source": Value("string"),
        "topic": Value("string"),
        "kind": Value("string"),
        "mode": Value("string"),
        "verdicts": List(Value("string")),
        "gold": Value("string"),
        "prompt": _MESSAGES,
        "prompt_blind": _MESSAGES,
        "preference": Value("string"),
        "question": Value("string"),
        "options": List(Value("string")),
        "gold_index": Value("int64"),
    }
)

#: ``(where the item came from, its split, its variants' rows)``.
Item = tuple[str, str, list[dict]]


def orders_of(n: int, gold: int, orders: int, key: str) -> list[tuple[int, ...]]:
    """``min(orders, n!)`` distinct orders of ``n`` options, ``order[p]`` the option shown at position ``p``.

    The group's own order, its reverse, its rotations (shuffled by ``key``, those that show ``gold`` at a position
    the first two do not before the others, so the gold letter spreads over positions), then any other
    permutation: a set with more orders than an item has rotations still gets distinct ones.
    """
    own = tuple(range(n))
    rotations = [own[r:] + own[:r] for r in range(1, n)]
    random.Random(key).shuffle(rotations)
    covered = {gold, n - 1 - gold}
    rotations.sort(key=lambda order: order.index(gold) in covered)
    found: list[tuple[int, ...]] = []
    for order in chain([own, own[::-1]], rotations, permutations(own)):
        if order not in found:
            found.append(order)
            if len(found) == orders:
                break
    return found


def choice_rows(group: Group, mode: str, orders: int, seed: int) -> list[dict]:
    """The order variants of one group, in variant order: PrefEval's with ``choice_request``, others'
    (a person shown by a profile) with ``pair_request``."""
    variants = orders_of(len(group.options), group.gold, orders, f"{seed}:{group.id}")
    rows = []
    for k, order in enumerate(variants):
        options = [group.options[i] for i in order]
        if group.source == "prefeval":
            request = choice_request(group.person, group.request, options, mode)
            blind = choice_request("", group.request, options, mode)
        else:
            request = pair_request(group.person_label, group.person, group.request, options, mode)
            blind = pair_request(group.person_label, "", group.request, options, mode)
        gold_index = order.index(group.gold)
        rows.append(
            {
                "id": f"{group.id}:o{k}",
                "item_id": group.id,
                "order": list(order),
                "n_orders": len(variants),
                "source": group.source,
                "topic": group.topic,
                "kind": "choice",
                "mode": mode,
                "verdicts": list(LETTERS[: len(options)]),
                "gold": LETTERS[gold_index],
                "prompt": prompt_messages(request),
                "prompt_blind": prompt_messages(blind),
                "preference": group.person,
                "question": group.request,
                "options": options,
                "gold_index": gold_index,
            }
        )
    return rows


def _messages(folder: Path, item_id: str, row: dict, field: str) -> list[dict]:
    """A conversational prompt column's messages, refused in one line when it is something else."""
    value = row[field]
    if not (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value
        )
    ):
        raise InputError(
            folder, "expected conversational messages, a list of {role, content}", record=item_id, field=field
        )
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _gold(row: dict) -> object:
    """A verifier row's gold verdict: its completion's last message's content (or the completion as it is)."""
    completion = row["completion"]
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return completion[-1].get("content")
    return completion


def yes_no_row(folder: Path, item_id: str, row: dict, mode: str, variant: int | None = None, n: int = 1) -> dict:
    """A verifier row as a yes / no variant: its own prompt (``yes_no_request``), its completion the gold.

    ``variant``: the row's candidate index within its group (``order`` ``[variant]``), of ``n``; None for a check
    alone (``order`` ``[]``)."""
    gold = _gold(row)
    record = str(row["id"]) if "id" in row else item_id
    if gold not in YES_NO:
        raise InputError(
            folder,
            f"the completion is {gold!r}; a yes / no check's is 'yes' or 'no'",
            record=record,
            field="completion",
        )
    prompt = _messages(folder, record, row, "prompt")
    blind = _messages(folder, record, row, "prompt_blind") if "prompt_blind" in row else prompt
    return {
        "id": f"{item_id}:o{variant or 0}",
        "item_id": item_id,
        "order": [] if variant is None else [variant],
        "n_orders": n,
        "source": f"{row['source']}-verifier" if row.get("source") else VERIFIER_SOURCE,
        "topic": row.get("topic") or row.get("task") or "parl",
        "kind": "yes-no",
        "mode": mode,
        "verdicts": list(YES_NO),
        "gold": gold,
        "prompt": prompt_messages(yes_no_request(prompt, mode)),
        "prompt_blind": prompt_messages(yes_no_request(blind, mode)),
        "preference": "",
        "question": "",
        "options": [],
        "gold_index": -1,
    }


def balanced(variants: list[dict], key: str) -> list[dict]:
    """A yes / no group's "yes" candidates and as many of its "no" ones, drawn by ``key``, in candidate order.

    Why: in GRPO every prompt's group pulls on the same weights, so PrefEval's three "no" candidates a question pull
    three times as hard towards "no" as its one "yes" pulls back; the judge measured answering "no" everywhere
    within 20 steps, and then every group is all-wrong or all-right, without gradient."""
    yes = [v for v in variants if v["gold"] == YES_NO[0]]
    no = [v for v in variants if v["gold"] != YES_NO[0]]
    kept = {v["id"] for v in yes + random.Random(key).sample(no, min(len(yes), len(no)))}
    return [{**v, "n_orders": len(kept)} for v in variants if v["id"] in kept]


def swapped_person_variant(folder: Path, yes: dict, person: str, other: str, variant: int) -> dict:
    """The item's "yes" variant (``yes``, whose prompt shows ``person``) shown to ``other`` (another user's person),
    its gold "no": the same text, right for one person and not for another, so only a judge that reads the person
    earns it.

    Why: judged with the person removed, the verdict judge scores as well as with it (it tells PrefEval's preferred
    candidate from the others by the candidates alone); nothing in its verdict-correct reward pays for reading the
    person. The person is the row's ``person`` column (the verifier view of ``persetrain prepare preference``
    writes it), replaced in the variant's prompt. The "no" is an approximation: the candidate was written for its
    own user's preference, and may happen to meet the other's too (a Thai dish without nuts, shown to a user who
    avoids caffeine)."""
    if not any(person in m["content"] for m in yes["prompt"]):
        raise InputError(folder, "the person text is not in the prompt's messages", record=yes["id"], field="person")
    return {
        **yes,
        "id": f"{yes['item_id']}:swap",
        "order": [variant],
        "gold": YES_NO[1],
        "prompt": [{**m, "content": m["content"].replace(person, other, 1)} for m in yes["prompt"]],
    }


def swap_draws(folder: Path, split: str, groups: dict[str, list[dict]], seed: int) -> dict[str, tuple[dict, str]]:
    """``{item: (its "yes" row, the other person it is shown to)}`` for every group of a split with a "yes" row:
    persons of the same split only, so no validation person is shown in training."""
    yes_rows = {
        item: row for item, rows in groups.items() if (row := next((r for r in rows if _gold(r) == YES_NO[0]), None))
    }
    for item, row in yes_rows.items():
        if not isinstance(row.get("person"), str) or not row["person"].strip():
            raise InputError(
                folder,
                "swapped-person rows need the person text (persetrain prepare preference's verifier view writes it)",
                record=str(row.get("id", item)),
                field="person",
            )
    if not yes_rows:
        return {}
    try:
        drawn = other_persons(
            [r["person"] for r in yes_rows.values()], [r.get("topic") or "" for r in yes_rows.values()], seed
        )
    except ValueError as e:
        raise InputError(folder, f"the {split} split: {e}", field="person") from None
    return {item: (row, mine[0]) for (item, row), mine in zip(yes_rows.items(), drawn, strict=True)}


def verifier_items(
    folder: Path, mode: str, balance: bool = False, seed: int = 0, swap_persons: bool = False
) -> tuple[list[Item], dict]:
    """Every row of a verifier dataset as a yes / no variant, grouped into items by ``group_id`` when the dataset has
    one (else each row an item), in the split it is in; and the source's card. ``balance``: each group keeps as
    many "no" candidates as "yes" ones (:func:`balanced`, seeded by ``seed``). ``swap_persons``: each group also
    gets its "yes" candidate under another person of its split (the same topic first,
    :func:`persetrain.person.other_persons`), gold "no" (:func:`swapped_person_variant`): one more of its "no"
    candidates, which ``balance`` draws as often as any other. Added beside a balanced pair instead, it made the
    "no" golds two of three, and the judge answered "no" to everything within 40 steps (as unbalanced PrefEval
    questions do)."""
    data = load_prepared(folder, "persetrain prepare verifier")
    if set(data) - set(SPLITS):
        raise InputError(folder, f"has the splits {list(data)}; expected train and/or validation", field="split")
    items: list[Item] = []
    for split in data:
        dataset = data[split]
        for field in ("prompt", "completion"):
            if field not in dataset.column_names:
                raise InputError(folder, f"no such column in the {split} split; is it a verifier dataset?", field=field)
        groups: dict[str, list[dict]] = {}
        for i, row in enumerate(track(dataset, description=f"yes / no rows {folder.name}/{split}")):
            item_id = str(row["id"]) if "id" in row else f"{folder.name}:{split}:{i}"
            if "group_id" in row:
                groups.setdefault(str(row["group_id"]), []).append(row)
            else:
                items.append((str(folder), split, [yes_no_row(folder, item_id, row, mode)]))
        others = swap_draws(folder, split, groups, seed) if swap_persons else {}
        for item_id, rows in groups.items():
            n = len(rows) + (item_id in others)
            variants = [yes_no_row(folder, item_id, row, mode, k, n) for k, row in enumerate(rows)]
            if item_id in others:
                yes_row, other = others[item_id]
                yes = variants[rows.index(yes_row)]
                variants.append(swapped_person_variant(folder, yes, yes_row["person"], other, len(rows)))
            items.append((str(folder), split, balanced(variants, f"{seed}:{item_id}") if balance else variants))
    source = {
        "kind": VERIFIER_SOURCE,
        "path": str(folder),
        "synthetic": is_synthetic(folder),
        "license": "as the source dataset's",
    }
    return items, source


#: The columns of a validation question (``McqExample``'s), as ``persetrain evaluate`` reads them.
QUESTION_FIELDS = ("id", "topic", "preference", "question", "options", "gold", "explanation")


def group_question(group: Group) -> dict:
    """A PrefEval group as the ``mcq`` question the evaluators judge, its options in the group's own order: the
    ``McqExample`` columns of the preference data's listwise row, so the two views cannot drift apart."""
    return {key: value for key, value in listwise_row(group).items() if key in QUESTION_FIELDS}


def listwise_questions(verifier: Path, item_ids: set[str]) -> list[dict]:
    """The questions of ``item_ids`` from the ``listwise`` view beside a ``prepare preference`` verifier view (the
    same groups, one row per question); none when ``verifier`` has no such sibling."""
    listwise = verifier.parent / "listwise"
    if not (listwise / "build_info.json").is_file():
        return []
    data = load_prepared(listwise, "persetrain prepare preference")
    return [
        {field: row.get(field, "") for field in QUESTION_FIELDS}
        for split in data
        for row in data[split]
        if str(row["id"]) in item_ids
    ]


def _check_unique(items: Sequence[Item]) -> None:
    """``verdict-consistent`` groups rows by ``item_id``: two items with one id would be compared as one question."""
    owner: dict[str, str] = {}
    for where, _, rows in items:
        item_id = rows[0]["item_id"]
        if item_id in owner:
            raise InputError(
                where, f"item {item_id!r} also comes from {owner[item_id]}; give each source once", field="id"
            )
        owner[item_id] = where


def shuffled(items: Sequence[Item], seed: int) -> dict[str, list[dict]]:
    """Per split, the items in a seeded order, each item's variants adjacent and in variant order."""
    rng = random.Random(seed)
    rows = {}
    for split in SPLITS:
        mine = [variants for _, item_split, variants in items if item_split == split]
        rng.shuffle(mine)
        rows[split] = [row for variants in mine for row in variants]
    return rows


def prepare_verdict(
    out: str | Path,
    prefeval: Sequence[str | Path] = (),
    perse: Sequence[str | Path] = (),
    verifier: Sequence[str | Path] = (),
    holdout_topics: Sequence[str] = (),
    seed: int = 0,
    mode: str = "verdict",
    orders: int = 2,
    profile_items: int = 3,
    profile_words: int = PROFILE_WORDS,
    max_pairs_per_person: int | None = None,
    balance_yes_no: bool = False,
    swap_persons: bool = False,
    prefeval_columns: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Read every source, write the judge dataset (train / validation) with its card at ``out``; return the sizes.

    ``mode``: ``verdict`` (the verdict alone) or ``think`` (a rationale, then ``Verdict: X``). ``orders``: order
    variants per multiple-choice item (at most the options' permutations: a PerSE pair has 2). ``holdout_topics``,
    ``profile_items``, ``profile_words``, ``max_pairs_per_person``: as ``prepare_preference`` takes them.
    ``balance_yes_no``: a verifier group keeps as many "no" candidates as "yes" ones (:func:`balanced`).
    ``swap_persons``: a verifier group also shows its "yes" candidate to another person, gold "no", one more of its
    "no" candidates (:func:`swapped_person_variant`).
    ``prefeval_columns``: the PrefEval items' keys for our fields (``--columns``).
    """
    if not (prefeval or perse or verifier):
        raise ValueError("no source: give --prefeval, --perse and/or --verifier")
    check_mode(mode)
    if orders < 1:
        raise ValueError(f"--orders must be at least 1, not {orders}")
    reads = read_prefeval_and_perse(
        prefeval, perse, holdout_topics, seed, profile_items, profile_words, max_pairs_per_person, prefeval_columns
    )
    items: list[Item] = []
    for read in reads:
        where = read.source.get("path") or ", ".join(read.source["paths"])
        for group in track(read.groups, description=f"judge rows {read.source['kind']}"):
            if len(group.options) > len(LETTERS):
                raise InputError(
                    where,
                    f"has {len(group.options)} options, more than {len(LETTERS)} letters",
                    record=group.id,
                    field="options",
                )
            items.append((where, group.split, choice_rows(group, mode, orders, seed)))
    sources = [read.source for read in reads]
    for folder in verifier:
        yes_no, source = verifier_items(Path(folder), mode, balance_yes_no, seed, swap_persons)
        items += yes_no
        sources.append(source)
    _check_unique(items)
    rows = shuffled(items, seed)
    validation_items = {row["item_id"] for row in rows[VALIDATION]}
    questions = [
        group_question(group)
        for read in reads
        if read.source["kind"] == "prefeval"
        for group in read.groups
        if group.split == VALIDATION
    ]
    questions += [q for folder in verifier for q in listwise_questions(Path(folder), validation_items)]
    out = Path(out)
    if not rows[TRAIN]:
        raise InputError(out, "the train split would be empty: every item of the sources fell in validation")
    settings = {
        "mode": mode,
        "orders": orders,
        "seed": seed,
        "holdout_topics": list(holdout_topics),
        "profile_items": profile_items,
        "profile_words": profile_words,
        "max_pairs_per_person": max_pairs_per_person,
        "balance_yes_no": balance_yes_no,
        "swap_persons": swap_persons,
    }
    info = build_info(rows, sources, sum((read.dropped for read in reads), Counter()), settings)
    with atomic_dir(out) as tmp:
        # `from_list([])` would drop the columns of an empty split (no held-out topic), and `datasets` saves an
        # empty split as zero shards, which it cannot load back: columns from FEATURES, one shard per split.
        columns = {split: {k: [row[k] for row in r] for k in FEATURES} for split, r in rows.items()}
        DatasetDict({split: Dataset.from_dict(c, features=FEATURES) for split, c in columns.items()}).save_to_disk(
            str(tmp), num_shards=dict.fromkeys(SPLITS, 1)
        )
        write_card(tmp, info, readme(info))
        if questions:
            # The validation topics' questions as the evaluators read them, for GRPO's validation of each checkpoint
            # (``validation_evaluator``): a yes / no row holds one candidate, not its question.
            columns = {field: [q[field] for q in questions] for field in QUESTION_FIELDS}
            DatasetDict({VALIDATION: Dataset.from_dict(columns)}).save_to_disk(str(tmp / QUESTIONS_DIR))
            write_json(
                tmp / QUESTIONS_DIR / "build_info.json",
                {"task": "mcq", "split": VALIDATION, "questions": len(questions), "of": "persetrain prepare verdict"},
            )
    console.print(
        f"[green]wrote[/green] judge data -> {out} {info['splits']}"
        + (f", {len(questions)} validation questions -> {out / QUESTIONS_DIR}" if questions else "")
    )
    return info["splits"]
