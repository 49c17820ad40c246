"""The ``openai`` backend: any OpenAI-compatible chat server (vLLM, SGLang, ``persetrain serve``).

Requests go out through one sync ``httpx`` client from a small thread pool (``max_concurrency``);
results are handed to ``on_done`` from the calling thread, so the engine's cache and cost
accounting never see two threads. Connection errors, 429 and 5xx answers are retried with
exponential backoff and jitter; a server that stays down becomes an ``EngineError`` naming the
URL and the number of attempts.

Closed-set scoring (``choice_probs``) is built to give the numbers the ``hf`` backend gives for
the same weights, which tokenizes prompt + choice *jointly* (see ``persetrain.engine.hf``):

* **One request when it can.** With ``max_tokens=1`` and ``top_logprobs=K``, the next-token
  distribution after the assistant prefix comes back as text. Trailing whitespace of the prefix
  is moved into the choices first ("[Score] " + "7" is asked as "[Score]" + " 7"), because
  tokenizers attach a space to the word after it, which is how joint tokenization splits that
  text, and because chat templates may strip trailing whitespace from a message. Every choice
  must then be found among the K tokens (by text; entries with the same text are summed).
* **Exact otherwise** (``scoring="auto"``, the default): when some choice is not a single token
  of the top K (a multi-token choice such as "Plot A", "10" next to "1", or a merely unlikely
  one), the server is asked for ``prompt_logprobs`` of the prefix alone and of prefix + choice for
  every choice. The longest token-id prefix shared by all of them is the context, each choice is
  scored by the sum of its remaining tokens' log-probabilities, and a choice that is a token
  prefix of another loses the mass of continuing into it; that mass is read from the longer
  choice's own prompt log-probabilities, so it is exact too. This is the ``hf`` backend's
  computation, done by the server's tokenizer and chat template.
* **PARL's approximation** (``scoring="top_logprobs"``): one request whatever happens, a choice
  missing from the top K gets ``floor_logprob`` (default -20, the floor PARL uses). This is the
  mode for servers without ``prompt_logprobs`` (SGLang's OpenAI API, api.openai.com), and its
  results depend on K and the floor, so both enter the fingerprint.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Literal

import httpx

from persetrain.engine.base import Backend, EngineError, OnDone
from persetrain.engine.choices import choice_logprobs, logsumexp, normalized, split_choices
from persetrain.engine.types import ChatRequest, Cost, Generation, GenerationParams

Scoring = Literal["auto", "top_logprobs", "exact"]
SCORING_MODES: tuple[str, ...] = ("auto", "top_logprobs", "exact")

_PROBE = -1  # slot of the single top-logprobs request of an item; exact-path slots count from 0


class OpenAIBackend(Backend):
    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_concurrency: int = 8,
        top_logprobs: int = 20,
        floor_logprob: float = -20.0,
        scoring: Scoring = "auto",
    ):
        """``model`` is the served model name; ``base_url`` ends in ``/v1``.

        ``api_key`` defaults to ``$OPENAI_API_KEY`` (vLLM started with ``--api-key`` wants one);
        ``max_retries`` counts retries after the first attempt and ``backoff`` is the first
        delay in seconds, doubled at each retry. ``top_logprobs`` is K in the module docstring;
        vLLM serves at most ``--max-logprobs`` (20 by default). ``scoring`` picks how
        ``choice_probs`` works (module docstring); ``floor_logprob`` is the log-prob that
        ``scoring="top_logprobs"`` gives a choice missing from the top K, -20 as in PARL.
        """
        if not base_url:
            raise ValueError("the openai backend needs base_url, e.g. base_url='http://127.0.0.1:8000/v1'")
        if scoring not in SCORING_MODES:
            raise ValueError(f"unknown scoring {scoring!r}; expected one of {SCORING_MODES}")
        if max_retries < 0 or max_concurrency < 1 or top_logprobs < 1:
            raise ValueError("max_retries must be >= 0, max_concurrency and top_logprobs >= 1")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.backoff = backoff
        self.top_logprobs = top_logprobs
        self.floor_logprob = floor_logprob
        self.scoring = scoring
        self.fingerprint = f"openai:{self.base_url}:{model}"
        if scoring == "top_logprobs":
            self.fingerprint += f":top{top_logprobs}:floor{floor_logprob:g}"
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self._client = httpx.Client(
            timeout=timeout,
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
        )
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="persetrain-openai")
        self._jitter = random.Random()

    # ------------------------------------------------------------------------------ HTTP
    def _post(self, body: dict) -> dict:
        url = f"{self.base_url}/chat/completions"
        attempts = self.max_retries + 1
        problem = ""
        for attempt in range(attempts):
            wait_at_least = 0.0
            try:
                response = self._client.post(url, json=body)
            except httpx.TransportError as err:
                problem = f"{type(err).__name__}: {err}"
            else:
                if response.status_code == 200:
                    try:
                        return response.json()
                    except ValueError as err:
                        raise EngineError(
                            f"{url} answered 200 with a body that is not JSON: {response.text[:300]!r}"
                        ) from err
                problem = f"HTTP {response.status_code}: {_server_message(response)}"
                if response.status_code != 429 and response.status_code < 500:
                    raise EngineError(f"{url} rejected the request ({problem})")
                wait_at_least = _retry_after(response)
            if attempt + 1 < attempts:
                delay = min(self.backoff * 2**attempt, 60.0) * self._jitter.uniform(0.5, 1.0)
                time.sleep(max(delay, wait_at_least))
        raise EngineError(
            f"no answer from {url} after {attempts} attempts (last: {problem}). Check that the server is "
            f"running and that base_url is right; start a local one with `persetrain serve --model SPEC`."
        )

    def _body(self, request: ChatRequest, prefix: str, **fields: Any) -> dict:
        """A chat request whose assistant turn starts with ``prefix`` (vLLM's prefill flags)."""
        messages = request.chat_messages()
        body: dict[str, Any] = {"model": self.model, "messages": messages, **fields}
        if prefix:
            messages.append({"role": "assistant", "content": prefix})
            body.update(continue_final_message=True, add_generation_prompt=False)
        return body

    def _run(self, tasks: list[tuple], on_done: OnDone) -> None:
        """Run ``(function, *args)`` tasks on the pool; report each result from this thread."""
        pending = {self._pool.submit(*task): i for i, task in enumerate(tasks)}
        try:
            while pending:
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for future in done:
                    on_done(pending.pop(future), future.result())
        finally:
            for future in pending:
                future.cancel()

    # ------------------------------------------------------------------------ generation
    def generate(self, requests: Sequence[ChatRequest], params: Sequence[GenerationParams], on_done: OnDone) -> None:
        if any(p.json_schema is not None and p.regex is not None for p in params):
            raise ValueError("give either json_schema or regex, not both")
        self._run([(self._generate_one, r, p) for r, p in zip(requests, params, strict=True)], on_done)

    def _generate_one(self, request: ChatRequest, params: GenerationParams) -> Generation:
        body = self._body(
            request,
            request.assistant_prefix,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=params.top_p,
            seed=params.seed,
        )
        if params.top_k:
            body["top_k"] = params.top_k
        if params.stop:
            body["stop"] = list(params.stop)
        if params.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": params.json_schema},
            }
            body["guided_json"] = params.json_schema  # vLLM versions that predate response_format
        if params.regex is not None:
            # vLLM < 0.12, vLLM >= 0.10.2 and SGLang spell it differently; each ignores the others
            body.update(guided_regex=params.regex, structured_outputs={"regex": params.regex}, regex=params.regex)
        response = self._post(body)
        choice = _first_choice(response, self.base_url)
        return Generation(
            text=(choice.get("message") or {}).get("content") or "",
            finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
            cost=_cost(response),
        )

    # --------------------------------------------------------------------------- scoring
    def choice_probs(self, requests: Sequence[ChatRequest], choices: Sequence[str], on_done: OnDone) -> None:
        choices = list(choices)
        pending: dict[Future, tuple[int, int]] = {}
        parts: dict[int, dict[int, tuple[list, list[float]]]] = {}
        spent = [Cost() for _ in requests]

        def go_exact(i: int) -> None:
            prefix = requests[i].assistant_prefix
            parts[i] = {}
            for slot, text in enumerate([prefix, *(prefix + c for c in choices)]):
                pending[self._pool.submit(self._prompt_logprobs, requests[i], text)] = (i, slot)

        for i, request in enumerate(requests):
            if self.scoring == "exact":
                go_exact(i)
            else:
                pending[self._pool.submit(self._probe, request, choices)] = (i, _PROBE)
        try:
            while pending:
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for future in done:
                    i, slot = pending.pop(future)
                    *result, cost = future.result()
                    spent[i] += cost
                    if slot == _PROBE:
                        found = result[0]
                        if self.scoring == "top_logprobs" or None not in found.values():
                            floored = {c: self.floor_logprob if v is None else v for c, v in found.items()}
                            on_done(i, normalized(floored, spent[i]))
                        else:
                            go_exact(i)
                        continue
                    parts[i][slot] = (result[0], result[1])
                    if len(parts[i]) == len(choices) + 1:
                        got = parts.pop(i)
                        logp = _joint_logprobs(got[0][0], [got[j + 1] for j in range(len(choices))], choices)
                        on_done(i, normalized(logp, spent[i]))
        finally:
            for future in pending:
                future.cancel()

    def _probe(self, request: ChatRequest, choices: list[str]) -> tuple[dict[str, float | None], Cost]:
        """One request: the distribution after the (whitespace-trimmed) prefix, matched by text."""
        stripped = request.assistant_prefix.rstrip()
        moved = request.assistant_prefix[len(stripped) :]
        response = self._post(
            self._body(request, stripped, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=self.top_logprobs)
        )
        content = (_first_choice(response, self.base_url).get("logprobs") or {}).get("content") or []
        if not content:  # e.g. the one token drawn was a special token, dropped from the text
            if self.scoring == "top_logprobs":
                raise EngineError(
                    f"{self.base_url} returned no logprobs for a logprobs=true request; "
                    "the server must support OpenAI's logprobs/top_logprobs"
                )
            return dict.fromkeys(choices), _cost(response)  # nothing matched: the exact path decides
        by_text: dict[str, list[float]] = {}
        for entry in content[0].get("top_logprobs") or []:
            by_text.setdefault(entry["token"], []).append(float(entry["logprob"]))
        found = {c: logsumexp(by_text[moved + c]) if moved + c in by_text else None for c in choices}
        return found, _cost(response)

    def _prompt_logprobs(self, request: ChatRequest, prefix: str) -> tuple[list, list[float], Cost]:
        """Token ids and per-token log-probs of the rendered prompt with ``prefix`` as the assistant text."""
        response = self._post(self._body(request, prefix, max_tokens=1, temperature=0.0, prompt_logprobs=0))
        records = response.get("prompt_logprobs")
        if not records:
            raise EngineError(
                f"{self.base_url} does not return prompt_logprobs (vLLM and persetrain serve do), which exact "
                "scoring of these choices needs; use scoring='top_logprobs' for PARL's approximation"
            )
        ids: list[int | None] = [None]  # the first token has no log-prob, and the same one in every prompt
        logprobs = [0.0]
        for record in records[1:]:
            token, info = next(iter(record.items()))  # vLLM lists the actual prompt token first
            ids.append(int(token))
            logprobs.append(float(info["logprob"]))
        return ids, logprobs, _cost(response)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


