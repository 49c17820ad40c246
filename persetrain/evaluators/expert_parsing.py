"""ExPerT's answers read back: aspect lists, match and alignment objects; ValueError when unreadable.

Kept apart from the pipeline (``evaluators.expert_pipeline``), which retries what these refuse, so that what
counts as a readable answer can be read and tested without an engine.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NoReturn


def cut_words(text: str, words: int) -> str:
    """The first ``words`` words of ``text`` (texts are cut before extraction)."""
    parts = text.split()
    return " ".join(parts[:words])


def parse_aspects(text: str) -> list[dict]:
    """The extraction answer as a list of aspects; ValueError when it is not one."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg})") from None
    if not isinstance(data, list):
        raise ValueError("not a JSON list")
    aspects = []
    for item in data:
        if not isinstance(item, dict):
            raise ValueError("an aspect is not an object")
        title, description, evidence = item.get("title"), item.get("description", ""), item.get("evidence")
        if not isinstance(title, str) or not title.strip() or not isinstance(evidence, list):
            raise ValueError("an aspect lacks a title or an evidence list")
        evidence = [e.strip() for e in evidence if isinstance(e, str) and e.strip()]
        if not evidence:
            raise ValueError(f"aspect {title!r} has no evidence")
        aspects.append({"title": title.strip(), "description": str(description).strip(), "evidence": evidence})
    return aspects


def parse_json_field(text: str, field: str, allowed: Sequence[str]) -> tuple[str, str]:
    """(answer, reason) of a match or alignment object written by the model."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not JSON ({err.msg})") from None
    if not isinstance(data, dict) or field not in data:
        raise ValueError(f"no {field!r} in the answer")
    value = data[field]
    if value not in allowed:
        raise ValueError(f"{field} {value!r} is not one of {list(allowed)}")
    return value, str(data.get("reason", ""))


def refuse_unfinished(text: str) -> NoReturn:
    """An alignment reason that stopped before its end: raised so that the step is retried."""
    raise ValueError(f"unfinished answer {text[-40:]!r}")
