"""PREF's answers read back: the JSON of each stage parsed (None when unreadable).

Kept apart from the stages (``evaluators.pref_stages``, which retry what fails with
``persetrain.engine.retry``) so that what counts as a readable answer can be read and tested without an engine.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from persetrain.prompts.pref import ADDED_PREFIX, SCORE_MAX, SCORE_MIN


def _json(text: str) -> object | None:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def parse_factors(text: str) -> dict[str, str] | None:
    obj = _json(text)
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, str) for v in obj.values()):
        return None
    return {str(k).strip(): v.strip() for k, v in obj.items()}


def parse_weights(keys: Sequence[str]) -> Callable[[str], dict[str, int] | None]:
    """Stage 2 must weigh every coverage factor; added keys must carry the ``preh_`` prefix."""

    def parse(text: str) -> dict[str, int] | None:
        obj = _json(text)
        if not isinstance(obj, dict) or any(k not in obj for k in keys):
            return None
        weights = {}
        for key, value in obj.items():
            if key not in keys and not key.startswith(ADDED_PREFIX):
                return None
            if not isinstance(value, int) or isinstance(value, bool) or not SCORE_MIN <= value <= SCORE_MAX:
                return None
            weights[key] = value
        return weights

    return parse


def parse_scores(n: int) -> Callable[[str], list[float] | None]:
    def parse(text: str) -> list[float] | None:
        obj = _json(text)
        if (
            not isinstance(obj, list)
            or len(obj) != n
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in obj)
            or not all(SCORE_MIN <= v <= SCORE_MAX for v in obj)
        ):
            return None
        return [float(v) for v in obj]

    return parse
