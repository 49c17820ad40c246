"""Contamination probe: does the model recognise a synopsis? (paper, Appendix A)

The model is asked for the title of each synopsis in each of its forms (raw, anonymized,
summarized). A synopsis counts as memorized when the normalized true title appears, as whole
words, in the normalized answer. The share memorized per form shows how much anonymization and
summarization hid; the per-record flags let an evaluation report correlations separately for
memorized and unmemorized items.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from data_prep.perse.llm_step import run_step
from persetrain.engine.types import GenerationParams
from persetrain.prompts.perse import TITLE

if TYPE_CHECKING:
    from persetrain.engine import Engine

TITLE_SCHEMA: dict = {
    "type": "object",
    "properties": {"title": {"type": "string", "maxLength": 100}},
    "required": ["title"],
    "additionalProperties": False,
}


def normalize_title(text: str) -> str:
    """Lower case, accents and punctuation dropped, single spaces: 'Amélie!' -> 'amelie'."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def title_memorized(true_title: str, answer: str) -> bool:
    """True when the whole normalized title occurs in the answer ('Up' is not found in 'Upside')."""
    title = normalize_title(true_title)
    return bool(title) and f" {title} " in f" {normalize_title(answer)} "


def parse_title(text: str) -> str | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict) and isinstance(data.get("title"), str):
        return data["title"].strip()
    return None


@dataclass(frozen=True)
class ProbeResult:
    """``summary[variant]`` = {"n", "memorized", "share", "unanswered"}; ``records`` one per probe."""

    summary: dict[str, dict]
    records: list[dict]


def probe_titles(
    engine: Engine,
    variants: Mapping[str, Mapping[str, str]],
    titles: Mapping[str, str],
    out_path: str | Path,
    seed: int = 0,
    max_tries: int = 2,
    max_new_tokens: int = 48,
    batch_size: int = 16,
) -> ProbeResult:
    """Ask for the title of every text in ``variants`` (variant name -> plot id -> text).

    Records: ``{"id": "<variant>:<plot id>", "variant", "plot_id", "answer", "memorized"}``; a text
    with no parseable answer after ``max_tries`` counts as ``unanswered``, not as unmemorized.
    """
    requests, keys = {}, {}
    for variant, texts in variants.items():
        for pid, text in texts.items():
            key = f"{variant}:{pid}"
            requests[key] = TITLE.render(id=key, plot=text)
            keys[key] = (variant, pid)
    params = GenerationParams(max_new_tokens=max_new_tokens, seed=seed, json_schema=TITLE_SCHEMA)

    def check(key: str, text: str) -> dict | None:
        answer = parse_title(text)
        if answer is None:
            return None
        variant, pid = keys[key]
        return {"variant": variant, "plot_id": pid, "answer": answer, "memorized": title_memorized(titles[pid], answer)}

    result = run_step(engine, requests, params, check, out_path, "title probe", max_tries, batch_size)
    summary = {}
    for variant, texts in variants.items():
        done = [r for r in result.records.values() if r["variant"] == variant]
        memorized = sum(r["memorized"] for r in done)
        summary[variant] = {
            "n": len(texts),
            "memorized": memorized,
            "unanswered": len(texts) - len(done),
            "share": memorized / len(done) if done else None,
        }
    return ProbeResult(summary=summary, records=list(result.records.values()))
