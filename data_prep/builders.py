"""Build PerSE instruction datasets (Per-MPST, Per-DOC, Amazon books) from typed raw records.

Each builder applies the paper's filters, counting what every filter dropped, pairs each query with
a profile of the same reviewer's other items (never the query's own plot), and splits reviewers
9:1 by a hash so that a reviewer's split never depends on who else is in the data. ``save_dataset``
writes an HF ``DatasetDict`` whose rows hold both the typed record and the prompt/completion chat
columns TRL's ``SFTTrainer`` reads, plus a dataset card that says how it was made.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from datasets import Dataset, DatasetDict

from data_prep.amazon import AmazonReview, Book, k_core
from data_prep.doc import Annotation
from data_prep.mpst import Review
from persetrain.console import track, warn
from persetrain.engine.types import ChatRequest
from persetrain.prompts.perse import (
    ASPECT_QUESTIONS,
    PAIRWISE_PROFILE_WORDS,
    PROFILE_WORDS,
    pairwise_completion,
    pairwise_request,
    scalar_completion,
    scalar_request,
)
from persetrain.schema import (
    PERDOC_ASPECTS,
    PairwiseExample,
    PairwiseProfileItem,
    ProfileReview,
    ScalarExample,
    reviewer_of,
    ten_point_score,
)

Example = ScalarExample | PairwiseExample

#: One test reviewer in ``TEST_BUCKETS`` (the paper's 9:1 split).
TEST_BUCKETS = 10


@dataclass(frozen=True)
class FilterStep:
    """One filter and what it removed, for the dataset card."""

    name: str
    dropped: int
    unit: str
    detail: str = ""


@dataclass
class BuiltDataset:
    """Examples per split plus everything the card must say about how they were made."""

    name: str
    title: str
    task: Literal["scalar", "pairwise"]
    splits: dict[str, list[Example]]
    filters: list[FilterStep]
    params: dict
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# Reviewer-disjoint split
def is_test_reviewer(reviewer_id: str, seed: int) -> bool:
    """Test when sha256("<seed>:<reviewer id>") mod 10 == 0: stable across runs, machines and data."""
    digest = hashlib.sha256(f"{seed}:{reviewer_id}".encode()).hexdigest()
    return int(digest, 16) % TEST_BUCKETS == 0


def check_reviewer_disjoint(splits: Mapping[str, Sequence[Example]]) -> None:
    """Refuse a split that lets a reviewer's preferences leak from training into test."""
    owner: dict[str, str] = {}
    for split, examples in splits.items():
        for example in examples:
            reviewer = reviewer_of(example)
            if owner.setdefault(reviewer, split) != split:
                raise ValueError(f"reviewer {reviewer!r} is in both the {owner[reviewer]!r} and {split!r} splits")


def split_by_reviewer(examples: Sequence[Example], seed: int) -> dict[str, list[Example]]:
    splits: dict[str, list[Example]] = {"train": [], "test": []}
    for example in examples:
        splits["test" if is_test_reviewer(reviewer_of(example), seed) else "train"].append(example)
    check_reviewer_disjoint(splits)
    return splits


def _rng(seed: int, *parts: str) -> random.Random:
    """A generator per query, so a query's profile does not change when other data changes."""
    return random.Random(":".join((str(seed),) + parts))


