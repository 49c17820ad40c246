"""One chat completion: the request's generation settings, the backend's answer, and the response body."""

from __future__ import annotations

import secrets
import time
import uuid

from persetrain.engine.hf import HFBackend
from persetrain.engine.server.logprobs import Scorer
from persetrain.engine.server.schemas import APIError, ChatCompletionIn
from persetrain.engine.types import ChatRequest, Generation, GenerationParams


def generation_params(
    body: ChatCompletionIn, prompt_tokens: int, window: int, json_schema: dict | None, regex: str | None
) -> GenerationParams:
    """vLLM's sampling defaults and context-length check, as ``GenerationParams`` for the ``hf`` backend."""
    requested = body.max_completion_tokens or body.max_tokens
    max_new = requested or window - prompt_tokens
    if max_new < 1 or prompt_tokens + max_new > window:
        raise APIError(
            f"This model's maximum context length is {window} tokens. However, you requested "
            f"{prompt_tokens + max_new} tokens ({prompt_tokens} in the messages, {max_new} in the completion). "
            "Please reduce the length of the messages or completion.",
            param="max_tokens",
        )
    return GenerationParams(
        max_new_tokens=max_new,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=max(body.top_k or 0, 0),  # vLLM spells "no top-k" as -1 or 0
        seed=secrets.randbits(63) if body.seed is None else body.seed,  # no seed: a fresh draw, as in vLLM
        stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
        json_schema=json_schema,
        regex=regex,
    )


def completion_body(
    served_model_name: str, generation: Generation, content: list | None, prompt_records: list | None
) -> dict:
    """The ``chat.completion`` object: one choice, its log-probs when asked, usage, vLLM's ``prompt_logprobs``."""
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


def complete(
    backend: HFBackend,
    scorer: Scorer,
    served_model_name: str,
    body: ChatCompletionIn,
    request: ChatRequest,
    json_schema: dict | None,
    regex: str | None,
) -> dict:
    """Generate one answer to ``request`` and score it as the body asks; the caller holds the model lock."""
    prompt = backend.encode(backend.render(request))
    params = generation_params(body, len(prompt), backend.context_window, json_schema, regex)
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
    return completion_body(served_model_name, generation, content, prompt_records)
