"""``persetrain serve``: an OpenAI-compatible HTTP server over the ``hf`` backend.

Why a server of our own when vLLM exists: a judge has to be reachable through the same client code
whether it runs under vLLM on a GPU cluster or on a laptop where vLLM does not install, and the
test suite needs a real server to prove that the ``openai`` backend reproduces the local
backend's numbers. So the wire format is vLLM's, extras included:

* ``continue_final_message`` (with ``add_generation_prompt=false``) continues a final assistant
  message: it becomes the engine's ``assistant_prefix``, rendered exactly as the ``hf`` backend
  renders one;
* ``logprobs``/``top_logprobs`` per generated token and vLLM's ``prompt_logprobs``;
* structured output through ``response_format`` (``json_schema``/``json_object``), vLLM's older
  ``guided_json``/``guided_regex``/``guided_choice`` and its newer ``structured_outputs`` object
  (``json``, ``json_object``, ``regex``, ``choice``). A choice set is the regex alternation of its
  escaped strings, so a PARL judge request (one token, ``logprobs``, ``top_logprobs=5``,
  ``structured_outputs={"choice": ["yes", "no"]}``) is answered as vLLM answers it;
* errors as ``{"error": {"message", "type", "param", "code"}}``, never a stack trace.

Log-probabilities are computed by re-scoring prompt + completion in one extra forward pass
(``HFBackend.token_logprobs``), so they are exact rather than collected during sampling. A lock
serialises model access: one request at a time, which is what a CPU can do anyway.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from http import HTTPStatus
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from persetrain.engine.hf import HFBackend
from persetrain.engine.types import ChatRequest, Generation, GenerationParams, Message

#: vLLM's default ``--max-logprobs``: the most ``top_logprobs``/``prompt_logprobs`` one request may ask.
MAX_LOGPROBS = 20

#: Fields vLLM honours and this server cannot, with their neutral values. A request that sets one
#: is refused: answering it while silently ignoring the field would return something else.
_UNSUPPORTED: dict[str, Any] = {
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
    unchanged; fields with a visible effect that we cannot honour are refused (``_UNSUPPORTED``).
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


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = HTTPStatus(status).phrase.replace(" ", "").replace("-", "")
    kind = kind if kind.endswith("Error") else kind + "Error"  # vLLM: BadRequestError, NotFoundError, ...
    return JSONResponse(
        status_code=status, content={"error": {"message": message, "type": kind, "param": param, "code": status}}
    )


# ------------------------------------------------------------------ request -> engine records
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


_REGEX_SPECIAL = set("\\.^$*+?{}[]|()")


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


def _check_supported(body: ChatCompletionIn) -> None:
    if body.n not in (None, 1):
        raise APIError(
            f"n={body.n} is not supported: this server returns one choice per request; send n "
            "separate requests with different seeds",
            param="n",
        )
    if body.stream:
        raise APIError("stream=true is not supported by persetrain serve", param="stream")
    extra = body.model_extra or {}
    for name, neutral in _UNSUPPORTED.items():
        if extra.get(name) not in (None, neutral):
            raise APIError(f"{name} is not supported by persetrain serve", param=name)
    if body.top_logprobs and not body.logprobs:
        raise APIError("when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs")


# -------------------------------------------------------------------------- log-probabilities
class _Scorer:
    """Turns ``HFBackend.token_logprobs`` entries into OpenAI's and vLLM's log-prob records."""

    def __init__(self, backend: HFBackend):
        self.backend = backend
        self.tokenizer = backend.tokenizer

    def text(self, token_id: int) -> str:
        # vLLM's rendering of one token: the string it contributes, not its vocabulary entry ("Ġ7")
        return self.tokenizer.convert_tokens_to_string([self.tokenizer.convert_ids_to_tokens(token_id)])

    def _record(self, token_id: int, logprob: float) -> dict:
        token = self.text(token_id)
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8", errors="replace"))}

    def score(
        self,
        prompt: list[int],
        generation: Generation,
        params: GenerationParams,
        top_logprobs: int | None,
        prompt_logprobs: int | None,
    ) -> tuple[list | None, list | None]:
        """``(choices[0].logprobs.content, prompt_logprobs)``; ``None`` for what was not asked.

        The backend returns text, so the completion is re-tokenized: the scored tokens are the
        canonical tokenization of the returned text, which is what a greedy decode produces in
        all but rare cases. A sequence that ended on the end-of-sequence token gets an entry for
        it (as vLLM reports one) unless stop strings were set, since then the text does not tell
        whether a stop string or the end-of-sequence token ended it.
        """
        if top_logprobs is None and prompt_logprobs is None:
            return None, None
        completion: list[int] = []
        if top_logprobs is not None:
            completion = self.backend.encode(generation.text)
            if generation.finish_reason == "stop" and not params.stop:
                completion.append(self.tokenizer.eos_token_id)
        start = 1 if prompt_logprobs is not None else len(prompt)
        tokens = prompt + completion
        k = max(top_logprobs or 0, prompt_logprobs or 0)
        # the final entry predicts the token after the text, which no record describes
        entries = self.backend.token_logprobs(tokens, start, top_k=k)[:-1] if len(tokens) > start else []
        content = None
        if top_logprobs is not None:
            content = [
                {
                    **self._record(e["token_id"], e["logprob"]),
                    "top_logprobs": [self._record(t, lp) for t, lp in e.get("top", [])[:top_logprobs]],
                }
                for e in entries
                if e["position"] >= len(prompt)
            ]
        prompt_records = None
        if prompt_logprobs is not None:
            prompt_records = [None]  # the first token has no conditional probability
            for e in entries:
                if e["position"] >= len(prompt):
                    break
                # vLLM's layout: the actual token first, then the top-k (keys are token ids)
                record = {
                    str(e["token_id"]): {
                        "logprob": e["logprob"],
                        "rank": e["rank"],
                        "decoded_token": self.text(e["token_id"]),
                    }
                }
                for rank, (t, lp) in enumerate(e.get("top", [])[:prompt_logprobs], start=1):
                    record.setdefault(str(t), {"logprob": lp, "rank": rank, "decoded_token": self.text(t)})
                prompt_records.append(record)
        return content, prompt_records


# ---------------------------------------------------------------------------------- the app
def build_app(backend: HFBackend, served_model_name: str) -> FastAPI:
    """The FastAPI application serving ``backend`` under the model name ``served_model_name``."""
    app = FastAPI(title="persetrain serve", description=f"OpenAI-compatible server for {served_model_name}")
    lock = threading.Lock()
    scorer = _Scorer(backend)

    @app.exception_handler(APIError)
    async def _refused(request: Request, exc: APIError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.param)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            where = ".".join(str(part) for part in err.get("loc", ())[1:])  # drop the leading "body"
            problems.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        first = exc.errors()[0].get("loc", ()) if exc.errors() else ()
        return _error(400, "; ".join(problems) or "invalid request", str(first[1]) if len(first) > 1 else None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    @app.get("/health")
    def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    def models() -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": served_model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "persetrain",
                    "root": served_model_name,
                    "max_model_len": backend.context_window,
                }
            ],
        }

    @app.post("/v1/chat/completions")
    def chat_completions(body: ChatCompletionIn) -> dict:
        _check_supported(body)
        if body.model is not None and body.model != served_model_name:
            raise APIError(f"The model `{body.model}` does not exist.", status=404, param="model")
        request = chat_request(body)
        json_schema, regex = constraint(body)
        with lock:
            try:
                return _complete(body, request, json_schema, regex)
            except ValueError as err:  # the backend's way of refusing an input (pydantic's errors included)
                raise APIError(str(err)) from err

    def _complete(body: ChatCompletionIn, request: ChatRequest, json_schema: dict | None, regex: str | None) -> dict:
        prompt = backend.encode(backend.render(request))
        window = backend.context_window
        requested = body.max_completion_tokens or body.max_tokens
        max_new = requested or window - len(prompt)
        if max_new < 1 or len(prompt) + max_new > window:
            raise APIError(
                f"This model's maximum context length is {window} tokens. However, you requested "
                f"{len(prompt) + max_new} tokens ({len(prompt)} in the messages, {max_new} in the completion). "
                "Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        params = GenerationParams(
            max_new_tokens=max_new,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            top_k=max(body.top_k or 0, 0),  # vLLM spells "no top-k" as -1 or 0
            seed=secrets.randbits(63) if body.seed is None else body.seed,  # no seed: a fresh draw, as in vLLM
            stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
            json_schema=json_schema,
            regex=regex,
        )
        try:  # compile now so that a bad schema or regex is the client's error, not a crash mid-decode
            backend.check_grammar(params)
        except RuntimeError as err:
            raise APIError(
                f"invalid structured-output constraint: {str(err).strip()}",
                param="response_format" if json_schema is not None else "guided_regex",
            ) from err
        results: dict[int, Generation] = {}
        backend.generate([request], [params], results.__setitem__)
        generation = results[0]
        content, prompt_records = scorer.score(
            prompt,
            generation,
            params,
            top_logprobs=(body.top_logprobs or 0) if body.logprobs else None,
            prompt_logprobs=body.prompt_logprobs,
        )
        usage = generation.cost
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": served_model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": generation.text},
                    "logprobs": None if content is None else {"content": content},
                    "finish_reason": generation.finish_reason,
                    "stop_reason": None,
                }
            ],
            "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            },
            "prompt_logprobs": prompt_records,
        }

    return app


def serve(
    model_spec: str, host: str = "127.0.0.1", port: int = 8000, served_model_name: str | None = None, **hf_options: Any
) -> None:
    """Load ``model_spec`` with the ``hf`` backend and serve it until interrupted.

    The served name defaults to the spec itself, as vLLM's does, so that
    ``load_engine(spec, backend="openai", base_url=...)`` names the same model either way.
    """
    backend = HFBackend(model_spec, **hf_options)
    uvicorn.run(build_app(backend, served_model_name or model_spec), host=host, port=port, log_level="info")