# ---------------------------------------------------------------------------------------------
def build_per_mpst(
    plots: Mapping[str, str],
    reviews: Sequence[Review],
    k: int = 3,
    seed: int = 0,
    profile_words: int = PROFILE_WORDS,
    min_reviews: int = 6,
    max_query_words: int = 2500,
) -> BuiltDataset:
    """Per-MPST: every review of a kept reviewer is a query, with K other reviews of theirs as profile.

    ``plots`` maps plot id to the text the judge should see (raw, anonymized or summarized); a review
    of a plot missing there is dropped. ``min_reviews`` (6) guarantees 5 profile candidates.
    """
    if not 1 <= k < min_reviews:
        raise ValueError(f"k must be between 1 and {min_reviews - 1} (min_reviews - 1), got {k}")
    filters: list[FilterStep] = []
    seen: set[tuple[str, str]] = set()
    unique = []
    for review in reviews:
        if (review.reviewer_id, review.plot_id) not in seen:
            seen.add((review.reviewer_id, review.plot_id))
            unique.append(review)
    filters.append(
        FilterStep("duplicate reviews of one plot by one reviewer (first kept)", len(reviews) - len(unique), "reviews")
    )
    known = [r for r in unique if r.plot_id in plots]
    filters.append(
        FilterStep(
            "reviews of plots without text (unknown id, or left out by anonymization or summarization)",
            len(unique) - len(known),
            "reviews",
        )
    )
    by_reviewer: dict[str, list[Review]] = defaultdict(list)
    for review in known:
        by_reviewer[review.reviewer_id].append(review)
    few = {u for u, rs in by_reviewer.items() if len(rs) < min_reviews}
    filters.append(
        FilterStep(
            f"reviewers with fewer than {min_reviews} reviews",
            len(few),
            "reviewers",
            f"{sum(len(by_reviewer[u]) for u in few)} reviews",
        )
    )
    examples: list[Example] = []
    too_long = 0
    for reviewer in track(sorted(set(by_reviewer) - few), description=f"Per-MPST K={k}"):
        mine = by_reviewer[reviewer]
        for query in mine:
            if len(plots[query.plot_id].split()) > max_query_words:
                too_long += 1
                continue
            others = [r for r in mine if r.plot_id != query.plot_id]
            chosen = _rng(seed, reviewer, query.plot_id).sample(others, k)
            examples.append(
                ScalarExample(
                    id=f"{reviewer}:{query.plot_id}",
                    reviewer_id=reviewer,
                    profile=[
                        ProfileReview(plot_id=r.plot_id, plot=plots[r.plot_id], review=r.text, score=r.score)
                        for r in chosen
                    ],
                    query_plot_id=query.plot_id,
                    query_plot=plots[query.plot_id],
                    review=query.text,
                    score=query.score,
                )
            )
    filters.append(FilterStep(f"queries longer than {max_query_words} words", too_long, "queries"))
    return BuiltDataset(
        name=f"per_mpst_k{k}",
        title=f"Per-MPST (K={k})",
        task="scalar",
        splits=split_by_reviewer(examples, seed),
        filters=filters,
        params={
            "k": k,
            "seed": seed,
            "profile_words": profile_words,
            "min_reviews": min_reviews,
            "max_query_words": max_query_words,
        },
    )


# ---------------------------------------------------------------------------------------------
def _question_key(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower()).rstrip("?").strip()


def default_question_aspects() -> dict[str, str]:
    """The paper's five survey questions, and the aspect names themselves, mapped to aspects."""
    mapping = {question: aspect for aspect, question in ASPECT_QUESTIONS.items()}
    mapping.update({aspect: aspect for aspect in PERDOC_ASPECTS})
    return mapping


