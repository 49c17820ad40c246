"""Anonymize plots: the LLM lists names and new names, code does the replacing (paper, Appendix B).

The model is never asked to rewrite the text, only to return a mapping ``{old name: new name}``,
because a model that rewrites a synopsis also paraphrases and hallucinates. The mapping is checked
(non-empty, actually changed, actually in the text), completed so that relatives keep a shared
family name, and applied by whole-word replacement, longest name first, in a single pass.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from data_prep.perse.llm_step import StepResult, run_step
from persetrain.engine.types import GenerationParams
from persetrain.prompts.perse import ANONYMIZE

if TYPE_CHECKING:
    from persetrain.engine import Engine

#: Replacement names the model chooses from. Offering a per-plot pool (names absent from that plot)
#: as the ``enum`` of "new_name" rules out the failure modes of small models: copying the old name,
#: copying the prompt's example, or writing a phrase instead of a name.
FIRST_NAMES = (
    "Alma Bruno Celia Dario Edith Felix Greta Hugo Ines Jonas Klara Leon Mira Nils Olga Pavel Rosa Silas Tilda "
    "Ugo Vera Walt Xenia Yusuf Zora Amos Bette Cyril Dora Emil Freya Gideon Hedda Ivo Jolene Kasimir Lotte Milo "
    "Nora Otto"
).split()
FAMILY_NAMES = (
    "Abernathy Bellweather Castellan Draycott Ellery Fairbanks Greenhalgh Hartigan Ibsen Jablonski Kettering "
    "Lindqvist Montague Nakamura Oyelaran Pemberton Quintero Rasmussen Saltonstall Thibodeaux Underhill Valcourt "
    "Whitlock Yarborough Zellweger"
).split()
POOL_SIZE = 24
#: Capitalised words that start sentences rather than name anyone.
_NOT_NAMES = frozenset(
    {
        "A",
        "An",
        "The",
        "This",
        "That",
        "These",
        "Those",
        "When",
        "While",
        "After",
        "Before",
        "Then",
        "There",
        "Their",
        "They",
        "He",
        "She",
        "His",
        "Her",
        "Him",
        "It",
        "Its",
        "In",
        "On",
        "At",
        "As",
        "Of",
        "For",
        "From",
        "With",
        "Without",
        "But",
        "And",
        "Or",
        "Nor",
        "So",
        "Yet",
        "If",
        "One",
        "Two",
        "Three",
        "Meanwhile",
        "Later",
        "Soon",
        "Years",
        "Eventually",
        "Finally",
        "However",
        "Although",
        "Though",
        "Once",
        "During",
        "Despite",
        "Unbeknownst",
        "Back",
        "Now",
        "Still",
        "Even",
        "Only",
    }
)
_CANDIDATE = re.compile(r"[A-Z][\w'\-]*(?:\s+[A-Z][\w'\-]*)*")


def name_candidates(text: str) -> list[str]:
    """Capitalised spans of ``text`` that could be names, and each word of the multi-word ones.

    These become the ``enum`` of the names the model may list, so a small model can only pick
    strings that really occur in the plot (it cannot copy the prompt's example or invent one).
    """
    found: dict[str, None] = {}
    for match in _CANDIDATE.finditer(text):
        words = [w for w in match.group(0).split() if w not in _NOT_NAMES]
        if not words:
            continue
        found[" ".join(words)] = None
        for word in words if len(words) > 1 else []:
            found[word] = None
    return [name for name in found if _word_pattern([name]).search(text)]


def name_pool(text: str, seed: str) -> list[str]:
    """Fresh first names and full names for one plot, none of whose words occur in it."""
    rng = random.Random(seed)
    used = set(re.findall(r"\w+", text))
    firsts = [n for n in FIRST_NAMES if n not in used]
    families = [n for n in FAMILY_NAMES if n not in used]
    rng.shuffle(firsts)
    rng.shuffle(families)
    half = POOL_SIZE // 2
    return firsts[:half] + [f"{f} {fam}" for f, fam in zip(firsts[half:], families, strict=False)][:half]


def mapping_schema(text: str, seed: str = "0") -> dict | None:
    """The JSON schema of one plot's answer; None when the plot has no candidate name at all.

    An array of {"name", "new_name"} objects: small models fill fixed keys far more reliably than an
    object whose keys are the names themselves, and "name" comes first so the model reads the old
    name before inventing the new one.
    """
    candidates = name_candidates(text)
    if not candidates:
        return None
    item = {
        "type": "object",
        "properties": {"name": {"enum": candidates}, "new_name": {"enum": name_pool(text, seed)}},
        "required": ["name", "new_name"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"names": {"type": "array", "items": item, "minItems": 1, "maxItems": min(6, len(candidates))}},
        "required": ["names"],
        "additionalProperties": False,
    }


_FAMILY = re.compile(r"[A-Z][\w'\-]*")


def _word_pattern(names: Iterable[str]) -> re.Pattern:
    """Match any of ``names`` as whole words; longest first so 'John Smith' wins over 'John'."""
    ordered = sorted(set(names), key=len, reverse=True)
    return re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in ordered) + r")(?!\w)")


_PAIR = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"new_name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}')


def parse_mapping(text: str) -> list[tuple[str, str]] | None:
    """Read the model's answer as (old, new) pairs; None when it holds no usable pair.

    Accepts the schema's ``{"names": [{"name", "new_name"}]}`` and, for servers that ignore the
    schema, a plain ``{"old name": "new name"}`` object. An answer cut off by the token budget
    (small models tend to repeat entries until it runs out) keeps its complete entries.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        pairs = [(json.loads(f'"{a}"'), json.loads(f'"{b}"')) for a, b in _PAIR.findall(text)]
        return pairs or None
    if isinstance(data, dict) and isinstance(data.get("names"), list):
        pairs = [(e.get("name"), e.get("new_name")) for e in data["names"] if isinstance(e, dict)]
    elif isinstance(data, dict):
        pairs = list(data.items())
    else:
        return None
    return [(old, new) for old, new in pairs if isinstance(old, str) and isinstance(new, str)]


def valid_mapping(pairs: Iterable[tuple[str, str]], text: str) -> dict[str, str]:
    """Keep the entries worth applying: both names non-empty, a real change, the old name present
    in ``text`` as a whole word, and the new name absent from it and not given to another name
    (else two characters would merge into one). The first entry for a name wins.
    """
    mapping: dict[str, str] = {}
    for old, new in pairs:
        old, new = " ".join(old.split()), " ".join(new.split())
        if not old or not new or old == new or old in mapping or new in mapping.values():
            continue
        if _word_pattern([old]).search(text) and not _word_pattern([new]).search(text):
            mapping[old] = new
    return mapping


def share_family_names(mapping: Mapping[str, str]) -> dict[str, str]:
    """Make relatives keep one shared new family name, and rename the bare family name too.

    From multi-word entries ('John Smith' -> 'Tom Brown') the old family name ('Smith') gets one new
    family name: an explicit single-word entry for it if the model gave one, else the first
    multi-word entry's that actually differs from the old one. Every multi-word entry with that old
    family name is rewritten to end with it ('Iris Smith' -> 'Emily Jones' becomes 'Emily Brown'),
    and a bare 'Smith' is mapped to 'Brown' unless the model mapped it already.
    """
    families: dict[str, str] = {}
    for old, new in mapping.items():
        old_parts, new_parts = old.split(), new.split()
        if len(old_parts) < 2 or len(new_parts) < 2 or not _FAMILY.fullmatch(old_parts[-1]):
            continue
        family = old_parts[-1]
        explicit = mapping.get(family, "")
        if len(explicit.split()) == 1 and explicit != family:
            families[family] = explicit
        elif family not in families and new_parts[-1] != family:
            families[family] = new_parts[-1]
    result: dict[str, str] = {}
    for old, new in mapping.items():
        old_parts, new_parts = old.split(), new.split()
        if len(old_parts) >= 2 and len(new_parts) >= 2 and old_parts[-1] in families:
            new = " ".join(new_parts[:-1] + [families[old_parts[-1]]])
        result[old] = new
    for family, new_family in families.items():
        result.setdefault(family, new_family)
    return result


def apply_mapping(text: str, mapping: Mapping[str, str]) -> str:
    """Replace every whole-word occurrence of each old name in one pass (so swaps are safe)."""
    if not mapping:
        return text
    return _word_pattern(mapping).sub(lambda m: mapping[m.group(0)], text)


def anonymize_text(text: str, pairs: Iterable[tuple[str, str]]) -> tuple[str, dict[str, str]]:
    """The code half of anonymization: validate, share family names, replace."""
    mapping = share_family_names(valid_mapping(pairs, text))
    return apply_mapping(text, mapping), mapping


def anonymize_plots(
    engine: Engine,
    plots: Mapping[str, str],
    out_path: str | Path,
    seed: int = 0,
    max_tries: int = 3,
    max_new_tokens: int = 192,
    temperature: float = 0.0,
    batch_size: int = 16,
) -> StepResult:
    """Anonymize ``plots`` (id -> text). Records: ``{"id", "text", "mapping"}``.

    A plot whose answers are malformed or name nothing found in it, ``max_tries`` times over, is
    reported and left out (``StepResult.failed``).
    """
    schemas = {pid: mapping_schema(text, seed=f"{seed}:{pid}") for pid, text in plots.items()}
    requests = {pid: ANONYMIZE.render(id=pid, plot=text) for pid, text in plots.items() if schemas[pid]}
    params = {
        pid: GenerationParams(
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, json_schema=schemas[pid]
        )
        for pid in requests
    }

    def check(pid: str, answer: str) -> dict | None:
        pairs = parse_mapping(answer)
        if pairs is None:
            return None
        text, mapping = anonymize_text(plots[pid], pairs)
        return {"text": text, "mapping": mapping} if mapping else None

    result = run_step(engine, requests, params, check, out_path, "anonymize", max_tries, batch_size)
    for pid in plots:  # a plot that names no one is already anonymous
        if schemas[pid] is None:
            result.records[pid] = {"id": pid, "text": plots[pid], "mapping": {}}
    return result
