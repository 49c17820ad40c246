"""data_prep: synthetic raw data, readers, filters, builders, saved datasets, anonymization logic,
and (with the embedded model) the LLM steps end to end."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from data_prep.perse.anonymize import (
    anonymize_text,
    apply_mapping,
    parse_mapping,
    share_family_names,
    valid_mapping,
)
from data_prep.perse.builders import (
    build_amazon_books,
    build_per_doc,
    build_per_mpst,
)
from data_prep.perse.contamination import normalize_title, title_memorized
from data_prep.perse.dataset import save_dataset
from data_prep.perse.prepare import prepare_perse, rename_in_reviews
from data_prep.perse.reviewer_split import check_reviewer_disjoint, is_test_reviewer
from data_prep.perse.summarize import clean_summary
from data_prep.readers import amazon, doc, mpst
from data_prep.synthetic.doc import EXTRA_QUESTION
from data_prep.synthetic.perse import write_sample_data
from data_prep.synthetic.plots import _GENRE_SENTENCES
from persetrain.io import InputError
from persetrain.prompts.perse import ASPECT_QUESTIONS, REVIEW_MARKER, SCORE_MARKER
from persetrain.schema import PERDOC_ASPECTS, ScalarExample


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return write_sample_data(tmp_path_factory.mktemp("raw"), seed=0)


@pytest.fixture(scope="module")
def truth(sample):
    return json.loads(sample.ground_truth.read_text())


@pytest.fixture(scope="module")
def mpst_data(sample):
    plots = mpst.read_plots(sample.mpst_plots)
    return {p.id: p.synopsis for p in plots}, mpst.read_reviews(sample.mpst_reviews)


# --------------------------------------------------------------------------------------------- synthetic
def test_synthetic_is_deterministic_and_says_so(sample, tmp_path):
    again = write_sample_data(tmp_path / "again", seed=0)
    other = write_sample_data(tmp_path / "other", seed=1)
    for name in ("mpst_plots", "mpst_reviews", "doc_annotations", "amazon_reviews", "amazon_meta", "ground_truth"):
        assert getattr(sample, name).read_bytes() == getattr(again, name).read_bytes(), name
    assert sample.mpst_plots.read_bytes() != other.mpst_plots.read_bytes()
    assert "SYNTHETIC" in (sample.root / "README.md").read_text()
    assert json.loads(sample.ground_truth.read_text())["synthetic"] is True


def test_a_killed_sample_run_leaves_its_data_marked_synthetic(tmp_path):
    """The marker is written before the data: a run stopped midway (here: a folder where a file goes) must not leave
    data that `prepare perse` takes for real reviews."""
    (tmp_path / "mpst" / "plots.csv").mkdir(parents=True)
    with pytest.raises(OSError):
        write_sample_data(tmp_path, seed=0)
    assert json.loads((tmp_path / "ground_truth.json").read_text())["synthetic"] is True


def test_synthetic_scores_follow_the_planted_preferences(sample, truth):
    planted = truth["mpst"]
    errors = []
    for line in sample.mpst_reviews.read_text().splitlines():
        review = json.loads(line)
        plot, reviewer = planted["plots"][review["imdb_id"]], planted["reviewers"][review["reviewer_id"]]
        strong = (reviewer["favourite"], reviewer["least_favourite"])
        x = (
            5.5
            + plot["quality"]
            - reviewer["harshness"]
            + sum(reviewer["affinity"][g] * (1 if g in strong else w) for g, w in plot["genres"].items())
        )
        errors.append(abs(max(1, min(10, math.floor(x + 0.5))) - review["rating"]))
    assert sum(e <= 1 for e in errors) / len(errors) > 0.95
    assert max(errors) <= 3


def test_synthetic_reviews_give_reasons_that_agree_with_the_scores(mpst_data):
    """Reviews that meet the reviewer's favourite genre score higher than those that meet the least
    favourite; a well-made plot's review says so more often at high scores than at low ones."""
    _, reviews = mpst_data

    def mean_score(phrase: str) -> float:
        scores = [r.score for r in reviews if phrase in r.text]
        assert len(scores) > 20, phrase
        return sum(scores) / len(scores)

    assert mean_score("and this one has plenty of it") > mean_score("and there is a lot of it here") + 2
    assert mean_score("well written") > mean_score("poorly written") + 1


