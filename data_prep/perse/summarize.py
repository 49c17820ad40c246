"""Summarize (anonymized) plots into their key events, the last step against memorization.

A summary drops the recognisable details a model may have memorized while keeping what a reviewer
reacted to (paper, Appendix B). ``max_new_tokens`` bounds its length; an answer cut off by that
bound is trimmed back to its last complete sentence.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from data_prep.perse.llm_step import StepResult, run_step
from persetrain.engine.types import GenerationParams
from persetrain.prompts.perse import SUMMARIZE

if TYPE_CHECKING:
    from persetrain.engine import Engine

#: Fewer words than this is not a summary of a plot (an empty or one-word answer gets a retry).
MIN_SUMMARY_WORDS = 5

_SENTENCE_END = re.compile(r"[.!?][\"')\]]?(?=\s|$)")


def clean_summary(text: str) -> str:
    """Collapse whitespace and drop a trailing unfinished sentence (when a finished one exists)."""
    text = " ".join(text.split())
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    if ends and ends[-1] < len(text):
        text = text[: ends[-1]]
    return text


def summarize_plots(
    engine: Engine,
    plots: Mapping[str, str],
    out_path: str | Path,
    seed: int = 0,
    max_tries: int = 2,
    max_new_tokens: int = 160,
    temperature: float = 0.0,
    batch_size: int = 16,
) -> StepResult:
    """Summarize ``plots`` (id -> text). Records: ``{"id", "summary"}``."""
    requests = {pid: SUMMARIZE.render(id=pid, plot=text) for pid, text in plots.items()}
    params = GenerationParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)

    def check(pid: str, answer: str) -> dict | None:
        summary = clean_summary(answer)
        return {"summary": summary} if len(summary.split()) >= MIN_SUMMARY_WORDS else None

    return run_step(engine, requests, params, check, out_path, "summarize", max_tries, batch_size)
