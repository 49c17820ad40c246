"""Request and result records of the inference engine.

They are pydantic models so that the CLI can read and write them as JSONL, the request cache can
key on their canonical JSON, and the HTTP server can validate them, all from one definition.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant"]


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)
    role: Role
    content: str


class ChatRequest(BaseModel):
    """One chat conversation to continue.

    ``assistant_prefix`` is text the assistant turn already starts with (for example
    ``"[Review] ... [Score] "``): generation and choice scoring continue after it. Keeping it
    separate from ``messages`` lets every backend render it the same way (chat template with
    the generation prompt, then the prefix verbatim).
    """

    model_config = ConfigDict(frozen=True)
    messages: tuple[Message, ...]
    assistant_prefix: str = ""
    id: str | None = Field(default=None, description="Caller's key; echoed back, not sent to the model.")

    @classmethod
    def of(cls, user: str, system: str | None = None, assistant_prefix: str = "", id: str | None = None):
        """Shorthand for the common single-turn case."""
        msgs = ([Message(role="system", content=system)] if system else []) + [Message(role="user", content=user)]
        return cls(messages=tuple(msgs), assistant_prefix=assistant_prefix, id=id)

    def chat_messages(self) -> list[dict[str, str]]:
        """The messages as ``{"role", "content"}`` dicts: what chat templates, OpenAI clients and TRL's
        conversational datasets take (``assistant_prefix`` is not among them: each backend renders it)."""
        return [m.model_dump() for m in self.messages]


class GenerationParams(BaseModel):
    """Decoding parameters. ``temperature == 0`` means greedy decoding.

    With sampling, each request draws from its own generator seeded by ``seed`` and the
    request's content, so a result does not depend on which other requests share its batch.
    """

    model_config = ConfigDict(frozen=True)
    max_new_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    seed: int = 0
    stop: tuple[str, ...] = ()
    json_schema: dict | None = None
    regex: str | None = None


class Cost(BaseModel):
    """What a set of calls consumed; summed across results with ``+``."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class Generation(BaseModel):
    id: str | None = None
    text: str
    finish_reason: Literal["stop", "length"]
    cost: Cost
    cached: bool = False


class ChoiceProbs(BaseModel):
    """Probabilities of a closed answer set, renormalised over the set.

    ``logprobs`` are the unnormalised sequence log-probabilities under the model, kept so that
    callers can apply their own floor (PARL counts a missing token as log p = -20).
    """

    id: str | None = None
    probs: dict[str, float]
    logprobs: dict[str, float]
    cost: Cost
    cached: bool = False

    def expectation(self) -> float:
        """Expected value when the choices are numbers (e.g. a 1-10 score)."""
        return sum(float(k) * p for k, p in self.probs.items())
