"""The engine facade every module talks to, and the contract its backends fulfil.

Callers use ``Engine.generate`` and ``Engine.choice_probs``. The facade owns what must exist
exactly once whatever the backend: the persistent request cache, cost accounting, progress and
the validation of choice sets. Backends only compute, and report each result as soon as it is
done (``on_done``) so that the cache keeps everything a crashed run finished.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from persetrain.console import progress
from persetrain.engine.cache import RequestCache, request_key
from persetrain.engine.types import ChatRequest, ChoiceProbs, Cost, Generation, GenerationParams

OnDone = Callable[[int, object], None]


class EngineError(RuntimeError):
    """A failure of the model or server behind the engine, with what to do about it."""


class Backend(ABC):
    #: Identifies the weights (and, for servers, the endpoint) so cached results never leak
    #: between models.
    fingerprint: str

    @abstractmethod
    def generate(self, requests: Sequence[ChatRequest], params: Sequence[GenerationParams], on_done: OnDone) -> None:
        """Compute a ``Generation`` for each request under its own ``params[i]``; call ``on_done(i, result)``."""

    @abstractmethod
    def choice_probs(self, requests: Sequence[ChatRequest], choices: Sequence[str], on_done: OnDone) -> None:
        """Compute a ``ChoiceProbs`` for each request; call ``on_done(index, result)`` for each."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing to release
        """Release resources (threads, connections)."""


def _request_payload(request: ChatRequest) -> dict:
    return request.model_dump(mode="json", exclude={"id"})


def validate_choices(choices: Sequence[str]) -> list[str]:
    choices = list(choices)
    if len(choices) < 2:
        raise ValueError(f"choice_probs needs at least two choices, got {choices!r}")
    if any(not c for c in choices):
        raise ValueError(f"choices must be non-empty strings, got {choices!r}")
    if len(set(choices)) != len(choices):
        raise ValueError(f"choices must be distinct, got {choices!r}")
    return choices


class Engine:
    """The one inference interface: cached, cost-accounted, with progress, over any backend."""

    def __init__(self, backend: Backend, cache: RequestCache | None = None):
        self.backend = backend
        self.cache = cache
        self.cost = Cost()  # what this engine actually spent; cache hits are free
        self.cache_hits = 0

    def generate(
        self,
        requests: Sequence[ChatRequest],
        params: GenerationParams | Sequence[GenerationParams] | None = None,
        description: str = "generate",
    ) -> list[Generation]:
        """Generate for every request; ``params`` is one setting for all or one per request.

        Per-request params let a batch carry a different grammar per row — e.g. an anonymization
        schema whose allowed names are the capitalised words of that row's own plot.
        """
        if params is None or isinstance(params, GenerationParams):
            per_request = [params or GenerationParams()] * len(requests)
        else:
            per_request = list(params)
            if len(per_request) != len(requests):
                raise ValueError(f"{len(per_request)} params for {len(requests)} requests")
        keys = [
            request_key(self.backend.fingerprint, "generate", _request_payload(r), p.model_dump(mode="json"))
            for r, p in zip(requests, per_request, strict=True)
        ]
        return self._run(
            requests,
            keys,
            Generation,
            description,
            lambda todo, done: self.backend.generate([requests[i] for i in todo], [per_request[i] for i in todo], done),
        )

    def choice_probs(
        self,
        requests: Sequence[ChatRequest],
        choices: Sequence[str],
        description: str = "choice_probs",
    ) -> list[ChoiceProbs]:
        choices = validate_choices(choices)
        keys = [request_key(self.backend.fingerprint, "choice_probs", _request_payload(r), choices) for r in requests]
        return self._run(
            requests,
            keys,
            ChoiceProbs,
            description,
            lambda todo, done: self.backend.choice_probs([requests[i] for i in todo], choices, done),
        )

    def _run(self, requests, keys, result_type, description, compute):
        """Results in request order: cache hits read back, each distinct request computed once.

        Identical requests in one call (same key: same text, settings and seed, so the same result) are
        computed once, with or without a cache; the copies come back as cache hits do (``cached``, their cost
        the one paid), so summing the costs of results counts the work once.
        """
        results: list = [None] * len(requests)
        hits = self.cache.get_many(list(set(keys))) if self.cache else {}
        first: dict[str, int] = {}  # key -> the request computed for it
        copies = []
        for i, (request, key) in enumerate(zip(requests, keys, strict=True)):
            if key in hits:
                results[i] = result_type.model_validate({**hits[key], "id": request.id, "cached": True})
                self.cache_hits += 1
            elif key in first:
                copies.append(i)
            else:
                first[key] = i
        todo = list(first.values())
        if todo:
            with progress() as bar:
                task = bar.add_task(description, total=len(todo))

                def done(j: int, result) -> None:
                    i = todo[j]
                    result = result.model_copy(update={"id": requests[i].id})
                    results[i] = result
                    self.cost = self.cost + result.cost
                    if self.cache is not None:
                        self.cache.put(keys[i], result.model_dump(mode="json", exclude={"id", "cached"}))
                    bar.advance(task)

                compute(todo, done)
        missing = [requests[i].id or i for i in todo if results[i] is None]
        if missing:
            raise EngineError(f"backend returned no result for requests {missing[:10]}")
        for i in copies:
            results[i] = results[first[keys[i]]].model_copy(update={"id": requests[i].id, "cached": True})
            self.cache_hits += 1
        return results

    def close(self) -> None:
        self.backend.close()
        if self.cache is not None:
            self.cache.close()
