"""Build PerSE instruction datasets (Per-MPST, Per-DOC, Amazon books) from typed raw records.

Each builder applies the paper's filters, counting what every filter dropped, pairs each query with
a profile of the same reviewer's other items (never the query's own plot), and splits reviewers
9:1 by a hash so that a reviewer's split never depends on who else is in the data.
``data_prep.perse.dataset.save_dataset`` writes the result with its card.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from data_prep.perse.reviewer_split import Example, check_reviewer_disjoint, split_by_reviewer
from data_prep.readers.amazon import AmazonReview, Book, k_core
from data_prep.readers.doc import Annotation
from data_prep.readers.mpst import Review
from persetrain.console import track
from persetrain.prompts.perse import ASPECT_QUESTIONS, PAIRWISE_PROFILE_WORDS, PROFILE_WORDS
from persetrain.schema import (
    PERDOC_ASPECTS,
    PairwiseExample,
    PairwiseProfileItem,
    ProfileReview,
    ScalarExample,
)

R = TypeVar("R")


@dataclass(frozen=True)
class FilterStep:
    """One filter and what it removed, for the dataset card."""

    name: str
    dropped: int
    unit: str
    detail: str = ""


class NothingLeft(ValueError):
    """Every record of the raw data was removed by one filter; the message names it (the caller names the file)."""


def check_left(left: int, step: FilterStep) -> None:
    """Raise :class:`NothingLeft` naming ``step`` when it left nothing: an all-filtered file says which filter
    emptied it, not a chain of counts."""
    if not left:
        detail = f"; {step.detail}" if step.detail else ""
        raise NothingLeft(f"every record was removed by the filter: {step.name} ({step.dropped} {step.unit}{detail})")


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


def _rng(seed: int, *parts: str) -> random.Random:
    """A generator per query, so a query's profile does not change when other data changes."""
    return random.Random(":".join((str(seed),) + parts))


def _first_of_each(records: Sequence[R], key: Callable[[R], tuple[str, str]]) -> list[R]:
    """The first record of each (reviewer, item) key, in order: a reviewer who reviewed an item twice counts once."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for record in records:
        if key(record) not in seen:
            seen.add(key(record))
            kept.append(record)
    return kept


# ---------------------------------------------------------------------------------------------
def _per_mpst_examples(
    plots: Mapping[str, str],
    by_reviewer: Mapping[str, Sequence[Review]],
    reviewers: Sequence[str],
    k: int,
    seed: int,
    max_query_words: int,
) -> tuple[list[Example], int]:
    """Every review of the kept reviewers as a query with K other reviews of theirs as profile; and how many
    queries were left out for a plot longer than ``max_query_words`` (such a plot may still be a profile item)."""
    examples: list[Example] = []
    too_long = 0
    for reviewer in track(reviewers, description=f"Per-MPST K={k}"):
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
    return examples, too_long


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
    unique = _first_of_each(reviews, lambda r: (r.reviewer_id, r.plot_id))
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
    kept = sorted(set(by_reviewer) - few)
    examples, too_long = _per_mpst_examples(plots, by_reviewer, kept, k, seed, max_query_words)
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


def _per_doc_examples(
    answers: Mapping[str, Mapping[str, Mapping[str, Annotation]]], annotators: Sequence[str], seed: int
) -> list[Example]:
    """Every kept A/B answer as a query, shown one other plot pair of its annotator (one that answered the
    query's aspect when there is one) with all of the annotator's answers on that pair."""
    examples: list[Example] = []
    for annotator in track(annotators, description="Per-DOC"):
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
    return examples


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
    examples = _per_doc_examples(answers, sorted(set(answers) - few), seed)
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
    """Amazon books for zero-shot transfer: the ``core``-core (5, the paper's), K = 1, all customers in one
    ``test`` split.

    The paper only evaluates on Amazon (no training), so there is no train split. ``limit`` keeps
    a seeded sample of that many examples (the paper used 120). A filter that leaves nothing raises
    :class:`NothingLeft` naming it.
    """
    if core < 1:
        raise ValueError(f"--k-core must be at least 1, not {core}")
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
    check_left(len(result.reviews), filters[-1])
    unique = _first_of_each(result.reviews, lambda r: (r.reviewer_id, r.asin))
    filters.append(
        FilterStep(
            "duplicate reviews of one book by one customer (first kept)", len(result.reviews) - len(unique), "reviews"
        )
    )
    described = [r for r in unique if r.asin in books and book_text(books[r.asin])]
    filters.append(
        FilterStep("reviews of books without a description in the metadata", len(unique) - len(described), "reviews")
    )
    check_left(len(described), filters[-1])
    by_customer: dict[str, list[AmazonReview]] = defaultdict(list)
    for review in described:
        by_customer[review.reviewer_id].append(review)
    few = {u for u, rs in by_customer.items() if len(rs) < k + 1}
    filters.append(FilterStep(f"customers with fewer than {k + 1} usable reviews", len(few), "customers"))
    check_left(len(by_customer) - len(few), filters[-1])
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
