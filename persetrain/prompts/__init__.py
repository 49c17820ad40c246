"""The one prompt registry: every template of every method, keyed by ``(method, task)``.

Templates are data, not logic: a system text, a user text with ``{field}`` slots and an optional
assistant prefix. ``render`` fills the slots and returns an engine request, so that the same
wording serves training data (``persetrain prepare``) and inference (``persetrain evaluate``).
Each method's templates live in their own module (``perse.py`` ...), which registers them on import.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from persetrain.engine.types import ChatRequest, Message


@dataclass(frozen=True)
class PromptTemplate:
    method: str
    task: str
    user: str
    system: str | None = None
    assistant_prefix: str = ""

    @property
    def fields(self) -> set[str]:
        parts = [self.system or "", self.user, self.assistant_prefix]
        return {name for text in parts for _, name, _, _ in string.Formatter().parse(text) if name}

    def render(self, id: str | None = None, **values: object) -> ChatRequest:
        missing = self.fields - values.keys()
        if missing:
            raise KeyError(f"prompt {self.method}/{self.task} needs {sorted(missing)}")
        messages = []
        if self.system:
            messages.append(Message(role="system", content=self.system.format(**values)))
        messages.append(Message(role="user", content=self.user.format(**values)))
        return ChatRequest(messages=tuple(messages), assistant_prefix=self.assistant_prefix.format(**values), id=id)


_REGISTRY: dict[tuple[str, str], PromptTemplate] = {}


def register(template: PromptTemplate) -> PromptTemplate:
    key = (template.method, template.task)
    if key in _REGISTRY:
        raise ValueError(f"prompt {key} registered twice")
    _REGISTRY[key] = template
    return template


def get(method: str, task: str) -> PromptTemplate:
    _load_all()
    try:
        return _REGISTRY[(method, task)]
    except KeyError:
        known = ", ".join(f"{m}/{t}" for m, t in sorted(_REGISTRY))
        raise ValueError(f"no prompt {method}/{task}; known: {known}") from None


def render(method: str, task: str, id: str | None = None, **values: object) -> ChatRequest:
    return get(method, task).render(id=id, **values)


def _load_all() -> None:
    """Import every template module once so that lookups see all registrations."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
