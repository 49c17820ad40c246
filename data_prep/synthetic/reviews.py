"""SYNTHETIC reviewers: planted taste, the scores it gives and the reviews that state it, for the MPST-like
(1-10) and Amazon-like (1-5 stars) sources of ``data_prep.synthetic.perse``."""

from __future__ import annotations

import math
import random

from data_prep.synthetic.names import first_name
from data_prep.synthetic.plots import GENRES, PLOT_QUALITY_SD, blurb, genre_mix, story_title, synopsis

TASTE_FORMULA = (
    "taste = affinity[favourite] * [favourite in mix] + affinity[least] * [least in mix]"
    " + sum_(other g in mix) affinity[g] * genre_mix[g]"
)
SCORE_FORMULA = "clip(round(5.5 + quality + taste - harshness + noise), 1, 10); " + TASTE_FORMULA
STARS_FORMULA = "clip(round(3.5 + 0.6 * (quality + taste - harshness) + noise), 1, 5); " + TASTE_FORMULA

# A review gives its reasons and leaves the verdict to the score. One phrasing per statement, each
# stating the taste first and then whether the plot meets it: a judge reading three such reviews can
# copy the taste, and writing its own review it makes one yes/no decision per genre. Why no verdict
# sentence ("Middle of the road.", "Highly recommended."): a judge that writes one before its score
# commits to a score band token by token, and greedy decoding picks the band whose phrasings share the
# likeliest first token; without one, the band is decided by the score's own 1..10 distribution, whose
# expectation is the judge's deterministic score.
_FAVOURITE_PRESENT = "I love {genre}, and this one has plenty of it."
_FAVOURITE_ABSENT = "I love {genre}, but there is none of it here."
_LEAST_PRESENT = "I cannot stand {genre}, and there is a lot of it here."
_LEAST_ABSENT = "I cannot stand {genre}, so I was glad there is none here."
#: A reviewer remarks on the craft of a plot whose quality is further than this from average: about
#: one plot in six at each end, with ``PLOT_QUALITY_SD`` 0.7.
CRAFT_REMARK_QUALITY = 0.7
_GOOD_CRAFT = "It is well written and well paced."
_BAD_CRAFT = "It is poorly written and badly paced."
# Headlines of Amazon reviews (the 2018 layout's ``summary`` field), by 1-5 star band.
_HEADLINES: tuple[tuple[str, ...], ...] = (
    ("A chore from start to finish.", "One of the worst books I have read this year."),
    ("Mostly a disappointment.", "It never really came together for me."),
    ("Uneven but readable.", "Some good ideas, some tired ones."),
    ("A really enjoyable read.", "Solid and satisfying."),
    ("An absolute favourite of mine.", "Wonderful from the first page to the last."),
)


def clip_round(x: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, math.floor(x + 0.5)))


def taste_effect(taste: dict, mix: dict[str, float]) -> float:
    """How much a reviewer's taste moves their score of a plot with this genre mix.

    The favourite and least favourite genre count in full whenever the plot has them, because that is
    what the review says ("I love comedy, and this one has plenty of it"): a score that moved with the
    genre's share of the mix instead would disagree with its own review whenever a favourite genre had
    a small share, and a judge reading reviews could not recover it. Mild affinities count by share.
    """
    strong = (taste["favourite"], taste["least_favourite"])
    return sum(taste["affinity"][g] * (1.0 if g in strong else w) for g, w in mix.items())


def _kind(mix: dict[str, float]) -> str:
    """What kind of story it is, as a reviewer would say it: "A western story with some horror."."""
    genres = sorted(mix, key=mix.__getitem__, reverse=True)
    extra = f" with some {' and '.join(genres[1:])}" if len(genres) > 1 else ""
    return f"A {genres[0]} story{extra}."


def review_text(quality: float, taste: dict, mix: dict[str, float]) -> str:
    """Templated review that gives the reasons for a score, as the judge is meant to.

    It says what kind of story this is, states the reviewer's favourite and least favourite genre
    and whether the plot has them, and remarks on the craft of a clearly good or bad plot. The
    score itself follows from these reasons, the reviewer's harshness and noise.
    """
    favourite, least = taste["favourite"], taste["least_favourite"]
    parts = [
        _kind(mix),
        (_FAVOURITE_PRESENT if favourite in mix else _FAVOURITE_ABSENT).format(genre=favourite),
        (_LEAST_PRESENT if least in mix else _LEAST_ABSENT).format(genre=least),
    ]
    if quality > CRAFT_REMARK_QUALITY:
        parts.append(_GOOD_CRAFT)
    elif quality < -CRAFT_REMARK_QUALITY:
        parts.append(_BAD_CRAFT)
    return " ".join(parts)