def build_per_doc(
    annotations: Sequence[Annotation],
    seed: int = 0,
    profile_words: int = PAIRWISE_PROFILE_WORDS,
    min_annotations: int = 2,
    question_aspects: Mapping[str, str] | None = None,
) -> BuiltDataset:
    """Per-DOC, K = 1, all five aspects in one dataset.

    Each A/B answer is a query; the profile is one *other* plot pair of the same annotator (one that
    answered the query's aspect when there is one) with all of that annotator's answers on it.
    ``min_annotations`` counts annotated plot pairs, since the profile pair must differ from the
    query pair. ``question_aspects`` adds question wordings (matched case- and space-insensitively).
    """
    wording = {_question_key(q): a for q, a in {**default_question_aspects(), **(question_aspects or {})}.items()}
    unknown = {a for a in wording.values() if a not in PERDOC_ASPECTS}
    if unknown:
        raise ValueError(f"question_aspects maps to unknown aspects {sorted(unknown)}; expected {PERDOC_ASPECTS}")
    filters: list[FilterStep] = []
    preferred = [a for a in annotations if a.answer in ("A", "B")]
    filters.append(
        FilterStep("answers 'both' or 'neither' (no preference)", len(annotations) - len(preferred), "answers")
    )
    on_aspect = [(a, wording[_question_key(a.question)]) for a in preferred if _question_key(a.question) in wording]
    other_questions = Counter(a.question for a in preferred if _question_key(a.question) not in wording)
    filters.append(
        FilterStep(
            "answers to questions outside the five aspects",
            len(preferred) - len(on_aspect),
            "answers",
            "; ".join(f"{q!r}: {n}" for q, n in other_questions.most_common(5)),
        )
    )
    answers: dict[str, dict[str, dict[str, Annotation]]] = defaultdict(lambda: defaultdict(dict))
    duplicates = 0
    for annotation, aspect in on_aspect:
        slot = answers[annotation.annotator_id][annotation.pair_id]
        if aspect in slot:
            duplicates += 1
        else:
            slot[aspect] = annotation
    filters.append(
        FilterStep("repeated answers of one annotator to one aspect of one pair (first kept)", duplicates, "answers")
    )
    few = {u for u, pairs in answers.items() if len(pairs) < min_annotations}
    filters.append(
        FilterStep(
            f"annotators with fewer than {min_annotations} annotated plot pairs",
            len(few),
            "annotators",
            f"{sum(len(s) for u in few for s in answers[u].values())} answers",
        )
    )
    examples: list[Example] = []
    for annotator in track(sorted(set(answers) - few), description="Per-DOC"):
        pairs = answers[annotator]
        for pair_id, by_aspect in sorted(pairs.items()):
            for aspect in PERDOC_ASPECTS:
                if aspect not in by_aspect:
                    continue
                query = by_aspect[aspect]
                others = sorted(p for p in pairs if p != pair_id)
                candidates = [p for p in others if aspect in pairs[p]] or others
                shown = pairs[_rng(seed, annotator, pair_id, aspect).choice(candidates)]
                examples.append(
                    PairwiseExample(
                        id=f"{annotator}:{pair_id}:{aspect}",
                        annotator_id=annotator,
                        aspect=aspect,
                        profile=[
                            PairwiseProfileItem(
                                premise=shown[asp].premise,
                                plot_a=shown[asp].plot_a,
                                plot_b=shown[asp].plot_b,
                                aspect=asp,
                                preferred=shown[asp].answer,
                            )
                            for asp in PERDOC_ASPECTS
                            if asp in shown
                        ],
                        premise=query.premise,
                        plot_a=query.plot_a,
                        plot_b=query.plot_b,
                        preferred=query.answer,
                    )
                )
    return BuiltDataset(
        name="per_doc",
        title="Per-DOC (K=1, five aspects)",
        task="pairwise",
        splits=split_by_reviewer(examples, seed),
        filters=filters,
        params={
            "k": 1,
            "seed": seed,
            "profile_words": profile_words,
            "min_annotations": min_annotations,
            "aspects": list(PERDOC_ASPECTS),
        },
    )


# ---------------------------------------------------------------------------------------------
AMAZON_SCALE_NOTE = (
    "Scores are Amazon stars (1-5, `score_max` = 5) in the record columns. The PerSE judge works on "
    "1-10, so the prompt shows profile stars mapped linearly onto 1-10 (1->1, 2->3, 3->6, 4->8, 5->10; "
    "`persetrain.schema.ten_point_score`) and the completion's [Score] is the query's stars mapped the "
    "same way. A judge's 1-10 prediction is mapped back to stars with the inverse linear map "
    "(`persetrain.metrics.calibration`, method 'linear': 1->1, 10->5); being monotone it leaves "
    "Spearman and Kendall unchanged."
)


def book_text(book: Book) -> str:
    """What the judge sees of a book: its description only, since a title invites recall, not reading."""
    return book.description