# ------------------------------------------------------------------------------ pure helpers
def _joint_logprobs(prompt: list, scored: list[tuple[list, list[float]]], choices: list[str]) -> dict[str, float]:
    """The ``hf`` backend's joint-tokenization scoring, from the server's prompt log-probs.

    ``scored[j]`` is prompt+choice j's token ids and each token's log-probability given those before it,
    so any scored sequence that continues context + prefix with a token holds that token's log-probability.
    """
    common, tokens = split_choices(prompt, [ids for ids, _ in scored], choices)

    def logprob(prefix: list, token: int) -> float:
        return next(
            logprobs[common + len(prefix)]
            for toks, (_, logprobs) in zip(tokens, scored, strict=True)
            if toks[: len(prefix) + 1] == [*prefix, token]
        )

    return choice_logprobs(tokens, logprob, choices)


def _first_choice(response: dict, base_url: str) -> dict:
    choices = response.get("choices") or []
    if not choices:
        raise EngineError(f"{base_url} answered without choices: {str(response)[:300]}")
    return choices[0]


def _cost(response: dict) -> Cost:
    usage = response.get("usage") or {}
    return Cost(
        calls=1, prompt_tokens=usage.get("prompt_tokens") or 0, completion_tokens=usage.get("completion_tokens") or 0
    )


def _server_message(response: httpx.Response) -> str:
    """The error message in OpenAI's shape, vLLM's older flat shape, or the raw text."""
    try:
        payload = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if payload.get("message"):
            return str(payload["message"])
    return str(payload)[:300]


def _retry_after(response: httpx.Response) -> float:
    try:
        return float(response.headers.get("retry-after", 0))
    except ValueError:  # an HTTP date; the backoff delay will do
        return 0.0
