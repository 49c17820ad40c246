"""Run one LLM step (anonymize, summarize, title probe) over many records, resumably.

The three steps share one shape: build a request per record, generate in batches, check each answer,
retry the ones whose answer failed the check with a new seed, and give up on a record after a
bounded number of tries (the loop of ``persetrain.engine.retry``). Progress is kept twice: finished
records go to an append-only JSONL (``persetrain.io.ResumableJsonl``) so a rerun skips them, and the
engine's request cache keeps the raw generations of a batch that was interrupted midway.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from persetrain.console import warn
from persetrain.engine.retry import RetrySchedule, generate_parsed
from persetrain.engine.types import ChatRequest, GenerationParams
from persetrain.io import ResumableJsonl

if TYPE_CHECKING:
    from persetrain.engine import Engine

#: Turns ``(record key, generated text)`` into the fields to store, or None when the answer is unusable.
Check = Callable[[str, str], dict | None]


@dataclass
class StepResult:
    """Output records by key, and the keys that still failed after every try (kept out)."""

    records: dict[str, dict]
    failed: list[str] = field(default_factory=list)
    path: Path | None = None


def run_step(
    engine: Engine,
    requests: Mapping[str, ChatRequest],
    params: GenerationParams | Mapping[str, GenerationParams],
    check: Check,
    out_path: str | Path,
    name: str,
    max_tries: int = 3,
    batch_size: int = 16,
    retry_temperature: float = 0.7,
) -> StepResult:
    """Generate an answer for every request not already in ``out_path``; see the module docstring.

    ``params`` is one setting for every record or one per record key (e.g. a schema per record).
    The first try uses ``params`` as given (greedy by default). Try ``t >= 1`` uses seed
    ``params.seed + t`` and a temperature of at least ``retry_temperature``, so a retry can answer
    differently, while a rerun of the whole step repeats the same calls and hits the cache.
    """
    schedule = RetrySchedule(tries=max_tries, temperature=retry_temperature)
    with ResumableJsonl(out_path, key="id") as out:
        pending = [key for key in requests if key not in out.done]
        found = generate_parsed(
            engine,
            [requests[key] for key in pending],
            params if isinstance(params, GenerationParams) else [params[key] for key in pending],
            [partial(check, key) for key in pending],
            schedule,
            name,
            batch_size=batch_size,
            on_parsed=lambda i, parsed: out.append({"id": pending[i], **parsed.value}),
        )
        failed = [key for key, parsed in zip(pending, found, strict=True) if parsed.value is None]
        for key in failed:
            warn(f"{name}: no usable answer for record {key!r} after {max_tries} tries; it is left out")
        path = out.finalize()
        records = {r["id"]: r for r in out.records if r["id"] in requests}
    return StepResult(records=records, failed=failed, path=path)
