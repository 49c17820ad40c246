"""SYNTHETIC raw data with planted reviewer preferences, in all three raw formats.

Nothing here is real: plots, names, titles, reviews and ratings are generated from templates by a
seeded random generator. The point is a data set whose ground truth is known, so the whole PerSE
pipeline (prepare -> sft -> evaluate) can be run and checked on a CPU in minutes, and the analysis
can ask whether a judge recovered the preferences that were planted:

* MPST-like: each plot has a genre mix (weights over ``GENRES`` summing to 1) and a quality; each
  reviewer has a harshness and one affinity per genre (a strong favourite, a strong least
  favourite, mild others); the score is ``clip(round(5.5 + quality + taste - harshness + noise), 1, 10)``
  where ``taste`` counts the favourite and least favourite genre whenever the plot has them (as the
  review says) and the mild ones by their share of the mix, and the review
  text gives the reasons for it: it says what kind of story the plot is, states the reviewer's
  favourite and least favourite genre and whether the plot has them, and remarks on the craft of a
  clearly good or bad plot; the score comes after the reasons, with no verdict sentence in between.
* DOC-like: plot pairs from one premise, each plot with a tone, setting, twist, cast and ending;
  each annotator prefers one value per aspect (e.g. Ending: tragic) and picks the plot that has it.
* Amazon-like (2018 JSON lines): books with a genre mix and quality, customers with harshness and
  affinities, 1-5 stars, a metadata file whose descriptions are lists of strings.

``ground_truth.json`` holds every planted parameter. Sizes are small by default (the demo trains a
135M model on CPU); a few sparse reviewers and rare books are planted so that every filter of the
builders (fewer than 6 reviews, 5-core, both/neither answers, unknown questions) has work to do.
"""

from __future__ import annotations

import csv
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path

from persetrain.io import atomic_write, write_json, write_jsonl
from persetrain.prompts.perse import ASPECT_QUESTIONS

GENRES: tuple[str, ...] = ("horror", "comedy", "romance", "science fiction", "western", "fantasy")
TASTE_FORMULA = (
    "taste = affinity[favourite] * [favourite in mix] + affinity[least] * [least in mix]"
    " + sum_(other g in mix) affinity[g] * genre_mix[g]"
)
SCORE_FORMULA = "clip(round(5.5 + quality + taste - harshness + noise), 1, 10); " + TASTE_FORMULA
STARS_FORMULA = "clip(round(3.5 + 0.6 * (quality + taste - harshness) + noise), 1, 5); " + TASTE_FORMULA
#: Spread of a plot's own merit, which every reviewer feels. No text shows it to a judge (only other
#: reviewers' scores do, which is what matrix factorization uses), so it is kept below the spread of taste.
PLOT_QUALITY_SD = 0.7
#: A DOC question outside the five PerSE aspects, planted so the builder's question filter has work.
EXTRA_QUESTION = "Which story plot is more coherent?"

# ---------------------------------------------------------------------------------------------
# Invented names: syllables glued together, so no real film or person is ever named.
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ren",
    "ta",
    "vel",
    "or",
    "sa",
    "di",
    "bren",
    "mar",
    "tho",
    "li",
    "ne",
    "qua",
    "ish",
    "el",
    "dor",
    "fen",
    "ya",
    "zo",
    "ru",
    "pel",
    "an",
    "gri",
    "nu",
)
_FAMILY_ENDINGS = ("wick", "mont", "dale", "ver", "ston", "holt", "ard", "ing", "ley", "ford")
_PLACE_ENDINGS = ("haven", "ford", "moor", "vale", "crest", "bury", "mouth", "field")
_PLACE_PREFIXES = ("", "", "", "Port ", "Fort ", "Lake ", "North ")


def _word(rng: random.Random, parts: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(parts)).capitalize()


def _first_name(rng: random.Random) -> str:
    return _word(rng, rng.choice((2, 2, 3)))