def test_synthetic_reviews_state_the_planted_taste(sample, truth):
    """A review says what kind of story the plot is, then the reviewer's favourite and least
    favourite genre and whether the plot has them: every profile review carries the taste."""
    planted = truth["mpst"]
    for line in sample.mpst_reviews.read_text().splitlines():
        review = json.loads(line)
        mix = planted["plots"][review["imdb_id"]]["genres"]
        taste = planted["reviewers"][review["reviewer_id"]]
        lead = max(mix, key=mix.__getitem__)
        assert review["review"].startswith(f"A {lead} story"), review
        favourite, least = taste["favourite"], taste["least_favourite"]
        has = "and this one has plenty of it." if favourite in mix else "but there is none of it here."
        assert f"I love {favourite}, {has}" in review["review"], review
        has = "and there is a lot of it here." if least in mix else "so I was glad there is none here."
        assert f"I cannot stand {least}, {has}" in review["review"], review
        assert "[Score]" not in review["review"] and not re.search(r"\b(10|[1-9])\b", review["review"])


def test_synthetic_plots_show_every_genre_of_their_mix(mpst_data, truth):
    """A review names every genre of the plot's mix, so the synopsis has a sentence of each."""
    plots, _ = mpst_data
    patterns = {
        g: [re.compile(re.sub(r"\\\{\w+\\\}", ".+?", re.escape(t))) for t in templates]
        for g, templates in _GENRE_SENTENCES.items()
    }
    for plot_id, text in plots.items():
        for genre in truth["mpst"]["plots"][plot_id]["genres"]:
            assert any(p.search(text) for p in patterns[genre]), (plot_id, genre, text)


