"""Distractor rules for PARL's rule verifier: generic surface properties that no synthetic user plants.

A verifier trained on the signature rules alone learns what those rules look like, not to read a rule: outside
them it says "yes" to almost any rule on a quirky text. A GRPO policy found that blind spot: its valid rubric
sets filled with one-off rules such as "The headline is all capital letters." on a lowercase writer's texts, or
"opens with the word 'LADY'", which the judge passed on every quirky writer, so the sets stopped telling users
apart (``docs/findings/2026-11-27-parl-grpo-temperature.md``). The rules here aim to teach the verifier to
answer "no" to a rule the text does not satisfy, whatever rule it is. Measured, a 135M verifier learns the kinds
it trains on and stays at chance on the held-out kinds
(``docs/findings/2026-11-27-parl-distractors-user-negatives.md``).

Each distractor is a property with a slot (a word, a letter, a count) whose answer its draw knows exactly
(``tests/test_parl_distractors.py`` decides every label again with checkers of its own). For every text it gives one
"yes" and one "no" check: the slot drawn from the text for "yes" and elsewhere for "no" (half the time a word of
the same text in another position, where there is one), or, for a property the texts never have, an edited copy that
has it (an upper-cased copy for "all capital letters"). Both checks ask about the same text, so only reading the
rule separates them.

``TRAIN`` distractors are trained on in their first ``TRAIN_WORDINGS`` wordings and validated in the others;
``HELD_OUT`` distractors are validated only: rules of a shape the verifier never trained on, which is where the
blind spot was.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

#: Wordings of a train distractor used for training (its first ones); validation uses the others.
TRAIN_WORDINGS = 2
#: What a distractor row's ``rule_name`` starts with in the verifier data (a signature's name never does).
RULE_PREFIX = "distractor:"

_WORD = re.compile(r"[A-Za-z][A-Za-z']*")
_END = re.compile(r"[.!?]+$")


def words(text: str) -> list[str]:
    """The text's words, punctuation and digits dropped."""
    return _WORD.findall(text)


@dataclass(frozen=True)
class Check:
    """One distractor check: a text, the rule (slot filled) and whether the text satisfies it."""

    text: str
    rule: str
    satisfied: bool


#: ``(text, wording, pool, rng) -> checks``: a "yes" and a "no" check of one text where both exist.
Draw = Callable[[str, str, Sequence[str], random.Random], list[Check]]


@dataclass(frozen=True)
class Distractor:
    """A slotted surface property: its name, wordings (``{unit}`` is the task's unit, ``{slot}`` the slot) and the
    draw of its checks on one text."""

    name: str
    wordings: tuple[str, ...]
    draw: Draw


def _other_word(text: str, avoid: str, pool: Sequence[str], rng: random.Random) -> str | None:
    """A word that is not ``avoid``: from the same text when it has one (the hard case), else from ``pool``."""
    same = [w for w in words(text) if w.casefold() != avoid.casefold()]
    if same and rng.random() < 0.5:
        return rng.choice(same)
    others = [w for w in pool if w.casefold() != avoid.casefold()]
    return rng.choice(others) if others else None


def _position_word(index: int) -> Draw:
    """The text's word at ``index`` (0 first, -1 last) is the slot."""

    def draw(text: str, wording: str, pool: Sequence[str], rng: random.Random) -> list[Check]:
        ws = words(text)
        if not ws:
            return []
        checks = [Check(text, wording.format(slot=ws[index]), True)]
        if (other := _other_word(text, ws[index], pool, rng)) is not None:
            checks.append(Check(text, wording.format(slot=other), False))
        return checks

    return draw


def _contains_word(text: str, wording: str, pool: Sequence[str], rng: random.Random) -> list[Check]:
    ws = words(text)
    present = {w.casefold() for w in ws}
    absent = [w for w in pool if w.casefold() not in present]
    checks = [Check(text, wording.format(slot=rng.choice(ws)), True)] if ws else []
    if absent:
        checks.append(Check(text, wording.format(slot=rng.choice(absent)), False))
    return checks


def _first_letter(text: str, wording: str, pool: Sequence[str], rng: random.Random) -> list[Check]:
    first = next((c.upper() for c in text if c.isalpha()), None)
    if first is None:
        return []
    other = rng.choice([c for c in string.ascii_uppercase if c != first])
    return [Check(text, wording.format(slot=first), True), Check(text, wording.format(slot=other), False)]