def _family_name(rng: random.Random) -> str:
    return _word(rng, 1) + rng.choice(_FAMILY_ENDINGS)


def _place(rng: random.Random) -> str:
    return rng.choice(_PLACE_PREFIXES) + _word(rng, rng.choice((1, 2))) + rng.choice(_PLACE_ENDINGS)


# ---------------------------------------------------------------------------------------------
# MPST-like synopses: genre sentence templates. The first sentence of each list opens a story. Each
# sentence carries the words that mark its genre in any synopsis (a haunted house, a spaceship, a
# sheriff, a wizard...): they survive an LLM summary, and a pretrained judge already knows which genre
# they mark, so what fine-tuning has to teach is the reviewer's taste, not the templates' genres.
_GENRE_SENTENCES: dict[str, tuple[str, ...]] = {
    "horror": (
        "{hero} moves with {kin_first} into a haunted house on the edge of {place}, where a ghost whispers "
        "in the walls at night.",
        "Bloody marks appear on the cellar door, and {hero_first} begins to suspect that a demon followed "
        "the {family} family from {place2}.",
        "One by one the neighbours of {place} are found dead, and {rival} insists that the killings are only "
        "a coincidence.",
        "During a storm {hero_first} finds a diary describing a satanic ritual performed in the house a "
        "century earlier.",
        "The monster in the cellar finally shows itself, and {kin_first} is dragged screaming into the dark.",
        "{hero_first} has to decide whether to burn the haunted house down with the creature still inside.",
    ),
    "comedy": (
        "{hero} is a hopelessly clumsy wedding planner in {place} whose every event ends in a hilarious disaster.",
        "When {rival} opens a rival agency across the street, {hero_first} hatches a ridiculous prank to win "
        "back the town's clients.",
        "A mix-up with a delivery of goats turns the mayor's garden party into slapstick chaos.",
        "{kin}, an overconfident cousin, keeps telling bad jokes that make everything worse.",
        "A road trip to {place2} goes comically wrong at every stop, from a flat tyre to an accidental talent show.",
        "In the end the two bumbling rivals must organise a wedding together, and the result is a gloriously "
        "funny mess.",
    ),
    "romance": (
        "{hero} returns to {place} to sell the family bakery and runs straight into {rival}, an old flame "
        "and first love.",
        "Forced to work side by side on a festival cake, the two of them fall in love all over again.",
        "Love letters hidden in the bakery reveal that {kin} once gave up the love of their life.",
        "A jealous misunderstanding after their first kiss pushes {hero_first} to buy a one-way ticket to {place2}.",
        "{rival_first} races to the station in the rain to confess a love that should have been declared years ago.",
        "Slowly {hero_first} realises that the heart left behind in {place} is the one worth marrying.",
    ),
    "science fiction": (
        "In the year 2291 {hero} pilots a cargo spaceship between the mining colonies on the planets {place} "
        "and {place2}.",
        "An alien signal from a dead moon draws the crew off course, and the ship's robot computer starts "
        "hiding things.",
        "{rival}, an officer of the galactic authority, wants the alien technology for a laser weapons programme.",
        "{hero_first} discovers that the signal is a warning left by a starship expedition that never returned.",
        "A failing fusion reactor gives the crew a few hours to choose between a rescue and an escape into hyperspace.",
        "{kin}, the ship's android engineer, rewires the warp engines with a trick that could tear the hull apart.",
    ),
    "western": (
        "{hero}, a cowboy with a revolver, rides into the dusty frontier town of {place} looking for the "
        "outlaw who burned the {family} ranch.",
        "The sheriff, {rival}, owns the saloon and half the town and pays the other half to keep quiet.",
        "{hero_first} takes work breaking wild horses on the prairie while quietly asking questions about the fire.",
        "A cattle drive to {place2} turns deadly when outlaws ambush the herd at the river crossing.",
        "{kin}, thought dead for years, turns up riding with the gang of bandits.",
        "The feud ends in a gunfight on the main street of {place} at high noon.",
    ),
    "fantasy": (
        "{hero}, an apprentice wizard in the kingdom of {place}, finds an enchanted map that redraws itself "
        "each night.",
        "The magic map shows the way to {place2}, an elven city that vanished from the world three hundred years ago.",
        "{rival}, the king's evil sorcerer, sends trolls after the map and anyone who has seen it.",
        "With {kin}, a sharp-tongued cousin who can talk to dragons, {hero_first} sets out on a quest through "
        "the cursed marshes.",
        "In the drowned city they learn that the map was drawn by a witch to imprison an ancient spell, not "
        "to find it.",
        "{hero_first} must choose between the crown and burning the only copy of the magic map.",
    ),
}
_LINKING_SENTENCES: tuple[str, ...] = (
    "Along the way {hero_first} learns that {rival_first} is not who they seemed.",
    "Old debts between the {family} family and the people of {place} come back to the surface.",
    "{kin_first} keeps a secret that could change everything, and waits too long to tell it.",
    "Months pass, and the quarrel between {hero_first} and {rival_first} grows into open hostility.",
    "A stranger from {place2} arrives with news that nobody in {place} wants to hear.",
    "{hero_first} and {kin_first} argue bitterly, and for a while they stop speaking altogether.",
    "Nothing goes to plan, and {hero_first} is left with fewer friends than before.",
)
_TITLE_NOUNS = (
    "Road",
    "Crown",
    "Harbour",
    "Winter",
    "Letters",
    "Bridge",
    "Signal",
    "Bakery",
    "Map",
    "Storm",
    "Promise",
    "Cellar",
    "Frontier",
    "Verdict",
    "Lantern",
    "Orchard",
)
_TITLE_ADJECTIVES = (
    "Hollow",
    "Last",
    "Silent",
    "Crooked",
    "Golden",
    "Broken",
    "Distant",
    "Quiet",
    "Burning",
    "Lost",
    "Second",
    "Narrow",
)

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


