"""Invented names for the SYNTHETIC sample data: syllables glued together, so no real film, book or
person is ever named."""

from __future__ import annotations

import random

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


def first_name(rng: random.Random) -> str:
    return _word(rng, rng.choice((2, 2, 3)))


def family_name(rng: random.Random) -> str:
    return _word(rng, 1) + rng.choice(_FAMILY_ENDINGS)


def place_name(rng: random.Random) -> str:
    return rng.choice(_PLACE_PREFIXES) + _word(rng, rng.choice((1, 2))) + rng.choice(_PLACE_ENDINGS)
