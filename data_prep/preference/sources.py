"""Where preference data comes from: PrefEval questions, PerSE reviewers' scores, users' own texts.

Every source is read into ``Group`` records, one context (a person and a request) with its candidate
texts and the index of the preferred one; ``data_prep.preference.prepare`` turns groups into the listwise,
pairwise and verifier datasets. Options are shuffled with ``data_prep.readers.prefeval.shuffle_options`` keyed
by ``"<seed>-<group id>"``, so a seed fixes every order and PrefEval's questions keep the order
``persetrain evaluate`` shows them in.

- **PrefEval** (``--prefeval``): a question, its stated preference and four options (the first follows
  the preference). Whole topics go to validation (``holdout``), so validation topics are never trained on.
- **PerSE** (``--perse``, a scalar dataset ``persetrain prepare perse`` wrote): two plots one reviewer
  scored differently; the higher-scored plot is preferred. The person is ``profile_items`` *other*
  reviews of theirs (neither plot of the pair, whose score would give the answer away).
- **Reference** (``--reference``, ``persetrain prepare reference`` or ``prepare parl`` output): the
  user's own text against every generator's text for the same input; the person is the user's
  ``profile_items`` latest earlier texts.

A source with a train and a test split keeps its person-disjoint split (test -> validation); a source
with one split is split by person: ``data_prep.parl.prepare.split_of`` (one person in four to validation).
"""

from __future__ import annotations

import json
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from data_prep.parl.prepare import split_of
from data_prep.parl.reference import GOLD
from data_prep.readers.prefeval import read_topic, shuffle_options, topic_files
from data_prep.readers.tables import ColumnMap
from persetrain.console import track
from persetrain.data import CARD, read_split
from persetrain.io import InputError
from persetrain.prompts.preference import PERSON_LABELS, PLOT_REQUEST, reviews_person, texts_person
from persetrain.saved import DATASET_INDEX, complete_splits, read_card
from persetrain.schema import ProfileReview

TRAIN, VALIDATION = "train", "validation"


@dataclass(frozen=True)
class Group:
    """One context and its candidates; ``options[gold]`` is preferred to every other option."""

    id: str
    source: str
    topic: str
    split: str
    person: str
    person_label: str
    request: str
    options: tuple[str, ...]
    gold: int
    explanation: str = ""


@dataclass
class SourceRead:
    """The groups of one source, what it is (for the card), and what was left out and why."""

    groups: list[Group]
    source: dict
    dropped: Counter


# ------------------------------------------------------------------------------------------ PrefEval
PREFEVAL_LICENSE = "CC BY-NC 4.0"
PREFEVAL_CITATION = (
    "Zhao et al., Do LLMs Recognize Your Preferences? Evaluating Personalized Preference "
    "Following in LLMs, ICLR 2025 (github.com/amazon-science/PrefEval)"
)


def _topics(folders: Sequence[Path]) -> dict[str, Path]:
    topics: dict[str, Path] = {}
    for folder in folders:
        files = topic_files(folder)
        if not files:
            raise InputError(folder, "no PrefEval topic files: expected mcq_options/*.json, *.json or one .json file")
        for path in files:
            if path.stem in topics:
                raise InputError(
                    path, f"topic {path.stem!r} is also in {topics[path.stem]}; give each topic once", field="topic"
                )
            topics[path.stem] = path
    return topics


