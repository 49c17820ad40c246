"""``PromptTemplate`` and ``register``: what every template module needs from the prompt registry.

``persetrain.prompts`` imports every template module to look a prompt up by name, so what those modules
import lives here, below them, and no template module imports the package back (no import circle).
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


#: Filled by :func:`register` as each template module is imported; read by ``persetrain.prompts.get``.
REGISTRY: dict[tuple[str, str], PromptTemplate] = {}


def register(template: PromptTemplate) -> PromptTemplate:
    key = (template.method, template.task)
    if key in REGISTRY:
        raise ValueError(f"prompt {key} registered twice")
    REGISTRY[key] = template
    return template