def _clip_round(x: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, math.floor(x + 0.5)))


def _genre_mix(rng: random.Random) -> dict[str, float]:
    """1-3 genres with random weights summing to 1 (most films are a blend)."""
    chosen = rng.sample(GENRES, rng.choice((1, 2, 2, 3)))
    raw = [rng.random() + 0.3 for _ in chosen]
    return {g: round(w / sum(raw), 3) for g, w in zip(chosen, raw, strict=True)}


def _taste_effect(taste: dict, mix: dict[str, float]) -> float:
    """How much a reviewer's taste moves their score of a plot with this genre mix.

    The favourite and least favourite genre count in full whenever the plot has them, because that is
    what the review says ("I love comedy, and this one has plenty of it"): a score that moved with the
    genre's share of the mix instead would disagree with its own review whenever a favourite genre had
    a small share, and a judge reading reviews could not recover it. Mild affinities count by share.
    """
    strong = (taste["favourite"], taste["least_favourite"])
    return sum(taste["affinity"][g] * (1.0 if g in strong else w) for g, w in mix.items())


def _cast(rng: random.Random) -> dict[str, str]:
    """Invented names for one story; the relative shares the hero's family name on purpose."""
    family = _family_name(rng)
    hero_first, kin_first, rival_first = _first_name(rng), _first_name(rng), _first_name(rng)
    place, place2 = _place(rng), _place(rng)
    while place2 == place:
        place2 = _place(rng)
    return {
        "hero": f"{hero_first} {family}",
        "hero_first": hero_first,
        "family": family,
        "kin": f"{kin_first} {family}",
        "kin_first": kin_first,
        "rival": f"{rival_first} {_family_name(rng)}",
        "rival_first": rival_first,
        "place": place,
        "place2": place2,
    }