def prefeval_groups(
    folders: Sequence[Path], holdout: Sequence[str], seed: int, columns: ColumnMap | None = None
) -> SourceRead:
    """Every question of every topic; topics in ``holdout`` go to validation, the rest to train; ``columns``: the
    items' keys for our fields (``data_prep.readers.prefeval.PREFEVAL_COLUMNS``)."""
    topics = _topics(folders)
    where = ", ".join(str(f) for f in folders)
    unknown = sorted(set(holdout) - set(topics))
    if unknown:
        raise InputError(
            where,
            f"unknown holdout topic(s) {', '.join(unknown)}; the topics are {', '.join(sorted(topics))}",
            field="holdout_topics",
        )
    if set(topics) <= set(holdout):
        raise InputError(where, "every topic is held out: the train split would be empty", field="holdout_topics")
    groups = []
    for topic, path in topics.items():
        for ex in read_topic(path, seed, columns):
            groups.append(
                Group(
                    id=ex.id,
                    source="prefeval",
                    topic=topic,
                    split=VALIDATION if topic in holdout else TRAIN,
                    person=ex.preference,
                    person_label=PERSON_LABELS["preference"],
                    request=ex.question,
                    options=tuple(ex.options),
                    gold=ex.gold,
                    explanation=ex.explanation,
                )
            )
    if not groups:
        raise InputError(where, "no preference pairs: the topic files hold no questions")
    source = {
        "kind": "prefeval",
        "paths": [str(f) for f in folders],
        "topics": {t: str(p) for t, p in topics.items()},
        "license": PREFEVAL_LICENSE,
        "citation": PREFEVAL_CITATION,
    }
    return SourceRead(groups, source, Counter())


# -------------------------------------------------------------------------------- prepared datasets
def source_splits(path: Path) -> list[str]:
    """The split names of a dataset ``persetrain prepare`` wrote (``dataset_dict.json`` or ``dataset.json``).

    Checked here, not left to ``datasets``: a split listed whose folder is gone makes ``load_from_disk`` fail deep
    inside with a file it guessed."""
    if (path / DATASET_INDEX).is_file():
        return complete_splits(path)
    if (path / CARD).is_file():
        return list(read_card(path / CARD).get("splits") or ["test"])
    raise InputError(path, "not a dataset `persetrain prepare` wrote (no dataset_dict.json or dataset.json)")


def _split(person_id: str, source_split: str, splits: Sequence[str], seed: int) -> str:
    """Keep a train/test source's person-disjoint split; split a one-split source by person."""
    if len(splits) > 1:
        return TRAIN if source_split == TRAIN else VALIDATION
    return VALIDATION if split_of(person_id, seed) == "test" else TRAIN


def _read(path: Path, kinds: tuple[str, ...], flag: str, seed: int):
    """``(split, all split names, example)`` for every example of ``path``, which must be of a task ``kinds``."""
    splits = source_splits(path)
    for name in splits:
        task, examples = read_split(path, name, seed)
        if task.name not in kinds:
            raise InputError(
                path, f"is a {task.name!r} dataset; {flag} takes a {' or '.join(kinds)} dataset", field="task"
            )
        yield from ((name, splits, ex) for ex in examples)


def is_synthetic(path: Path) -> bool:
    for card in (path / "build_info.json", path / "dataset.json"):
        if card.is_file():
            return bool(json.loads(card.read_text(encoding="utf-8")).get("synthetic"))
    return False


