"""Negatives for PARL: the outputs of competitive generators for every task input (``generate-baselines``).

A generator is a prompt strategy and a model spec, written ``NAME=KIND:MODEL`` (or ``KIND:MODEL``,
named after its kind):

* ``non`` — the task input alone (no history);
* ``rag`` — the BM25 top-``k`` (4, as in the paper) of the user's history items retrieved with the
  target input as the query (``rank-bm25``'s Okapi BM25 over lower-cased word tokens of each item's
  input and text), shown before the task.

Any model spec works for either kind, so an SFT or GRPO checkpoint plugs in as, say,
``sft=rag:runs/sft-generator``. Each generator's outputs go to ``out_dir/<NAME>.jsonl`` in the layout
``prepare parl`` reads (``{id, generator, output}``) through ``data_prep.perse.llm_step.run_step``: a rerun skips
finished records, the engine's request cache keeps an interrupted batch, and an empty answer is
retried with sampling, then left out with a warning (``prepare parl`` then names the example).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rank_bm25 import BM25Okapi

from data_prep.perse.llm_step import run_step
from persetrain.engine.types import GenerationParams
from persetrain.prompts.parl import GENERATE_TOKENS, generation_request
from persetrain.schema import RubricExample

KINDS: tuple[str, ...] = ("non", "rag")
RAG_K = 4
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class GeneratorSpec:
    name: str
    kind: str
    model: str

    @classmethod
    def parse(cls, text: str) -> GeneratorSpec:
        name, _, rest = text.partition("=") if "=" in text.split(":", 1)[0] else ("", "", text)
        kind, sep, model = rest.partition(":")
        if not sep or kind not in KINDS or not model:
            raise ValueError(f"generator {text!r}: expected NAME=KIND:MODEL or KIND:MODEL with KIND one of {KINDS}")
        return cls(name or kind, kind, model)


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def retrieve(example: RubricExample, k: int = RAG_K) -> list[tuple[str, str]]:
    """The ``k`` history items most similar to the target input under BM25, best first."""
    items = [(h.input, h.output) for h in example.history]
    if len(items) <= k:
        return items
    scores = BM25Okapi([_tokens(f"{i} {o}") for i, o in items]).get_scores(_tokens(example.input))
    order = sorted(range(len(items)), key=lambda j: (-scores[j], j))
    return [items[j] for j in order[:k]]


def generate_baselines(
    examples: Sequence[RubricExample],
    generators: Sequence[GeneratorSpec],
    out_dir: Path,
    make_engine: Callable[[str], object],
    seed: int = 0,
    batch_size: int = 16,
    max_new_tokens: int | None = None,
) -> dict[str, Path]:
    """Write every generator's output for every example; return the file of each generator."""
    written = {}
    for spec in generators:
        engine = make_engine(spec.model)
        requests = {
            ex.id: generation_request(ex.task, ex.input, retrieve(ex) if spec.kind == "rag" else (), id=ex.id)
            for ex in examples
        }
        params = {
            ex.id: GenerationParams(max_new_tokens=max_new_tokens or GENERATE_TOKENS[ex.task], seed=seed)
            for ex in examples
        }

        def check(key: str, text: str, name: str = spec.name) -> dict | None:
            text = text.strip()
            return {"generator": name, "output": text} if text else None

        result = run_step(
            engine,
            requests,
            params,
            check,
            out_dir / f"{spec.name}.jsonl",
            name=f"baseline {spec.name}",
            batch_size=batch_size,
        )
        written[spec.name] = result.path
    return written
