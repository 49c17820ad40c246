"""Generate, read, and retry what could not be read: the one loop every step that parses a model's answer runs.

A JSON answer (PREF's stages, ExPerT's aspects and matches, PARL's rubric sets, the data-preparation steps)
can come back unreadable. The loop asks again for the failures only, each new try a seeded sample, so a
retry can answer differently while a rerun of the whole step repeats the same calls (and hits the engine's
request cache). What still fails after the last try is returned as unread with its last text: each caller
decides what an unread answer means (a note, an unparsed judgment, a record left out).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from persetrain.console import track
from persetrain.engine.types import ChatRequest, Cost, GenerationParams

if TYPE_CHECKING:
    from persetrain.engine.base import Engine

#: Reads one answer's text: the parsed value, or None when the answer is unusable.
Parser = Callable[[str], object | None]


@dataclass(frozen=True)
class RetrySchedule:
    """How many tries, and the decoding of each: the first as given (greedy by default), then seeded samples.

    Try ``k >= 1`` samples with seed ``params.seed + k * seed_stride`` at a temperature of at least
    ``temperature`` and at least ``k * temperature_step``. The step is ExPerT's package protocol (0.1, 0.2,
    ... per retry); the stride keeps a retry's seed off the seeds of other runs when a caller's runs use
    consecutive seeds (PARL).
    """

    #: Tries in all, the first included.
    tries: int = 3
    temperature: float = 0.7
    temperature_step: float = 0.0
    seed_stride: int = 1

    def __post_init__(self) -> None:
        if self.tries < 1:
            raise ValueError(f"a retry schedule needs at least 1 try, not {self.tries}")

    def params(self, params: GenerationParams, attempt: int) -> GenerationParams:
        """The decoding of try ``attempt`` (0 is the first) of a request first decoded with ``params``."""
        if attempt == 0:
            return params
        temperature = max(params.temperature, self.temperature, attempt * self.temperature_step)
        return params.model_copy(update={"seed": params.seed + attempt * self.seed_stride, "temperature": temperature})


class Parsed(NamedTuple):
    """One request's outcome: the parsed value (None: unread after every try), the last text, the cost of every
    try, and how many tries it took."""

    value: object | None
    text: str
    cost: Cost
    tries: int


def generate_parsed(
    engine: Engine,
    requests: Sequence[ChatRequest],
    params: GenerationParams | Sequence[GenerationParams],
    parse: Parser | Sequence[Parser],
    schedule: RetrySchedule,
    description: str,
    batch_size: int | None = None,
    on_parsed: Callable[[int, Parsed], None] | None = None,
) -> list[Parsed]:
    """One :class:`Parsed` per request, trying each failure again as ``schedule`` says (module docstring).

    ``params`` and ``parse`` are one for all requests or one per request. With ``batch_size``, each try runs in
    batches of that many requests under a progress bar, and ``on_parsed(index, outcome)`` hears of each read
    answer as soon as its batch is done, so that a caller can keep it before the next batch (a resumable file).
    """
    per_params = [params] * len(requests) if isinstance(params, GenerationParams) else list(params)
    parsers = list(parse) if isinstance(parse, Sequence) else [parse] * len(requests)
    results = [Parsed(None, "", Cost(), 0) for _ in requests]
    todo = list(range(len(requests)))
    for attempt in range(schedule.tries):
        if not todo:
            break
        label = description if attempt == 0 else f"{description} (retry {attempt})"
        size = batch_size or len(todo)
        batches = [todo[i : i + size] for i in range(0, len(todo), size)]
        failed: list[int] = []
        for batch in track(batches, description=label, disable=batch_size is None):
            batch_params = [schedule.params(per_params[i], attempt) for i in batch]
            generations = engine.generate([requests[i] for i in batch], batch_params, description=label)
            for i, generation in zip(batch, generations, strict=True):
                value = parsers[i](generation.text)
                results[i] = Parsed(value, generation.text, results[i].cost + generation.cost, attempt + 1)
                if value is None:
                    failed.append(i)
                elif on_parsed is not None:
                    on_parsed(i, results[i])
        todo = failed
    return results


def none_on_error(parse: Callable[[str], object]) -> Parser:
    """A parser that raises on an unreadable answer (``ValueError``, ``KeyError``, ``TypeError``) as one that
    returns None."""

    def read(text: str) -> object | None:
        try:
            return parse(text)
        except (ValueError, KeyError, TypeError):
            return None

    return read
