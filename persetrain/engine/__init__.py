"""The one inference engine. Build it with ``load_engine`` and use ``generate``/``choice_probs``.

Backends: ``hf`` (local transformers, shared-prefix KV reuse) and ``openai`` (any
OpenAI-compatible server: vLLM, SGLang, ``persetrain serve``). Imports of a backend's heavy
dependencies happen only when that backend is chosen.
"""

from __future__ import annotations

from pathlib import Path

from persetrain.engine.base import Backend, Engine, EngineError
from persetrain.engine.cache import RequestCache
from persetrain.engine.types import ChatRequest, ChoiceProbs, Cost, Generation, GenerationParams, Message
from persetrain.models import DEFAULT_MODEL

BACKENDS = ("hf", "openai")

__all__ = [
    "BACKENDS",
    "Backend",
    "ChatRequest",
    "ChoiceProbs",
    "Cost",
    "Engine",
    "EngineError",
    "Generation",
    "GenerationParams",
    "Message",
    "RequestCache",
    "load_engine",
]


def load_engine(
    model: str = DEFAULT_MODEL,
    backend: str = "hf",
    cache_path: str | Path | None = None,
    base_url: str | None = None,
    **backend_options,
) -> Engine:
    """Build an engine: the one place every command, trainer and evaluator makes one.

    ``cache_path`` enables the persistent request cache (SQLite file). For ``openai``, ``model`` is the
    served model name and ``base_url`` is required (``OpenAIBackend`` says so); the in-process
    ``hf`` backend has no server, so a ``base_url`` there is ignored. Several models joined by commas
    make one judge that averages their answers (``persetrain.engine.ensemble``).
    """
    names = [name.strip() for name in model.split(",")]
    if len(names) > 1:
        from persetrain.engine.ensemble import EnsembleBackend

        impl: Backend = EnsembleBackend([_backend(name, backend, base_url, backend_options) for name in names])
    else:
        impl = _backend(model, backend, base_url, backend_options)
    return Engine(impl, RequestCache(cache_path) if cache_path else None)


def _backend(model: str, backend: str, base_url: str | None, options: dict) -> Backend:
    if not model:
        raise ValueError("empty model spec (a judge ensemble names its checkpoints joined by commas: a,b)")
    if backend == "hf":
        from persetrain.engine.hf import HFBackend

        return HFBackend(model, **options)
    if backend == "openai":
        from persetrain.engine.openai_compat import OpenAIBackend

        return OpenAIBackend(model, base_url=base_url, **options)
    raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