def build_amazon_books(
    reviews: Sequence[AmazonReview],
    books: Mapping[str, Book],
    seed: int = 0,
    profile_words: int = PROFILE_WORDS,
    k: int = 1,
    core: int = 5,
    limit: int | None = None,
) -> BuiltDataset:
    """Amazon books for zero-shot transfer: 5-core, K = 1, all customers in one ``test`` split.

    The paper only evaluates on Amazon (no training), so there is no train split. ``limit`` keeps
    a seeded sample of that many examples (the paper used 120).
    """
    filters: list[FilterStep] = []
    result = k_core(reviews, core)
    filters.append(
        FilterStep(
            f"reviews outside the {core}-core ({result.rounds} rounds until stable)",
            result.dropped_reviews,
            "reviews",
            f"{result.dropped_users} customers, {result.dropped_items} books",
        )
    )
    seen: set[tuple[str, str]] = set()
    unique = []
    for review in result.reviews:
        if (review.reviewer_id, review.asin) not in seen:
            seen.add((review.reviewer_id, review.asin))
            unique.append(review)
    filters.append(
        FilterStep(
            "duplicate reviews of one book by one customer (first kept)", len(result.reviews) - len(unique), "reviews"
        )
    )
    described = [r for r in unique if r.asin in books and book_text(books[r.asin])]
    filters.append(
        FilterStep("reviews of books without a description in the metadata", len(unique) - len(described), "reviews")
    )
    by_customer: dict[str, list[AmazonReview]] = defaultdict(list)
    for review in described:
        by_customer[review.reviewer_id].append(review)
    few = {u for u, rs in by_customer.items() if len(rs) < k + 1}
    filters.append(FilterStep(f"customers with fewer than {k + 1} usable reviews", len(few), "customers"))
    examples: list[Example] = []
    for customer in track(sorted(set(by_customer) - few), description="Amazon books"):
        mine = by_customer[customer]
        for query in mine:
            others = [r for r in mine if r.asin != query.asin]
            chosen = _rng(seed, customer, query.asin).sample(others, k)
            examples.append(
                ScalarExample(
                    id=f"{customer}:{query.asin}",
                    reviewer_id=customer,
                    profile=[
                        ProfileReview(plot_id=r.asin, plot=book_text(books[r.asin]), review=r.text, score=r.stars)
                        for r in chosen
                    ],
                    query_plot_id=query.asin,
                    query_plot=book_text(books[query.asin]),
                    review=query.text,
                    score=query.stars,
                    score_max=5,
                )
            )
    if limit is not None and limit < len(examples):
        filters.append(FilterStep(f"examples beyond a seeded sample of {limit}", len(examples) - limit, "examples"))
        examples = sorted(random.Random(f"{seed}:amazon-sample").sample(examples, limit), key=lambda e: e.id)
    splits: dict[str, list[Example]] = {"test": examples}
    check_reviewer_disjoint(splits)
    return BuiltDataset(
        name="amazon_books",
        title=f"Amazon books (K={k}, zero-shot test)",
        task="scalar",
        splits=splits,
        filters=filters,
        params={"k": k, "seed": seed, "profile_words": profile_words, "core": core, "limit": limit},
        notes=[AMAZON_SCALE_NOTE],
    )


# ---------------------------------------------------------------------------------------------
def _messages(request: ChatRequest) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in request.messages]


def to_row(example: Example, profile_words: int) -> dict:
    """The typed record's fields plus TRL's prompt-completion chat columns."""
    if isinstance(example, ScalarExample):
        request = scalar_request(example, profile_words)
        target = scalar_completion(example.review, ten_point_score(example.score, example.score_max))
    else:
        request = pairwise_request(example, profile_words)
        target = pairwise_completion(example.preferred)
    return {
        **example.model_dump(mode="json"),
        "prompt": _messages(request),
        "completion": [{"role": "assistant", "content": target}],
    }


def to_dataset_dict(built: BuiltDataset) -> DatasetDict:
    rows = {
        split: [to_row(e, built.params["profile_words"]) for e in examples] for split, examples in built.splits.items()
    }
    filled = [split for split, r in rows.items() if r]
    if not filled:
        raise ValueError(f"{built.title}: no examples survived the filters; see {built.filters}")
    features = Dataset.from_list(rows[filled[0]]).features
    for split, r in rows.items():
        if not r:
            warn(f"{built.title}: the {split!r} split is empty (too few reviewers for a 9:1 split)")
    return DatasetDict({split: Dataset.from_list(r, features=features) for split, r in rows.items()})


def _count_table(built: BuiltDataset) -> str:
    lines = ["| split | examples | reviewers |", "|---|---:|---:|"]
    for split, examples in built.splits.items():
        lines.append(f"| {split} | {len(examples)} | {len({reviewer_of(e) for e in examples})} |")
    return "\n".join(lines)