def _count(more: bool) -> Draw:
    """The length rules, "more than N words" (``more``) or "fewer than N words"; N within 4 of the length."""

    def draw(text: str, wording: str, pool: Sequence[str], rng: random.Random) -> list[Check]:
        n = len(text.split())
        low, high = range(max(1, n - 4), n), range(n + 1, n + 5)  # N below / above the length
        true_ns, false_ns = (low, range(n, n + 5)) if more else (high, range(max(1, n - 4), n + 1))
        checks = [Check(text, wording.format(slot=rng.choice(false_ns)), False)]
        return checks + ([Check(text, wording.format(slot=rng.choice(true_ns)), True)] if true_ns else [])

    return draw


def _all_caps(text: str, wording: str, pool: Sequence[str], rng: random.Random) -> list[Check]:
    """The text as it is ("no": no synthetic text is all capitals) and its upper-cased copy ("yes")."""
    if not any(c.islower() for c in text):
        return []
    return [Check(text, wording, False), Check(text.upper(), wording, True)]


def _period_end(text: str, wording: str, pool: Sequence[str], rng: random.Random) -> list[Check]:
    """The text ending in a period ("yes") and in no period ("no"), one of them an edit of the text."""
    body = _END.sub("", text.rstrip())
    return [Check(body + ".", wording, True), Check(body + rng.choice(("!", "?", "")), wording, False)]


TRAIN: tuple[Distractor, ...] = (
    Distractor(
        "first_word",
        (
            "The {unit} opens with the word '{slot}'.",
            "The first word of the {unit} is '{slot}'.",
            "The user always begins the {unit} with '{slot}'.",
            "'{slot}' is the word this writer puts first in the {unit}.",
        ),
        _position_word(0),
    ),
    Distractor(
        "contains_word",
        (
            "The {unit} contains the word '{slot}'.",
            "The word '{slot}' appears in the {unit}.",
            "This writer uses the word '{slot}' in the {unit}.",
            "Somewhere in the {unit}, the word '{slot}' is used.",
        ),
        _contains_word,
    ),
    Distractor(
        "first_letter",
        (
            "The {unit} starts with the letter '{slot}'.",
            "The first letter of the {unit} is {slot}.",
            "The user begins the {unit} with a word starting with '{slot}'.",
            "The {unit}'s opening character is the letter {slot}.",
        ),
        _first_letter,
    ),
    Distractor(
        "more_words",
        (
            "The {unit} is more than {slot} words long.",
            "The {unit} has over {slot} words.",
            "The user writes a {unit} longer than {slot} words.",
            "The {unit} runs past {slot} words in length.",
        ),
        _count(more=True),
    ),
    Distractor(
        "all_caps",
        (
            "The {unit} is written entirely in capital letters.",
            "Every letter of the {unit} is uppercase.",
            "The writer types the whole {unit} in CAPS.",
            "The {unit} uses only capital letters, with no lowercase at all.",
        ),
        _all_caps,
    ),
)

HELD_OUT: tuple[Distractor, ...] = (
    Distractor(
        "last_word",
        ("The {unit} ends with the word '{slot}'.", "The final word of the {unit} is '{slot}'."),
        _position_word(-1),
    ),
    Distractor(
        "fewer_words",
        ("The {unit} has fewer than {slot} words.", "The {unit} is shorter than {slot} words."),
        _count(more=False),
    ),
    Distractor(
        "period_end",
        ("The {unit} ends with a period.", "A full stop closes the {unit}."),
        _period_end,
    ),
)


def distractor_checks(
    text: str, unit: str, split: str, pool: Sequence[str], rng: random.Random
) -> Iterator[tuple[str, int, Check]]:
    """``(distractor name, wording index, check)`` of every distractor of ``split`` on ``text``: train rows use
    the train distractors' first ``TRAIN_WORDINGS`` wordings; validation rows their other wordings and the
    held-out distractors. ``pool`` holds the words of the split's texts, for the "no" slots."""
    kinds = TRAIN if split == "train" else TRAIN + HELD_OUT
    for d in kinds:
        if split == "train":
            indices = range(TRAIN_WORDINGS)
        elif d in TRAIN:
            indices = range(TRAIN_WORDINGS, len(d.wordings))
        else:
            indices = range(len(d.wordings))
        index = rng.choice(indices)
        wording = d.wordings[index].replace("{unit}", unit)
        for check in d.draw(text, wording, pool, rng):
            yield d.name, index, check
