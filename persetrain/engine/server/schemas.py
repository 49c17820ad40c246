"""The wire format: the request body this server reads and the error body it answers with, both vLLM's."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

#: vLLM's default ``--max-logprobs``: the most ``top_logprobs``/``prompt_logprobs`` one request may ask.
MAX_LOGPROBS = 20


class APIError(Exception):
    """A request the server refuses; turned into an OpenAI-shaped error response."""

    def __init__(self, message: str, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.message, self.status, self.param = message, status, param


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionIn(BaseModel):
    """The subset of vLLM's ``ChatCompletionRequest`` that this server implements.

    Unknown fields are accepted and ignored, as vLLM does, so clients written for vLLM work
    unchanged; fields with a visible effect that we cannot honour are refused (``translate.UNSUPPORTED``).
    """

    model_config = ConfigDict(extra="allow")
    messages: list[ChatMessageIn]
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int | None = 1
    stream: bool | None = False
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    add_generation_prompt: bool | None = None
    continue_final_message: bool = False
    response_format: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    structured_outputs: dict[str, Any] | None = None


def error_response(status: int, message: str, param: str | None = None) -> JSONResponse:
    """``{"error": {"message", "type", "param", "code"}}`` with vLLM's error type names."""
    kind = HTTPStatus(status).phrase.replace(" ", "").replace("-", "")
    kind = kind if kind.endswith("Error") else kind + "Error"  # vLLM: BadRequestError, NotFoundError, ...
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "param": param, "code": status}}
    )
