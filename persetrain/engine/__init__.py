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
    ``hf`` backend has no server, so a ``base_url`` there is ignored.
    """
    if backend == "hf":
        from persetrain.engine.hf import HFBackend

        impl: Backend = HFBackend(model, **backend_options)
    elif backend == "openai":
        from persetrain.engine.openai_compat import OpenAIBackend

        impl = OpenAIBackend(model, base_url=base_url, **backend_options)
    else:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    return Engine(impl, RequestCache(cache_path) if cache_path else None)