def draw_taste(rng: random.Random) -> dict:
    """A harshness and one affinity per genre: a strong favourite and least favourite, mild others.

    Taste is concentrated on two genres, as it is for many real reviewers, so a profile of three
    reviews can reveal it; a per-genre affinity drawn independently for every genre could not be
    read from three reviews, and no judge (nor any baseline) could be checked against it.
    """
    favourite, least = rng.sample(GENRES, 2)
    affinity = {g: round(rng.gauss(0, 0.5), 3) for g in GENRES}
    affinity[favourite], affinity[least] = 2.5, -2.5
    return {
        "harshness": round(rng.gauss(0, 0.8), 3),
        "affinity": affinity,
        "favourite": favourite,
        "least_favourite": least,
    }


def mpst_sample(
    rng: random.Random, n_plots: int, n_reviewers: int, reviews_per_reviewer: tuple[int, int], n_sparse_reviewers: int
) -> tuple[list[dict], list[dict], dict]:
    titles: set[str] = set()
    plots, truth_plots = [], {}
    for i in range(n_plots):
        plot_id = f"tt{1000001 + i * 37:07d}"
        mix, quality = genre_mix(rng), round(rng.gauss(0, PLOT_QUALITY_SD), 3)
        plots.append({"imdb_id": plot_id, "title": story_title(rng, titles), "plot_synopsis": synopsis(rng, mix)})
        truth_plots[plot_id] = {"quality": quality, "genres": mix}
    reviews, truth_reviewers = [], {}
    for j in range(n_reviewers + n_sparse_reviewers):
        reviewer_id = f"ur{2000003 + j * 101:07d}"
        taste = draw_taste(rng)
        count = rng.randint(*reviews_per_reviewer) if j < n_reviewers else rng.randint(2, 5)
        truth_reviewers[reviewer_id] = {**taste, "sparse": j >= n_reviewers}
        for plot in rng.sample(plots, min(count, len(plots))):
            t = truth_plots[plot["imdb_id"]]
            raw = 5.5 + t["quality"] + taste_effect(taste, t["genres"]) - taste["harshness"] + rng.gauss(0, 0.6)
            score = clip_round(raw, 1, 10)
            reviews.append(
                {
                    "imdb_id": plot["imdb_id"],
                    "reviewer_id": reviewer_id,
                    "review": review_text(t["quality"], taste, t["genres"]),
                    "rating": score,
                }
            )
    truth = {"formula": SCORE_FORMULA, "plots": truth_plots, "reviewers": truth_reviewers}
    return plots, reviews, truth


def amazon_sample(
    rng: random.Random,
    n_books: int,
    n_customers: int,
    reviews_per_customer: tuple[int, int],
    n_sparse_customers: int,
    n_rare_books: int,
) -> tuple[list[dict], list[dict], dict]:
    titles: set[str] = set()
    books, truth_books = [], {}
    for i in range(n_books + n_rare_books):
        asin = f"B{rng.randrange(10**8, 10**9):09d}"
        mix, quality = genre_mix(rng), round(rng.gauss(0, PLOT_QUALITY_SD), 3)
        genres = " and ".join(mix)
        description = [
            f"<b>A {genres} novel.</b>",
            blurb(synopsis(rng, mix), 60),
            rng.choice(("Now in paperback.", "The first book of a new series.", "")),
        ]
        books.append(
            {
                "asin": asin,
                "title": story_title(rng, titles),
                "description": [d for d in description if d],
                "category": ["Books", "Literature & Fiction"],
                "brand": "",
                "rank": f"{i + 1:,} in Books",
            }
        )
        truth_books[asin] = {"quality": quality, "genres": mix, "rare": i >= n_books}
    core, rare = books[:n_books], books[n_books:]
    reviews, truth_customers = [], {}
    for j in range(n_customers + n_sparse_customers):
        reviewer_id = f"A{rng.randrange(10**12, 10**13):013d}"
        taste = draw_taste(rng)
        sparse = j >= n_customers
        truth_customers[reviewer_id] = {**taste, "sparse": sparse}
        count = rng.randint(1, 4) if sparse else rng.randint(*reviews_per_customer)
        shelf = rng.sample(core, min(count, len(core)))
        if rare and rng.random() < 0.15:
            shelf[-1] = rng.choice(rare)
        for book in shelf:
            t = truth_books[book["asin"]]
            appeal = t["quality"] + taste_effect(taste, t["genres"]) - taste["harshness"]
            raw = 3.5 + 0.6 * appeal + rng.gauss(0, 0.4)
            stars = clip_round(raw, 1, 5)
            day = rng.randrange(14000, 17500)
            reviews.append(
                {
                    "overall": float(stars),
                    "verified": rng.random() < 0.7,
                    "reviewTime": f"{day % 12 + 1:02d} {day % 28 + 1:02d}, {1970 + day // 365}",
                    "reviewerID": reviewer_id,
                    "asin": book["asin"],
                    "reviewerName": first_name(rng),
                    "reviewText": review_text(t["quality"], taste, t["genres"]),
                    "summary": rng.choice(_HEADLINES[stars - 1]),
                    "unixReviewTime": day * 86400,
                }
            )
    truth = {"formula": STARS_FORMULA, "books": truth_books, "customers": truth_customers}
    return reviews, books, truth