def _synopsis(rng: random.Random, mix: dict[str, float]) -> str:
    """A few sentences from the plot's genres (weighted by the mix), right-skewed in length.

    The lead genre's opening sentence comes first and every other genre of the mix gets at least one
    sentence, so that each genre a review names (and that moves the score) is in the text a judge reads.
    """
    cast = _cast(rng)
    target = min(150, 60 + int(rng.expovariate(1 / 28)))
    lead = max(mix, key=mix.__getitem__)
    sentences = [_GENRE_SENTENCES[lead][0].format(**cast)]
    for genre in sorted(mix, key=mix.__getitem__, reverse=True)[1:]:
        sentences.append(rng.choice(_GENRE_SENTENCES[genre][1:]).format(**cast))
    pool = [(s, mix[g]) for g in mix for s in _GENRE_SENTENCES[g][1:] if s.format(**cast) not in sentences]
    pool += [(s, 0.15) for s in _LINKING_SENTENCES]
    words = sum(len(sentence.split()) for sentence in sentences)
    while words < target and pool:
        pick = rng.choices(range(len(pool)), weights=[w for _, w in pool])[0]
        sentence = pool.pop(pick)[0].format(**cast)
        if words + len(sentence.split()) <= 150:
            sentences.append(sentence)
            words += len(sentence.split())
    return " ".join(sentences)


def _blurb(synopsis: str, words: int) -> str:
    """Whole sentences of ``synopsis`` up to about ``words`` words (at least the first sentence)."""
    sentences = re.split(r"(?<=\.) ", synopsis)
    kept = [sentences[0]]
    for sentence in sentences[1:]:
        if len(" ".join(kept + [sentence]).split()) > words:
            break
        kept.append(sentence)
    return " ".join(kept)


def _title(rng: random.Random, taken: set[str]) -> str:
    while True:
        title = rng.choice(
            (
                f"The {rng.choice(_TITLE_ADJECTIVES)} {rng.choice(_TITLE_NOUNS)}",
                f"{_place(rng)} {rng.choice(_TITLE_NOUNS)}",
                f"The {rng.choice(_TITLE_NOUNS)} of {_place(rng)}",
            )
        )
        if title not in taken:
            taken.add(title)
            return title


def _kind(mix: dict[str, float]) -> str:
    """What kind of story it is, as a reviewer would say it: "A western story with some horror."."""
    genres = sorted(mix, key=mix.__getitem__, reverse=True)
    extra = f" with some {' and '.join(genres[1:])}" if len(genres) > 1 else ""
    return f"A {genres[0]} story{extra}."


def _review(quality: float, taste: dict, mix: dict[str, float]) -> str:
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


def _taste(rng: random.Random) -> dict:
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


# ---------------------------------------------------------------------------------------------
def _mpst(
    rng: random.Random, n_plots: int, n_reviewers: int, reviews_per_reviewer: tuple[int, int], n_sparse_reviewers: int
) -> tuple[list[dict], list[dict], dict]:
    titles: set[str] = set()
    plots, truth_plots = [], {}
    for i in range(n_plots):
        plot_id = f"tt{1000001 + i * 37:07d}"
        mix, quality = _genre_mix(rng), round(rng.gauss(0, PLOT_QUALITY_SD), 3)
        plots.append({"imdb_id": plot_id, "title": _title(rng, titles), "plot_synopsis": _synopsis(rng, mix)})
        truth_plots[plot_id] = {"quality": quality, "genres": mix}
    reviews, truth_reviewers = [], {}
    for j in range(n_reviewers + n_sparse_reviewers):
        reviewer_id = f"ur{2000003 + j * 101:07d}"
        taste = _taste(rng)
        count = rng.randint(*reviews_per_reviewer) if j < n_reviewers else rng.randint(2, 5)
        truth_reviewers[reviewer_id] = {**taste, "sparse": j >= n_reviewers}
        for plot in rng.sample(plots, min(count, len(plots))):
            t = truth_plots[plot["imdb_id"]]
            raw = 5.5 + t["quality"] + _taste_effect(taste, t["genres"]) - taste["harshness"] + rng.gauss(0, 0.6)
            score = _clip_round(raw, 1, 10)
            reviews.append(
                {
                    "imdb_id": plot["imdb_id"],
                    "reviewer_id": reviewer_id,
                    "review": _review(t["quality"], taste, t["genres"]),
                    "rating": score,
                }
            )
    truth = {"formula": SCORE_FORMULA, "plots": truth_plots, "reviewers": truth_reviewers}
    return plots, reviews, truth


