"""SYNTHETIC story plots: genre mixes, MPST-like synopses and titles (``data_prep.synthetic.perse``).

A plot's genre mix (weights over ``GENRES`` summing to 1) decides which genre sentences its synopsis is
made of, so every genre that moves a reviewer's score is named in the text a judge reads.
"""

from __future__ import annotations

import random
import re

from data_prep.synthetic.names import family_name, first_name, place_name

GENRES: tuple[str, ...] = ("horror", "comedy", "romance", "science fiction", "western", "fantasy")
#: Spread of a plot's own merit, which every reviewer feels. No text shows it to a judge (only other
#: reviewers' scores do, which is what matrix factorization uses), so it is kept below the spread of taste.
PLOT_QUALITY_SD = 0.7

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


def genre_mix(rng: random.Random) -> dict[str, float]:
    """1-3 genres with random weights summing to 1 (most films are a blend)."""
    chosen = rng.sample(GENRES, rng.choice((1, 2, 2, 3)))
    raw = [rng.random() + 0.3 for _ in chosen]
    return {g: round(w / sum(raw), 3) for g, w in zip(chosen, raw, strict=True)}


def _cast(rng: random.Random) -> dict[str, str]:
    """Invented names for one story; the relative shares the hero's family name on purpose."""
    family = family_name(rng)
    hero_first, kin_first, rival_first = first_name(rng), first_name(rng), first_name(rng)
    place, place2 = place_name(rng), place_name(rng)
    while place2 == place:
        place2 = place_name(rng)
    return {
        "hero": f"{hero_first} {family}",
        "hero_first": hero_first,
        "family": family,
        "kin": f"{kin_first} {family}",
        "kin_first": kin_first,
        "rival": f"{rival_first} {family_name(rng)}",
        "rival_first": rival_first,
        "place": place,
        "place2": place2,
    }


def synopsis(rng: random.Random, mix: dict[str, float]) -> str:
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


def blurb(synopsis: str, words: int) -> str:
    """Whole sentences of ``synopsis`` up to about ``words`` words (at least the first sentence)."""
    sentences = re.split(r"(?<=\.) ", synopsis)
    kept = [sentences[0]]
    for sentence in sentences[1:]:
        if len(" ".join(kept + [sentence]).split()) > words:
            break
        kept.append(sentence)
    return " ".join(kept)


def story_title(rng: random.Random, taken: set[str]) -> str:
    while True:
        title = rng.choice(
            (
                f"The {rng.choice(_TITLE_ADJECTIVES)} {rng.choice(_TITLE_NOUNS)}",
                f"{place_name(rng)} {rng.choice(_TITLE_NOUNS)}",
                f"The {rng.choice(_TITLE_NOUNS)} of {place_name(rng)}",
            )
        )
        if title not in taken:
            taken.add(title)
            return title
