"""Request body -> engine records: the messages as a ``ChatRequest``, the constraint as a schema or a regex.

Every refusal is an ``APIError`` naming the field at fault, so a client learns what to change.
"""

from __future__ import annotations

import json
from typing import Any

from persetrain.engine.server.schemas import APIError, ChatCompletionIn, ChatMessageIn
from persetrain.engine.types import ChatRequest, Message

#: Fields vLLM honours and this server cannot, with their neutral values. A request that sets one
#: is refused: answering it while silently ignoring the field would return something else.
UNSUPPORTED: dict[str, Any] = {
    "guided_grammar": None,
    "tools": [],
    "logit_bias": {},
    "use_beam_search": False,
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_p": 0.0,
    "echo": False,
}

_REGEX_SPECIAL = set("\\.^$*+?{}[]|()")


def check_supported(body: ChatCompletionIn) -> None:
    """Refuse what this server would otherwise answer differently from vLLM (``n``, streaming, ``UNSUPPORTED``)."""
    if body.n not in (None, 1):
        raise APIError(
            f"n={body.n} is not supported: this server returns one choice per request; send n "
            "separate requests with different seeds",
            param="n",
        )
    if body.stream:
        raise APIError("stream=true is not supported by persetrain serve", param="stream")
    extra = body.model_extra or {}
    for name, neutral in UNSUPPORTED.items():
        if extra.get(name) not in (None, neutral):
            raise APIError(f"{name} is not supported by persetrain serve", param=name)
    if body.top_logprobs and not body.logprobs:
        raise APIError("when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs")


def _message_text(message: ChatMessageIn, index: int) -> str:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    texts = []
    for part in message.content:
        if part.get("type") != "text":
            raise APIError(
                f"messages[{index}]: only text content is supported, got a {part.get('type')!r} part", param="messages"
            )
        texts.append(str(part.get("text", "")))
    return "\n".join(texts)  # vLLM joins text parts with newlines too


def chat_request(body: ChatCompletionIn) -> ChatRequest:
    """Map messages and vLLM's prefill flags onto a ``ChatRequest``."""
    if not body.messages:
        raise APIError("messages must contain at least one message", param="messages")
    messages = []
    for i, m in enumerate(body.messages):
        if m.role not in ("system", "user", "assistant"):
            raise APIError(
                f"messages[{i}]: unsupported role {m.role!r} (use system, user or assistant)", param="messages"
            )
        messages.append(Message(role=m.role, content=_message_text(m, i)))
    if body.continue_final_message:
        if body.add_generation_prompt:
            raise APIError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
                param="continue_final_message",
            )
        if messages[-1].role != "assistant":
            raise APIError(
                "continue_final_message needs a final assistant message to continue", param="continue_final_message"
            )
        return ChatRequest(messages=tuple(messages[:-1]), assistant_prefix=messages[-1].content)
    if body.add_generation_prompt is False:
        raise APIError(
            "add_generation_prompt=false is only supported together with continue_final_message=true",
            param="add_generation_prompt",
        )
    return ChatRequest(messages=tuple(messages))


def _schema(value: Any, param: str) -> dict:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value)
    except (TypeError, json.JSONDecodeError) as err:
        raise APIError(f"{param} is not valid JSON: {err}", param=param) from err
    if not isinstance(parsed, dict):
        raise APIError(f"{param} must be a JSON schema object", param=param)
    return parsed


def choice_regex(choices: object, param: str) -> str:
    """The regex matching exactly one of ``choices``: an alternation of the escaped strings."""
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise APIError(f"{param} must be a non-empty list of non-empty strings", param=param.split(".")[0])
    escaped = ["".join("\\" + ch if ch in _REGEX_SPECIAL else ch for ch in c) for c in choices]
    return "(" + "|".join(escaped) + ")"


def constraint(body: ChatCompletionIn) -> tuple[dict | None, str | None]:
    """The JSON schema or regex a request asks for, from any of the fields vLLM has used for it.

    Clients send the same schema in several fields at once so as to work with every vLLM version
    (``response_format`` and ``guided_json``); that is fine as long as they agree.
    """
    schemas: list[dict] = []
    regexes: list[str] = []
    if body.response_format is not None:
        kind = body.response_format.get("type")
        if kind == "json_schema":
            spec = body.response_format.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise APIError("response_format.json_schema.schema is required", param="response_format")
            schemas.append(_schema(spec["schema"], "response_format.json_schema.schema"))
        elif kind == "json_object":
            schemas.append({"type": "object"})
        elif kind != "text":
            raise APIError(f"unsupported response_format type {kind!r}", param="response_format")
    if body.guided_json is not None:
        schemas.append(_schema(body.guided_json, "guided_json"))
    if body.guided_regex is not None:
        regexes.append(body.guided_regex)
    if body.guided_choice is not None:
        regexes.append(choice_regex(body.guided_choice, "guided_choice"))
    if body.structured_outputs:
        given = {k: v for k, v in body.structured_outputs.items() if v is not None and v is not False}
        if unsupported := sorted(set(given) & {"grammar", "structural_tag"}):
            raise APIError(
                f"structured_outputs supports json, json_object, regex and choice, got {unsupported}",
                param="structured_outputs",
            )
        if "json" in given:
            schemas.append(_schema(given["json"], "structured_outputs.json"))
        if "json_object" in given:
            schemas.append({"type": "object"})
        if "regex" in given:
            regexes.append(given["regex"])
        if "choice" in given:
            regexes.append(choice_regex(given["choice"], "structured_outputs.choice"))
    if not all(isinstance(r, str) for r in regexes):
        raise APIError("a regex must be a string", param="guided_regex")
    if len({json.dumps(s, sort_keys=True) for s in schemas}) > 1:
        raise APIError("the request gives different JSON schemas in different fields", param="response_format")
    if len(set(regexes)) > 1:
        raise APIError("the request gives different regexes in different fields", param="guided_regex")
    if schemas and regexes:
        raise APIError("give one kind of constraint: a JSON schema or a regex, not both", param="guided_regex")
    return (schemas[0] if schemas else None), (regexes[0] if regexes else None)