_COLUMNS = {
    "scalar": "`id`, `reviewer_id`, `profile` (list of {plot_id, plot, review, score}), `query_plot_id`, "
    "`query_plot`, `review`, `score`, `score_max` (the `persetrain.schema.ScalarExample` fields); "
    "`prompt` (system + user messages) and `completion` (assistant message "
    "`[Review] <review> [Score] <1-10>`) for TRL's SFTTrainer.",
    "pairwise": "`id`, `annotator_id`, `aspect`, `profile` (list of {premise, plot_a, plot_b, aspect, "
    "preferred}), `premise`, `plot_a`, `plot_b`, `preferred` (the `persetrain.schema."
    "PairwiseExample` fields); `prompt` (system + user messages) and `completion` (assistant "
    "message `Plot A` or `Plot B`) for TRL's SFTTrainer.",
}


def dataset_card(built: BuiltDataset, sources: Mapping[str, str], synthetic: bool) -> str:
    filters = "\n".join(
        f"| {f.name} | {f.dropped} {f.unit}{f' ({f.detail})' if f.detail else ''} |" for f in built.filters
    )
    parts = [
        f'---\npretty_name: "{built.title}"\ntags:\n- persetrain\n- perse\n- personalized-evaluation\n'
        + ("- synthetic\n" if synthetic else "")
        + "---\n",
        f"# {built.title}\n",
        f"PerSE {built.task} instruction data built by `data_prep.builders` (persetrain).\n",
    ]
    if synthetic:
        parts.append(
            "> **Synthetic data.** Built from `data_prep.synthetic` output: plots, reviewers and "
            "scores are generated with planted preferences (see the source's `ground_truth.json`). "
            "Nothing here is a real review.\n"
        )
    parts += [
        "## Sources\n",
        "\n".join(f"- {name}: `{path}`" for name, path in sources.items()) or "- (not recorded)",
        "",
        "## Filters (in order)\n",
        "| filter | dropped |\n|---|---|\n" + filters,
        "",
        "## Settings\n",
        "\n".join(f"- {key}: {value}" for key, value in built.params.items()),
        "",
        "## Splits\n",
        'Reviewers are split 9:1 by `sha256(f"{seed}:{reviewer_id}") % 10 == 0` -> test; '
        "no reviewer is in two splits.\n",
        _count_table(built),
        "",
        "## Columns\n",
        _COLUMNS[built.task],
        "",
    ]
    if built.notes:
        parts += ["## Notes\n", "\n".join(f"- {n}" for n in built.notes), ""]
    return "\n".join(parts)


def save_dataset(
    built: BuiltDataset,
    out_dir: str | Path,
    sources: Mapping[str, str] | None = None,
    synthetic: bool = False,
) -> Path:
    """Write ``built`` as a DatasetDict with README.md (card) and build_info.json.

    Everything is written to a temporary sibling directory and renamed into place, so ``out_dir`` is
    either the previous complete dataset or the new complete one, never a mix.
    """
    out_dir = Path(out_dir)
    empty = [split for split, examples in built.splits.items() if not examples]
    if empty:
        counts = ", ".join(f"{f.name}: {f.dropped} dropped" for f in built.filters) or "no filters"
        raise ValueError(
            f"{built.name}: split(s) {empty} would be empty ({counts}); "
            "the raw data has too few reviewers or records after filtering"
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = out_dir.with_name(f".{out_dir.name}.tmp"), out_dir.with_name(f".{out_dir.name}.old")
    for stale in (tmp, old):
        if stale.exists():
            shutil.rmtree(stale)
    to_dataset_dict(built).save_to_disk(str(tmp))
    sources = dict(sources or {})
    (tmp / "README.md").write_text(dataset_card(built, sources, synthetic), encoding="utf-8")
    info = {
        "name": built.name,
        "title": built.title,
        "task": built.task,
        "params": built.params,
        "filters": [asdict(f) for f in built.filters],
        "sources": sources,
        "synthetic": synthetic,
        "splits": {s: len(e) for s, e in built.splits.items()},
        "notes": built.notes,
    }
    (tmp / "build_info.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    if out_dir.exists():
        out_dir.rename(old)
    tmp.rename(out_dir)
    if old.exists():
        shutil.rmtree(old)
    return out_dir