# DOC-like plots: five attributes, one per aspect an annotator cares about.
_DOC_ATTRIBUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "Interestingness": ("tone", ("dark", "light")),
    "Adaptability": ("setting", ("city", "countryside", "sea", "space")),
    "Surprise": ("twist", ("twist", "straight")),
    "Character Development": ("cast", ("ensemble", "loner")),
    "Ending": ("ending", ("happy", "bittersweet", "tragic")),
}
_SETTINGS = {
    "city": "a crowded harbour city full of markets and tenements",
    "countryside": "a farming valley far from any town",
    "sea": "an old fishing boat at sea",
    "space": "a research station orbiting a cold planet",
}
_ROLES = (
    "retired teacher",
    "struggling artist",
    "young doctor",
    "ship's cook",
    "night-shift guard",
    "failed inventor",
    "village postmaster",
    "travelling musician",
)
_DISCOVERIES = (
    "a letter addressed to a stranger",
    "a door that was not there the day before",
    "an old photograph of themselves",
    "a debt their father never paid",
    "a child who already knows their name",
    "a diary written in their own hand",
)
_TONE_BEATS = {
    "dark": "{a} is haunted by an old crime and trusts no one, least of all {b}.",
    "light": "{a} throws themselves into the puzzle with cheerful curiosity, teasing {b} along the way.",
}
_TWIST_BEATS = {
    "twist": "Halfway through it turns out that {b} planned the whole thing from the start.",
    "straight": "{a} follows the trail step by step, and each clue leads plainly to the next.",
}
_CAST_BEATS = {
    "ensemble": "{a}, {b} and {c} share the work, and each of them changes because of the others.",
    "loner": "{a} faces every problem alone and learns to rely on no one but themselves.",
}
_ENDING_BEATS = {
    "happy": "In the end {a} sets everything right and is welcomed home.",
    "bittersweet": "In the end {a} succeeds, but has to leave {b} behind forever.",
    "tragic": "In the end {a} fails, and the cost falls on everyone {a} loved.",
}


def _doc_plot(rng: random.Random, attrs: dict[str, str]) -> str:
    names = [f"{_first_name(rng)} {_family_name(rng)}" for _ in range(3)]
    a, b, c = names
    fill = {"a": a.split()[0], "b": b.split()[0], "c": c.split()[0]}
    characters = f"{a}, {b} and {c}." if attrs["cast"] == "ensemble" else f"{a} and {b}."
    outline = [
        _TONE_BEATS[attrs["tone"]],
        _TWIST_BEATS[attrs["twist"]],
        _CAST_BEATS[attrs["cast"]],
        _ENDING_BEATS[attrs["ending"]],
    ]
    steps = " ".join(f"{n}. {beat.format(**fill)}" for n, beat in enumerate(outline, start=1))
    return f"Setting: The story is set in {_SETTINGS[attrs['setting']]}.\nCharacters: {characters}\nOutline: {steps}"


