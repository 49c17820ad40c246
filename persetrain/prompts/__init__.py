"""The one prompt registry: every template of every method, keyed by ``(method, task)``.

Templates are data, not logic: a system text, a user text with ``{field}`` slots and an optional
assistant prefix. ``render`` fills the slots and returns an engine request, so that the same
wording serves training data (``persetrain prepare``) and inference (``persetrain evaluate``).
Each method's templates live in their own module (``perse.py`` ...), which registers them on import
(``template.py``: ``PromptTemplate`` and ``register``).
"""

from __future__ import annotations

from persetrain.engine.types import ChatRequest
from persetrain.prompts.template import REGISTRY, PromptTemplate


def get(method: str, task: str) -> PromptTemplate:
    _load_all()
    try:
        return REGISTRY[(method, task)]
    except KeyError:
        known = ", ".join(f"{m}/{t}" for m, t in sorted(REGISTRY))
        raise ValueError(f"no prompt {method}/{task}; known: {known}") from None


def render(method: str, task: str, id: str | None = None, **values: object) -> ChatRequest:
    return get(method, task).render(id=id, **values)


def _load_all() -> None:
    """Import every template module once so that lookups see all registrations."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
