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

One module per job:

* ``schemas.py``: the request body (``ChatCompletionIn``) and the error body, vLLM's wire format.
* ``translate.py``: request body -> ``ChatRequest`` and a JSON schema or regex; the refusals.
* ``logprobs.py``: ``Scorer``, the re-scoring pass turned into OpenAI's and vLLM's log-prob records.
* ``completion.py``: one completion: generation settings, the backend call, the response body.
* ``app.py``: ``build_app`` (error handlers, routes) and ``serve``.
"""

from persetrain.engine.server.app import build_app, serve
from persetrain.engine.server.schemas import MAX_LOGPROBS, APIError, ChatCompletionIn

__all__ = ["MAX_LOGPROBS", "APIError", "ChatCompletionIn", "build_app", "serve"]