def _doc(
    rng: random.Random,
    n_premises: int,
    n_annotators: int,
    pairs_per_annotator: tuple[int, int],
    n_sparse_annotators: int,
) -> tuple[list[dict], dict]:
    pairs, truth_pairs = [], {}
    for p in range(n_premises):
        premise = (
            f"A {rng.choice(_ROLES)} stumbles upon {rng.choice(_DISCOVERIES)}, but following it will cost them dearly."
        )
        for q in range(rng.choice((1, 2))):
            pair_id = f"doc-{p:03d}-{q}"
            while True:
                attrs = [{name: rng.choice(values) for name, values in _DOC_ATTRIBUTES.values()} for _ in "AB"]
                if sum(attrs[0][k] != attrs[1][k] for k in attrs[0]) >= 2:
                    break
            pairs.append(
                {
                    "pair_id": pair_id,
                    "premise": premise,
                    "plot_a": _doc_plot(rng, attrs[0]),
                    "plot_b": _doc_plot(rng, attrs[1]),
                }
            )
            truth_pairs[pair_id] = {"A": attrs[0], "B": attrs[1]}
    rows, truth_annotators = [], {}
    for j in range(n_annotators + n_sparse_annotators):
        annotator_id = f"worker-{j:04d}"
        prefs = {aspect: rng.choice(values) for aspect, (_, values) in _DOC_ATTRIBUTES.items()}
        truth_annotators[annotator_id] = {"prefers": prefs, "sparse": j >= n_annotators}
        count = rng.randint(*pairs_per_annotator) if j < n_annotators else 1
        for pair in rng.sample(pairs, min(count, len(pairs))):
            truth = truth_pairs[pair["pair_id"]]
            for aspect, question in ASPECT_QUESTIONS.items():
                attribute = _DOC_ATTRIBUTES[aspect][0]
                match_a = truth["A"][attribute] == prefs[aspect]
                match_b = truth["B"][attribute] == prefs[aspect]
                if match_a != match_b:
                    answer = "A" if match_a else "B"
                    if rng.random() < 0.1:  # annotators are not perfectly consistent
                        answer = "B" if answer == "A" else "A"
                elif rng.random() < 0.6:
                    answer = "both" if match_a else "neither"
                else:
                    answer = rng.choice("AB")
                rows.append({**pair, "annotator_id": annotator_id, "question": question, "answer": answer})
            rows.append(
                {
                    **pair,
                    "annotator_id": annotator_id,
                    "question": EXTRA_QUESTION,
                    "answer": rng.choice(("A", "B", "both")),
                }
            )
    truth = {
        "rule": "an annotator prefers, per aspect, the plot whose attribute equals their preferred value "
        "(10% of answers flipped); when both or neither plot has it they answer both/neither "
        "60% of the time, else at random",
        "aspect_attribute": {a: attr for a, (attr, _) in _DOC_ATTRIBUTES.items()},
        "pairs": truth_pairs,
        "annotators": truth_annotators,
    }
    return rows, truth