def test_synthetic_plots_are_varied_and_right_skewed(mpst_data, truth):
    plots, reviews = mpst_data
    lengths = sorted(len(text.split()) for text in plots.values())
    assert len(plots) == 120 and lengths[0] >= 60 and lengths[-1] <= 150
    assert sum(lengths) / len(lengths) > lengths[len(lengths) // 2]  # mean above median
    assert len(set(plots.values())) == len(plots)
    sparse = [u for u, t in truth["mpst"]["reviewers"].items() if t["sparse"]]
    counts = Counter(r.reviewer_id for r in reviews)
    assert sparse and all(counts[u] < 6 for u in sparse)
    assert all(8 <= counts[u] <= 12 for u, t in truth["mpst"]["reviewers"].items() if not t["sparse"])


# --------------------------------------------------------------------------------------------- readers
def test_readers_load_every_synthetic_record(sample):
    with sample.mpst_plots.open(newline="") as f:
        assert len(mpst.read_plots(sample.mpst_plots)) == sum(1 for _ in csv.DictReader(f))
    assert len(mpst.read_reviews(sample.mpst_reviews)) == len(sample.mpst_reviews.read_text().splitlines())
    with sample.doc_annotations.open(newline="") as f:
        assert len(doc.read_annotations(sample.doc_annotations)) == sum(1 for _ in csv.DictReader(f))
    reviews = amazon.read_reviews(sample.amazon_reviews)
    assert len(reviews) == len(sample.amazon_reviews.read_text().splitlines())
    assert {r.stars for r in reviews} <= {1, 2, 3, 4, 5}
    books = amazon.read_books(sample.amazon_meta)
    assert all(b.description and "<b>" not in b.description for b in books.values())


def test_column_mapping_reads_other_headers(tmp_path):
    path = tmp_path / "movies.csv"
    path.write_text('movie,name,story\ntt1,"A Film","Line one\nline two"\n')
    plots = mpst.read_plots(path, columns={"id": "movie", "title": "name", "synopsis": "story"})
    assert plots[0].id == "tt1" and plots[0].synopsis == "Line one\nline two"
    with pytest.raises(InputError) as err:
        mpst.read_plots(path, columns={"id": "movie", "title": "name"})
    assert (err.value.record, err.value.field) == (1, "plot_synopsis")
    with pytest.raises(ValueError, match="unknown fields"):
        mpst.read_plots(path, columns={"plot": "story"})


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


REVIEW_OK = '{"imdb_id": "tt1", "reviewer_id": "ur1", "review": "Fine.", "rating": 7}\n'
BOOK_OK = '{"reviewerID": "A1", "asin": "B1", "overall": 4.0, "reviewText": "Good.", "summary": "ok"}\n'
DOC_HEADER = "premise,plot_a,plot_b,annotator_id,question,answer\n"


@pytest.mark.parametrize(
    ("name", "content", "read", "line", "field"),
    [
        (
            "reviews.jsonl",
            REVIEW_OK * 2 + REVIEW_OK.replace('"rating": 7', '"rating": 11'),
            mpst.read_reviews,
            3,
            "rating",
        ),
        (
            "reviews.jsonl",
            REVIEW_OK + REVIEW_OK.replace('"rating": 7', '"rating": 6.5'),
            mpst.read_reviews,
            2,
            "rating",
        ),
        ("reviews.jsonl", REVIEW_OK.replace('"Fine."', '"   "'), mpst.read_reviews, 1, "review"),
        (
            "reviews.jsonl",
            REVIEW_OK + '{"imdb_id": "tt1", "review": "x", "rating": 3}\n',
            mpst.read_reviews,
            2,
            "reviewer_id",
        ),
        ("reviews.jsonl", REVIEW_OK + "{not json\n", mpst.read_reviews, 2, None),
        (
            "plots.csv",
            'imdb_id,title,plot_synopsis\ntt1,A,"two\nlines"\ntt2,B,""\n',
            mpst.read_plots,
            4,
            "plot_synopsis",
        ),
        (
            "plots.csv",
            'imdb_id,title,plot_synopsis\ntt1,A,"two\nlines"\n ,B,"x\ny\nz"\n',
            mpst.read_plots,
            4,
            "imdb_id",
        ),
        ("plots.csv", "imdb_id,title,plot_synopsis\ntt1,A,text\ntt1,B,more\n", mpst.read_plots, 3, "imdb_id"),
        ("plots.csv", "imdb_id,title\ntt1,A\n", mpst.read_plots, 1, "plot_synopsis"),
        ("doc.csv", DOC_HEADER + "p,a,b,w1,Q?,A\np,a,b,w1,Q?,maybe\n", doc.read_annotations, 3, "answer"),
        ("doc.csv", DOC_HEADER + "p,,b,w1,Q?,A\n", doc.read_annotations, 2, "plot_a"),
        ("Books.json", BOOK_OK + BOOK_OK.replace("4.0", "6.0"), amazon.read_reviews, 2, "overall"),
        ("Books.json", BOOK_OK.replace('"Good."', '""'), amazon.read_reviews, 1, "reviewText"),
    ],
)
def test_reader_errors_name_file_line_and_field(tmp_path, name, content, read, line, field):
    path = _write(tmp_path / name, content)
    with pytest.raises(InputError) as err:
        read(path)
    assert (err.value.path, err.value.record, err.value.field) == (str(path), line, field)
    assert str(err.value).startswith(f"{path}:{line}: ")


def test_amazon_reader_can_skip_reviews_without_text(tmp_path):
    path = _write(tmp_path / "Books.json", BOOK_OK + '{"reviewerID": "A2", "asin": "B1", "overall": 5.0}\n')
    with pytest.raises(InputError) as err:
        amazon.read_reviews(path)
    assert (err.value.record, err.value.field) == (2, "reviewText")
    assert [r.reviewer_id for r in amazon.read_reviews(path, drop_empty_text=True)] == ["A1"]


def test_amazon_metadata_flattens_description_lists(tmp_path):
    path = _write(
        tmp_path / "meta.json",
        json.dumps({"asin": "B1", "title": "T", "description": ["<p>First &amp; best.</p>", "Second."]})
        + "\n"
        + json.dumps({"asin": "B1", "title": "dup", "description": "ignored"})
        + "\n",
    )
    books = amazon.read_books(path)
    assert books["B1"].description == "First & best. Second." and books["B1"].title == "T"


def test_k_core_repeats_until_stable():
    def review(user: str, item: str) -> amazon.AmazonReview:
        return amazon.AmazonReview(reviewer_id=user, asin=item, stars=3, text="t")

    core = [review(f"u{u}", f"i{i}") for u in range(5) for i in range(5)]
    # u5 has 5 reviews, one on i5; i5 has only 4 reviews -> i5 goes, then u5 (now 4), then nothing.
    chain = [review("u5", f"i{i}") for i in range(4)] + [review("u5", "i5")]
    chain += [review(f"x{j}", "i5") for j in range(3)]
    result = amazon.k_core(core + chain, k=5)
    assert sorted((r.reviewer_id, r.asin) for r in result.reviews) == sorted((r.reviewer_id, r.asin) for r in core)
    assert result.rounds == 3
    assert (result.dropped_reviews, result.dropped_users, result.dropped_items) == (8, 4, 1)
    once = Counter(r.reviewer_id for r in core + chain)
    assert once["u5"] >= 5  # a single pass would have kept u5


# --------------------------------------------------------------------------------------------- builders
def _by_name(built, name_start: str):
    return next(f for f in built.filters if f.name.startswith(name_start))


def test_per_mpst_drops_sparse_reviewers_and_never_profiles_the_query(mpst_data, truth):
    plots, reviews = mpst_data
    built = build_per_mpst(plots, reviews, k=3, seed=0)
    counts = Counter(r.reviewer_id for r in reviews)
    sparse = {u for u, n in counts.items() if n < 6}
    assert sparse == {u for u, t in truth["mpst"]["reviewers"].items() if t["sparse"]}
    assert _by_name(built, "reviewers with fewer than 6").dropped == len(sparse)
    examples = [e for split in built.splits.values() for e in split]
    assert len(examples) == sum(n for u, n in counts.items() if u not in sparse)
    scores = {(r.reviewer_id, r.plot_id): r.score for r in reviews}
    for example in examples:
        assert example.reviewer_id not in sparse and len(example.profile) == 3
        assert example.query_plot_id not in {p.plot_id for p in example.profile}
        assert len({p.plot_id for p in example.profile}) == 3
        assert all(scores[(example.reviewer_id, p.plot_id)] == p.score for p in example.profile)
        assert scores[(example.reviewer_id, example.query_plot_id)] == example.score


def test_per_mpst_k_changes_profile_size_only(mpst_data):
    plots, reviews = mpst_data
    one, five = build_per_mpst(plots, reviews, k=1), build_per_mpst(plots, reviews, k=5)
    assert {e.id for e in one.splits["train"]} == {e.id for e in five.splits["train"]}
    assert {len(e.profile) for e in five.splits["train"]} == {5}
    with pytest.raises(ValueError, match="k must be"):
        build_per_mpst(plots, reviews, k=6)


def test_per_mpst_drops_long_queries_and_unknown_plots(mpst_data):
    plots, reviews = mpst_data
    kept_plots = dict(list(plots.items())[:100])
    built = build_per_mpst(kept_plots, reviews, k=3, max_query_words=90)
    unknown = sum(r.plot_id not in kept_plots for r in reviews)
    assert _by_name(built, "reviews of plots without text").dropped == unknown > 0
    examples = [e for split in built.splits.values() for e in split]
    assert examples and all(len(e.query_plot.split()) <= 90 for e in examples)
    assert _by_name(built, "queries longer than 90").dropped > 0
    assert all(p.plot_id in kept_plots for e in examples for p in e.profile)


def test_split_is_stable_reviewer_disjoint_and_about_one_in_ten(mpst_data):
    plots, reviews = mpst_data
    first, second = build_per_mpst(plots, reviews, seed=0), build_per_mpst(plots, reviews, seed=0)
    assert [e.model_dump() for e in first.splits["test"]] == [e.model_dump() for e in second.splits["test"]]
    train = {e.reviewer_id for e in first.splits["train"]}
    test = {e.reviewer_id for e in first.splits["test"]}
    assert test and not train & test and 1 <= len(test) <= 10
    # A reviewer's split depends on nothing but the seed and their id (not on who else is in the data).
    dropped = set(sorted(train)[::2])
    fewer = build_per_mpst(plots, [r for r in reviews if r.reviewer_id not in dropped], seed=0)
    assert {e.reviewer_id for e in fewer.splits["test"]} == test
    assert all(
        is_test_reviewer(u, 0) == (int(hashlib.sha256(f"0:{u}".encode()).hexdigest(), 16) % 10 == 0)
        for u in train | test
    )
    assert {e.reviewer_id for e in build_per_mpst(plots, reviews, seed=7).splits["test"]} != test


def test_overlapping_split_is_refused(mpst_data):
    plots, reviews = mpst_data
    example = build_per_mpst(plots, reviews).splits["train"][0]
    with pytest.raises(ValueError, match="in both"):
        check_reviewer_disjoint({"train": [example], "test": [example]})


def test_per_doc_filters_and_profiles(sample, truth):
    annotations = doc.read_annotations(sample.doc_annotations)
    built = build_per_doc(annotations, seed=0)
    assert _by_name(built, "answers 'both' or 'neither'").dropped == sum(
        a.answer in ("both", "neither") for a in annotations
    )
    assert _by_name(built, "answers to questions outside").dropped == sum(
        a.question == EXTRA_QUESTION and a.answer in "AB" for a in annotations
    )
    sparse = {u for u, t in truth["doc"]["annotators"].items() if t["sparse"]}
    assert _by_name(built, "annotators with fewer than 2").dropped == len(sparse)
    answers = {(a.annotator_id, a.pair_id, a.question): a.answer for a in annotations}
    pair_of = {(a.premise, a.plot_a, a.plot_b): a.pair_id for a in annotations}
    examples = [e for split in built.splits.values() for e in split]
    assert {e.aspect for e in examples} == set(PERDOC_ASPECTS)
    for example in examples:
        query_pair = pair_of[(example.premise, example.plot_a, example.plot_b)]
        assert example.annotator_id not in sparse
        assert answers[(example.annotator_id, query_pair, ASPECT_QUESTIONS[example.aspect])] == example.preferred
        profile_pairs = {pair_of[(p.premise, p.plot_a, p.plot_b)] for p in example.profile}
        assert len(profile_pairs) == 1 and query_pair not in profile_pairs
        profile_pair = profile_pairs.pop()
        for item in example.profile:
            assert answers[(example.annotator_id, profile_pair, ASPECT_QUESTIONS[item.aspect])] == item.preferred
    assert not {e.annotator_id for e in built.splits["train"]} & {e.annotator_id for e in built.splits["test"]}


def test_amazon_builder_is_5core_k1_test_only(sample):
    reviews, books = amazon.read_reviews(sample.amazon_reviews), amazon.read_books(sample.amazon_meta)
    built = build_amazon_books(reviews, books, seed=0)
    assert list(built.splits) == ["test"]
    examples = built.splits["test"]
    core = amazon.k_core(reviews)
    assert _by_name(built, "reviews outside the 5-core").dropped == core.dropped_reviews > 0
    in_core = {(r.reviewer_id, r.asin) for r in core.reviews}
    for example in examples:
        assert example.score_max == 5 and len(example.profile) == 1
        assert (example.reviewer_id, example.query_plot_id) in in_core
        assert example.profile[0].plot_id != example.query_plot_id
    limited = build_amazon_books(reviews, books, seed=0, limit=20)
    assert len(limited.splits["test"]) == 20
    assert {e.id for e in limited.splits["test"]} <= {e.id for e in examples}


# --------------------------------------------------------------------------------------------- saved datasets
def test_saved_scalar_dataset_reloads_with_chat_columns(mpst_data, tmp_path):
    from datasets import load_from_disk

    plots, reviews = mpst_data
    built = build_per_mpst(plots, reviews, k=3, seed=0)
    out = save_dataset(built, tmp_path / "per_mpst_k3", {"MPST": "x"}, synthetic=True)
    out = save_dataset(built, tmp_path / "per_mpst_k3", {"MPST": "x"}, synthetic=True)  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["per_mpst_k3"]
    data = load_from_disk(str(out))
    assert {s: len(d) for s, d in data.items()} == {s: len(e) for s, e in built.splits.items()}
    row = data["train"][0]
    record = ScalarExample.model_validate({k: v for k, v in row.items() if k not in ("prompt", "completion")})
    assert record == built.splits["train"][0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert record.query_plot in row["prompt"][1]["content"]
    completion = row["completion"]
    assert [m["role"] for m in completion] == ["assistant"]
    match = re.fullmatch(rf"{re.escape(REVIEW_MARKER)} (.+) {re.escape(SCORE_MARKER)} (\d+)", completion[0]["content"])
    assert match and int(match.group(2)) == record.score
    card = (out / "README.md").read_text()
    assert "Synthetic data" in card and "reviewers with fewer than 6 reviews | 4 reviewers" in card
    assert f"| train | {len(built.splits['train'])} |" in card and "- seed: 0" in card and "- k: 3" in card


def test_saved_pairwise_dataset_answers_the_preferred_plot(sample, tmp_path):
    from datasets import load_from_disk

    built = build_per_doc(doc.read_annotations(sample.doc_annotations), seed=0)
    data = load_from_disk(str(save_dataset(built, tmp_path / "per_doc")))
    for row in data["test"]:
        assert row["completion"] == [{"role": "assistant", "content": f"Plot {row['preferred']}"}]
        assert ASPECT_QUESTIONS[row["aspect"]] in row["prompt"][1]["content"]


def test_amazon_rows_show_stars_on_the_ten_point_scale(sample, tmp_path):
    from datasets import load_from_disk

    built = build_amazon_books(amazon.read_reviews(sample.amazon_reviews), amazon.read_books(sample.amazon_meta))
    data = load_from_disk(str(save_dataset(built, tmp_path / "amazon")))["test"]
    to_ten = {1: 1, 2: 3, 3: 6, 4: 8, 5: 10}
    for row in data:
        assert row["completion"][0]["content"].endswith(f"{SCORE_MARKER} {to_ten[row['score']]}")
        profile_score = row["profile"][0]["score"]
        assert f"{SCORE_MARKER} {to_ten[profile_score]}\n" in row["prompt"][1]["content"] + "\n"


def test_prepare_without_engine_builds_every_source(sample, tmp_path):
    result = prepare_perse(sample.root, tmp_path / "out", ks=(1, 3))
    assert set(result.datasets) == {"per_mpst_k1", "per_mpst_k3", "per_doc", "amazon_books"}
    report = json.loads(result.report.read_text())
    assert report["synthetic"] is True and report["plot_text"] == "raw"
    with pytest.raises(ValueError, match="needs an engine"):
        prepare_perse(sample.root, tmp_path / "out2", plot_text="summary")
    with pytest.raises(InputError, match="no raw data"):
        prepare_perse(tmp_path / "empty", tmp_path / "out3")


# --------------------------------------------------------------------------------------------- anonymization logic
def test_replacement_is_whole_word_longest_first_and_single_pass():
    mapping = {"John": "Tom", "John Smith": "Tom Brown", "Ann": "Bea", "Bea": "Ann"}
    text = "John Smith met John and Johnny. Ann called Bea; Anna stayed."
    assert apply_mapping(text, mapping) == "Tom Brown met Tom and Johnny. Bea called Ann; Anna stayed."


def test_family_names_stay_shared():
    shared = share_family_names({"John Smith": "Tom Brown", "Iris Smith": "Emily Jones", "Oslo": "Varn"})
    assert shared == {"John Smith": "Tom Brown", "Iris Smith": "Emily Brown", "Oslo": "Varn", "Smith": "Brown"}
    text, mapping = anonymize_text(
        "John Smith and Iris Smith. The Smith house is in Oslo. Smithers waved.",
        [("John Smith", "Tom Brown"), ("Iris Smith", "Emily Jones"), ("Oslo", "Varn")],
    )
    assert text == "Tom Brown and Emily Brown. The Brown house is in Varn. Smithers waved."
    # An explicit single-word entry for the family name decides the shared new family name.
    assert share_family_names({"Smith": "Carter", "John Smith": "Tom Brown"}) == {
        "Smith": "Carter",
        "John Smith": "Tom Carter",
    }
    # A new family name equal to the old one would leak it: the next candidate is used.
    assert share_family_names({"John Smith": "Tom Smith", "Iris Smith": "Emily Gray"}) == {
        "John Smith": "Tom Gray",
        "Iris Smith": "Emily Gray",
        "Smith": "Gray",
    }


def test_reviews_get_their_plots_names_replaced():
    reviews = [
        mpst.Review(plot_id="tt1", reviewer_id="u", text="Diego was great, Diegos weren't.", score=8),
        mpst.Review(plot_id="tt2", reviewer_id="u", text="Diego again.", score=3),
    ]
    renamed = rename_in_reviews(reviews, {"tt1": {"Diego": "Sherry"}})
    assert [r.text for r in renamed] == ["Sherry was great, Diegos weren't.", "Diego again."]


def test_invalid_mapping_entries_are_dropped():
    text = "Diego meets Rosa in Lima."
    pairs = [
        ("Diego", "Sherry Evans"),
        ("Diego", "Other"),
        ("Rosa", "Rosa"),
        ("Paris", "Nice"),
        ("", "X"),
        ("Lima", "Rosa"),
        ("  Lima ", " Quito "),
    ]
    assert valid_mapping(pairs, text) == {"Diego": "Sherry Evans", "Lima": "Quito"}


def test_parse_mapping_accepts_the_schema_and_plain_objects():
    assert parse_mapping('{"names": [{"name": "A", "new_name": "B"}, {"name": 3, "new_name": "x"}]}') == [("A", "B")]
    assert parse_mapping('{"A": "B"}') == [("A", "B")]
    assert parse_mapping('{"names": [{"name": "A"') is None
    assert parse_mapping("[1, 2]") is None


def test_title_probe_matching_and_summary_cleaning():
    assert normalize_title("  Amélie: Le Film! ") == "amelie le film"
    assert title_memorized("Up", "I think this is Up (2009).")
    assert not title_memorized("Up", "Upside Down")
    assert not title_memorized("", "anything")
    assert clean_summary("One thing happens.  Then another\nthing happens. And then the") == (
        "One thing happens. Then another thing happens."
    )
    assert clean_summary("No sentence end") == "No sentence end"


# --------------------------------------------------------------------------------------------- with the real model
@pytest.mark.slow
def test_llm_steps_end_to_end_with_the_embedded_model(sample, tmp_path):
    """anonymize -> summarize -> title probe on 2 plots with the real 135M model, then a rerun that
    must be served entirely from the step outputs and the engine cache."""
    from data_prep.perse.anonymize import anonymize_plots
    from data_prep.perse.contamination import probe_titles
    from data_prep.perse.summarize import summarize_plots

    plots = mpst.read_plots(sample.mpst_plots)[:2]
    raw = {p.id: p.synopsis for p in plots}
    from persetrain.engine import load_engine

    engine = load_engine("embedded:smollm2-135m-instruct", backend="hf", cache_path=tmp_path / "cache.sqlite")

    def run():
        anon = anonymize_plots(engine, raw, tmp_path / "anonymized.jsonl", max_tries=2, max_new_tokens=96)
        texts = {pid: r["text"] for pid, r in anon.records.items()} or raw
        summ = summarize_plots(engine, texts, tmp_path / "summaries.jsonl", max_new_tokens=48)
        probe = probe_titles(
            engine, {"raw": raw}, {p.id: p.title for p in plots}, tmp_path / "contamination.jsonl", max_new_tokens=24
        )
        return anon, summ, probe

    anon, summ, probe = run()
    assert set(anon.records) | set(anon.failed) == set(raw) and not set(anon.records) & set(anon.failed)
    for pid, record in anon.records.items():
        assert record["mapping"] and record["text"] != raw[pid]
        assert record["text"] == apply_mapping(raw[pid], record["mapping"])
    assert set(summ.records) | set(summ.failed) == set(anon.records or raw)
    assert all(len(r["summary"].split()) >= 5 for r in summ.records.values())
    assert probe.summary["raw"]["n"] == 2
    assert probe.summary["raw"]["memorized"] + probe.summary["raw"]["unanswered"] <= 2
    calls = engine.cost.calls
    again = run()
    assert engine.cost.calls == calls  # nothing recomputed: outputs are resumed, failures hit the cache
    assert again[0].records == anon.records and again[1].records == summ.records