# --------------------------------------------------------------------------------------------- PerSE
def perse_groups(
    path: Path, seed: int, profile_items: int, profile_words: int, max_pairs_per_person: int | None = None
) -> SourceRead:
    """Per reviewer, every two plots with different scores (at most ``max_pairs_per_person``, seeded)."""
    reviews: dict[str, dict[str, ProfileReview]] = defaultdict(dict)
    split: dict[str, str] = {}
    score_max: dict[str, int] = {}
    for source_split, splits, ex in _read(path, ("scalar",), "--perse", seed):
        reviews[ex.reviewer_id][ex.query_plot_id] = ProfileReview(
            plot_id=ex.query_plot_id, plot=ex.query_plot, review=ex.review, score=ex.score
        )
        split[ex.reviewer_id] = _split(ex.reviewer_id, source_split, splits, seed)
        score_max[ex.reviewer_id] = ex.score_max
    topic, dropped, groups = path.name, Counter(), []
    for reviewer in track(sorted(reviews), description="PerSE pairs"):
        mine = reviews[reviewer]
        pairs = [
            (a, b)
            for a, b in combinations(sorted(mine), 2)
            if mine[a].score != mine[b].score and mine[a].plot.strip() != mine[b].plot.strip()
        ]
        if not pairs:
            dropped["reviewers whose texts all have one score (no pair)"] += 1
            continue
        if max_pairs_per_person is not None and len(pairs) > max_pairs_per_person:
            dropped[f"pairs beyond {max_pairs_per_person} per reviewer (seeded sample)"] += (
                len(pairs) - max_pairs_per_person
            )
            pairs = sorted(random.Random(f"{seed}:{reviewer}").sample(pairs, max_pairs_per_person))
        for a, b in pairs:
            others = [mine[p] for p in sorted(mine) if p not in (a, b)]
            if not others:
                dropped["pairs of a reviewer with no third text to show as profile"] += 1
                continue
            group_id = f"{reviewer}:{a}|{b}"
            profile = random.Random(f"{seed}:{group_id}").sample(others, min(profile_items, len(others)))
            high, low = (a, b) if mine[a].score > mine[b].score else (b, a)
            options, gold = shuffle_options([mine[high].plot, mine[low].plot], f"{seed}-{group_id}")
            groups.append(
                Group(
                    id=group_id,
                    source="perse",
                    topic=topic,
                    split=split[reviewer],
                    person=reviews_person(profile, score_max[reviewer], profile_words),
                    person_label=PERSON_LABELS["profile"],
                    request=PLOT_REQUEST,
                    options=tuple(options),
                    gold=gold,
                )
            )
    if not groups:
        raise InputError(
            path,
            "no preference pairs: no reviewer scored two of their texts differently "
            "(with a third text left for the profile)",
            field="score",
        )
    return SourceRead(
        groups,
        {"kind": "perse", "path": str(path), "synthetic": is_synthetic(path), "license": "as the source dataset's"},
        dropped,
    )


# ----------------------------------------------------------------------------------------- reference
def _own_and_others(path: Path, ex) -> tuple[str, str, list[str], str, dict[str, str]]:
    """``(topic, person id, earlier texts, own text, other systems' texts)`` of a reference or PARL record."""
    if hasattr(ex, "reference"):
        own = ex.reference or ex.outputs.get(GOLD, "")
        if not own.strip():
            raise InputError(
                path,
                f"no text of the user's own: empty reference and no {GOLD!r} output",
                record=ex.id,
                field="reference",
            )
        topic = ex.id.split(":", 1)[0] if ":" in ex.id else "reference"
        return topic, ex.user_id, ex.profile, own, {k: v for k, v in ex.outputs.items() if k != GOLD}
    return ex.task, ex.user_id, [h.output for h in ex.history], ex.output, dict(ex.baselines)


def reference_groups(path: Path, seed: int, profile_items: int, profile_words: int) -> SourceRead:
    """Per task input, the user's own text (preferred) and every other generator's text for it."""
    dropped, groups = Counter(), []
    for source_split, splits, ex in _read(path, ("reference", "rubric"), "--reference", seed):
        topic, user, earlier, own, others = _own_and_others(path, ex)
        rivals = [others[name] for name in sorted(others) if others[name].strip() != own.strip()]
        dropped["generator texts equal to the user's own (no pair)"] += len(others) - len(rivals)
        if not rivals:
            continue
        options, gold = shuffle_options([own, *rivals], f"{seed}-{ex.id}")
        groups.append(
            Group(
                id=ex.id,
                source="reference",
                topic=topic,
                split=_split(user, source_split, splits, seed),
                person=texts_person(earlier[-profile_items:], profile_words),
                person_label=PERSON_LABELS["profile"],
                request=ex.input,
                options=tuple(options),
                gold=gold,
            )
        )
    if not groups:
        raise InputError(path, "no preference pairs: every generator's text equals the user's own", field="outputs")
    return SourceRead(
        groups,
        {"kind": "reference", "path": str(path), "synthetic": is_synthetic(path), "license": "as the source dataset's"},
        dropped,
    )