def _amazon(
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
        mix, quality = _genre_mix(rng), round(rng.gauss(0, PLOT_QUALITY_SD), 3)
        genres = " and ".join(mix)
        description = [
            f"<b>A {genres} novel.</b>",
            _blurb(_synopsis(rng, mix), 60),
            rng.choice(("Now in paperback.", "The first book of a new series.", "")),
        ]
        books.append(
            {
                "asin": asin,
                "title": _title(rng, titles),
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
        taste = _taste(rng)
        sparse = j >= n_customers
        truth_customers[reviewer_id] = {**taste, "sparse": sparse}
        count = rng.randint(1, 4) if sparse else rng.randint(*reviews_per_customer)
        shelf = rng.sample(core, min(count, len(core)))
        if rare and rng.random() < 0.15:
            shelf[-1] = rng.choice(rare)
        for book in shelf:
            t = truth_books[book["asin"]]
            appeal = t["quality"] + _taste_effect(taste, t["genres"]) - taste["harshness"]
            raw = 3.5 + 0.6 * appeal + rng.gauss(0, 0.4)
            stars = _clip_round(raw, 1, 5)
            day = rng.randrange(14000, 17500)
            reviews.append(
                {
                    "overall": float(stars),
                    "verified": rng.random() < 0.7,
                    "reviewTime": f"{day % 12 + 1:02d} {day % 28 + 1:02d}, {1970 + day // 365}",
                    "reviewerID": reviewer_id,
                    "asin": book["asin"],
                    "reviewerName": _first_name(rng),
                    "reviewText": _review(t["quality"], taste, t["genres"]),
                    "summary": rng.choice(_HEADLINES[stars - 1]),
                    "unixReviewTime": day * 86400,
                }
            )
    truth = {"formula": STARS_FORMULA, "books": truth_books, "customers": truth_customers}
    return reviews, books, truth


@dataclass(frozen=True)
class SampleData:
    """Where ``write_sample_data`` put each raw file (the layout ``prepare_perse`` expects)."""

    root: Path
    mpst_plots: Path
    mpst_reviews: Path
    doc_annotations: Path
    amazon_reviews: Path
    amazon_meta: Path
    ground_truth: Path


def _write_csv(path: Path, rows: list[dict]) -> None:
    with atomic_write(path) as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


_README = """# SYNTHETIC sample data (not real)

Written by `data_prep.synthetic.write_sample_data(seed={seed})`. Every plot, name, title, review and
rating here was generated from templates with planted preferences; `ground_truth.json` holds the
planted parameters (plot quality and genre mix, reviewer harshness and genre affinities, annotator
aspect preferences) so that a trained judge can be checked against the truth.

- `mpst/plots.csv` (imdb_id, title, plot_synopsis) and `mpst/reviews.jsonl` (imdb_id, reviewer_id,
  review, rating 1-10): score = {formula}
- `doc/annotations.csv` (pair_id, premise, plot_a, plot_b, annotator_id, question, answer)
- `amazon/Books.json` and `amazon/meta_Books.json`: Amazon 2018 JSON-lines layout, 1-5 stars
"""


def write_sample_data(
    out_dir: str | Path,
    seed: int = 0,
    n_plots: int = 120,
    n_reviewers: int = 40,
    reviews_per_reviewer: tuple[int, int] = (8, 12),
    n_sparse_reviewers: int = 4,
    n_premises: int = 24,
    n_annotators: int = 30,
    pairs_per_annotator: tuple[int, int] = (3, 6),
    n_sparse_annotators: int = 3,
    n_books: int = 24,
    n_customers: int = 30,
    reviews_per_customer: tuple[int, int] = (6, 10),
    n_sparse_customers: int = 5,
    n_rare_books: int = 4,
) -> SampleData:
    """Write the synthetic raw files under ``out_dir`` and return their paths.

    The same arguments always write the same bytes. Each source draws from its own random stream,
    so resizing one (say, more DOC annotators) leaves the others unchanged.
    """
    root = Path(out_dir)
    plots, reviews, mpst_truth = _mpst(
        random.Random(f"{seed}:mpst"), n_plots, n_reviewers, reviews_per_reviewer, n_sparse_reviewers
    )
    annotations, doc_truth = _doc(
        random.Random(f"{seed}:doc"), n_premises, n_annotators, pairs_per_annotator, n_sparse_annotators
    )
    amazon_reviews, books, amazon_truth = _amazon(
        random.Random(f"{seed}:amazon"), n_books, n_customers, reviews_per_customer, n_sparse_customers, n_rare_books
    )
    data = SampleData(
        root=root,
        mpst_plots=root / "mpst" / "plots.csv",
        mpst_reviews=root / "mpst" / "reviews.jsonl",
        doc_annotations=root / "doc" / "annotations.csv",
        amazon_reviews=root / "amazon" / "Books.json",
        amazon_meta=root / "amazon" / "meta_Books.json",
        ground_truth=root / "ground_truth.json",
    )
    _write_csv(data.mpst_plots, plots)
    write_jsonl(data.mpst_reviews, reviews)
    _write_csv(data.doc_annotations, annotations)
    write_jsonl(data.amazon_reviews, amazon_reviews)
    write_jsonl(data.amazon_meta, books)
    write_json(
        data.ground_truth,
        {
            "synthetic": True,
            "seed": seed,
            "genres": list(GENRES),
            "mpst": mpst_truth,
            "doc": doc_truth,
            "amazon": amazon_truth,
        },
    )
    with atomic_write(root / "README.md") as f:
        f.write(_README.format(seed=seed, formula=SCORE_FORMULA))
    return data
