"""``persetrain serve`` and the ``openai`` backend against each other and against the ``hf`` backend.

Every test talks to a real uvicorn server on loopback. The central claim (the foundation issue's
done-criterion) is that a judge served over HTTP gives the numbers the local backend gives.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from loopback_server import serving
from numerics import close

from persetrain.engine import ChatRequest, Engine, EngineError, GenerationParams, load_engine
from persetrain.engine.hf import HFBackend
from persetrain.engine.openai_compat import OpenAIBackend
from persetrain.engine.server import build_app
from persetrain.models import DEFAULT_MODEL

SERVED = "tiny-judge"


@pytest.fixture(scope="module")
def tiny_server(tiny_llama_dir) -> Iterator[tuple[str, HFBackend]]:
    backend = HFBackend(str(tiny_llama_dir))
    with serving(build_app(backend, SERVED)) as url:
        yield f"{url}/v1", backend


@pytest.fixture(scope="module")
def hf_engine(tiny_llama_dir) -> Engine:
    return load_engine(str(tiny_llama_dir), backend="hf")


@pytest.fixture()
def api_engine(tiny_server) -> Iterator[Engine]:
    engine = load_engine(SERVED, backend="openai", base_url=tiny_server[0], max_concurrency=2)
    yield engine
    engine.close()


def _post(url: str, body: dict | str) -> httpx.Response:
    if isinstance(body, str):
        return httpx.post(f"{url}/chat/completions", content=body, headers={"content-type": "application/json"})
    return httpx.post(f"{url}/chat/completions", json=body, timeout=60)


def _assert_close(hf_results, api_results) -> None:
    for a, b in zip(hf_results, api_results, strict=True):
        assert a.probs.keys() == b.probs.keys()
        for choice in a.probs:
            assert a.probs[choice] == close(b.probs[choice], abs=1e-4), (choice, a.probs, b.probs)
            assert a.logprobs[choice] == close(b.logprobs[choice], abs=1e-4), (choice, a.logprobs, b.logprobs)


# ------------------------------------------------------------------ the done-criterion
CASES = {
    "yes-no": (["yes", "no"], ""),
    "letters": (["A", "B"], "Answer: "),
    "scores-1-to-10": ([str(i) for i in range(1, 11)], "[Score] "),
    "multi-token": (["Plot A", "Plot B"], "The better plot is "),
}


@pytest.mark.parametrize("case", CASES)
def test_choice_probs_match_hf_backend(hf_engine, api_engine, case):
    choices, prefix = CASES[case]
    requests = [
        ChatRequest.of(
            "Story: a lighthouse keeper adopts a gull. Does the reader like it?",
            system="You judge stories for one reader.",
            assistant_prefix=prefix,
            id="a",
        ),
        ChatRequest.of("Story: two detectives argue about tea. Rate it.", assistant_prefix=prefix, id="b"),
    ]
    hf = hf_engine.choice_probs(requests, choices)
    api = api_engine.choice_probs(requests, choices)
    _assert_close(hf, api)
    assert [r.id for r in api] == ["a", "b"]
    assert api_engine.cost.calls >= len(requests)
    if case == "scores-1-to-10":  # "1" and "10" share a token: P("1") excludes continuing into "10"
        assert api[0].probs["1"] < 1.0 and sum(api[0].probs.values()) == pytest.approx(1.0)


def _top_choices(url: str, backend: HFBackend, request: ChatRequest) -> list[str]:
    """Choices that are single tokens among the server's top 20 after the prefix, with a space moved in."""
    stripped = request.assistant_prefix.rstrip()
    body = {
        "messages": [m.model_dump() for m in request.messages] + [{"role": "assistant", "content": stripped}],
        "continue_final_message": True,
        "add_generation_prompt": False,
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 20,
    }
    top = _post(url, body).json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    text = backend.render(request)
    prompt = backend.encode(text)
    picked = []
    for entry in top:
        word = entry["token"][1:]
        if entry["token"].startswith(" ") and word.isalpha():
            joint = backend.encode(text + word)
            if len(joint) == len(prompt) and joint[:-1] == prompt[:-1]:  # " " + word is one token
                picked.append(word)
    return picked


def test_one_request_per_item_when_choices_are_top_tokens(tiny_server, hf_engine, api_engine):
    url, backend = tiny_server
    requests = [
        ChatRequest.of(f"Give a one-word verdict on the {work}.", assistant_prefix="Verdict: ")
        for work in ("story", "tale")
    ]
    top = [_top_choices(url, backend, request) for request in requests]
    choices = [choice for choice in top[0] if choice in top[1]][:3]
    assert len(choices) >= 2, "the tiny model's top tokens should include space-prefixed words"
    api = api_engine.choice_probs(requests, choices)
    hf = hf_engine.choice_probs(requests, choices)
    _assert_close(hf, api)
    assert api_engine.cost.calls == len(requests)  # answered from top_logprobs alone
    exact = load_engine(SERVED, backend="openai", base_url=url, scoring="exact")
    _assert_close(hf, exact.choice_probs(requests, choices))  # the prompt_logprobs path agrees
    assert exact.cost.calls == len(requests) * (len(choices) + 1)
    exact.close()


def test_top_logprobs_scoring_floors_missing_choices(tiny_server, hf_engine):
    url, backend = tiny_server
    request = ChatRequest.of("Give a one-word verdict on the story.", assistant_prefix="Verdict: ")
    present = _top_choices(url, backend, request)[0]
    engine = load_engine(SERVED, backend="openai", base_url=url, scoring="top_logprobs", floor_logprob=-30)
    result = engine.choice_probs([request], [present, "zqxj unlikely"])[0]
    reference = hf_engine.choice_probs([request], [present, "zqxj unlikely"])[0]
    assert result.logprobs["zqxj unlikely"] == -30
    assert result.logprobs[present] == close(reference.logprobs[present], abs=1e-4)
    assert engine.cost.calls == 1
    exact = load_engine(SERVED, backend="openai", base_url=url)
    assert engine.backend.fingerprint != exact.backend.fingerprint  # floored results must not share a cache
    engine.close()
    exact.close()


# ------------------------------------------------------------------------- generation
@pytest.mark.parametrize(
    "params",
    [
        GenerationParams(max_new_tokens=12),
        GenerationParams(max_new_tokens=12, temperature=0.9, top_k=50, seed=7),
        GenerationParams(max_new_tokens=12, regex="(yes|no), because"),
    ],
    ids=["greedy", "seeded-sampling", "regex"],
)
def test_generate_matches_hf_backend(hf_engine, api_engine, params):
    requests = [
        ChatRequest.of("Summarise the story in one line."),
        ChatRequest.of("Continue the review.", assistant_prefix="The ending was "),
    ]
    hf = hf_engine.generate(requests, params)
    api = api_engine.generate(requests, params)
    assert [g.text for g in api] == [g.text for g in hf]
    assert [g.finish_reason for g in api] == [g.finish_reason for g in hf]
    assert [g.cost.prompt_tokens for g in api] == [g.cost.prompt_tokens for g in hf]
    if params.regex:
        assert all(g.text in {"yes, because", "no, because"} for g in api)


def test_regex_spellings_agree(tiny_server):
    """vLLM's older ``guided_regex`` and newer ``structured_outputs`` constrain alike."""
    url, _ = tiny_server
    base = {"messages": [{"role": "user", "content": "Rate it."}], "max_tokens": 6, "temperature": 0}
    texts = {
        _post(url, {**base, **extra}).json()["choices"][0]["message"]["content"]
        for extra in ({"guided_regex": "[1-9]|10"}, {"structured_outputs": {"regex": "[1-9]|10"}})
    }
    assert len(texts) == 1 and texts <= {str(i) for i in range(1, 11)}


def test_stop_strings_reach_the_server(hf_engine, api_engine):
    request = ChatRequest.of("Write anything.")
    free = hf_engine.generate([request], GenerationParams(max_new_tokens=12))[0].text
    stop = free[3:5]
    assert stop.strip(), f"need a visible stop string inside {free!r}"
    params = GenerationParams(max_new_tokens=12, stop=(stop,))
    api = api_engine.generate([request], params)[0]
    assert api.text == hf_engine.generate([request], params)[0].text == free[: free.find(stop)]
    assert api.finish_reason == "stop"


# ------------------------------------------------------------------------ wire format
def test_logprobs_and_prompt_logprobs_wire_format(tiny_server):
    url, backend = tiny_server
    messages = [{"role": "user", "content": "Say something."}]
    answer = _post(
        url,
        {
            "model": SERVED,
            "messages": messages,
            "max_tokens": 4,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 3,
            "prompt_logprobs": 2,
        },
    ).json()
    choice = answer["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) >= 1
    assert "".join(e["token"] for e in content).startswith(choice["message"]["content"])
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["bytes"] == list(entry["token"].encode("utf-8"))
        tops = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert entry["logprob"] == pytest.approx(tops[0], abs=1e-5)  # greedy picks the most likely token

    prompt = backend.encode(backend.render(ChatRequest.of("Say something.")))
    records = answer["prompt_logprobs"]
    assert answer["usage"]["prompt_tokens"] == len(prompt) == len(records)
    assert records[0] is None
    for token, record in zip(prompt[1:], records[1:], strict=True):
        actual = next(iter(record))
        assert actual == str(token)
        assert record[actual]["rank"] >= 1
        assert record[actual]["decoded_token"] == backend.tokenizer.decode([token])
        others = {v["rank"] for k, v in record.items() if k != actual}
        assert others == {1, 2} - {record[actual]["rank"]}  # the top 2, plus the actual token if not among them
        best = max(v["logprob"] for v in record.values())
        assert all(v["logprob"] <= best for v in record.values())
    assert answer["usage"]["total_tokens"] == len(prompt) + answer["usage"]["completion_tokens"]


def test_models_and_health(tiny_server):
    url, backend = tiny_server
    root = url.removesuffix("/v1")
    assert httpx.get(f"{root}/health").status_code == 200
    models = httpx.get(f"{url}/models").json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [SERVED]
    assert models["data"][0]["max_model_len"] == backend.context_window


HELLO = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"messages": HELLO, "n": 2}, 400, "n"),
        ({"model": SERVED}, 400, "messages"),
        ("{not json", 400, None),
        ({"messages": HELLO, "model": "some-other-model"}, 404, "model"),
        ({"messages": HELLO, "stream": True}, 400, "stream"),
        ({"messages": HELLO, "top_logprobs": 2}, 400, "top_logprobs"),
        ({"messages": HELLO, "top_logprobs": 50, "logprobs": True}, 400, "top_logprobs"),
        ({"messages": HELLO, "guided_regex": "(unclosed"}, 400, "guided_regex"),
        ({"messages": HELLO, "guided_regex": "a", "guided_json": {"type": "object"}}, 400, "guided_regex"),
        ({"messages": HELLO, "continue_final_message": True}, 400, "continue_final_message"),
        ({"messages": HELLO, "guided_choice": []}, 400, "guided_choice"),
        ({"messages": [{"role": "tool", "content": "x"}]}, 400, "messages"),
        ({"messages": HELLO, "max_tokens": 100_000}, 400, "max_tokens"),
        ({"messages": HELLO, "structured_outputs": {"choice": "a"}}, 400, "structured_outputs"),
        (
            {"messages": HELLO, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 5}}},
            400,
            "response_format.json_schema.schema",
        ),
    ],
    ids=[
        "n=2",
        "no-messages",
        "bad-json",
        "wrong-model",
        "stream",
        "top-without-logprobs",
        "too-many-top",
        "bad-regex",
        "two-constraints",
        "continue-user",
        "guided-choice",
        "tool-role",
        "too-long",
        "structured-choice",
        "schema-not-object",
    ],
)
def test_bad_requests_get_openai_shaped_errors(tiny_server, body, status, param):
    response = _post(tiny_server[0], body)
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status and error["message"] and error["type"].endswith("Error")
    if param is not None:
        assert error["param"] == param
    assert "Traceback" not in response.text


# --------------------------------------------------------------------- client resilience
def test_unreachable_server_raises_engine_error_quickly():
    with socket.socket() as sock:  # a port nothing listens on once the socket is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    engine = load_engine("m", backend="openai", base_url=url, max_retries=2, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(EngineError) as raised:
        engine.choice_probs([ChatRequest.of("hi")], ["yes", "no"])
    assert time.monotonic() - started < 5
    assert url in str(raised.value) and "3 attempts" in str(raised.value)


def test_retries_transient_errors_but_not_client_errors():
    """A server that fails twice with 503 is retried; a 400 is reported at once with its message."""
    calls = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def flaky(body: dict) -> JSONResponse:
        calls.append(body)
        if body["messages"][0]["content"] == "bad":
            return JSONResponse(
                {"error": {"message": "no such thing", "type": "BadRequestError", "param": None, "code": 400}},
                status_code=400,
            )
        if len(calls) <= 2:
            return JSONResponse({"error": {"message": "busy"}}, status_code=503)
        return JSONResponse(
            {
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            }
        )

    with serving(app) as url:
        backend = OpenAIBackend("m", base_url=f"{url}/v1", max_retries=3, backoff=0.01)
        engine = Engine(backend)
        result = engine.generate([ChatRequest.of("good")])[0]
        assert (result.text, result.finish_reason, result.cost.prompt_tokens) == ("fine", "stop", 5)
        assert len(calls) == 3
        with pytest.raises(EngineError, match="no such thing"):
            engine.generate([ChatRequest.of("bad")])
        assert len(calls) == 4
        engine.close()


def test_base_url_is_required():
    with pytest.raises(ValueError, match="base_url"):
        load_engine("m", backend="openai")


# ------------------------------------------------------------------ end to end (real model)
@pytest.fixture(scope="module")
def embedded_server() -> Iterator[tuple[str, Engine]]:
    """The real default model behind ``persetrain serve``, plus a local engine over the same weights."""
    backend = HFBackend(DEFAULT_MODEL)
    with serving(build_app(backend, DEFAULT_MODEL)) as url:
        yield f"{url}/v1", Engine(backend)


@pytest.mark.slow
def test_embedded_model_served_matches_local(embedded_server):
    """The real default model through the server scores like the local backend."""
    url, local = embedded_server
    remote = load_engine(backend="openai", base_url=url)  # the served name defaults to the spec
    request = ChatRequest.of("Is the sky on a clear day blue? Answer Yes or No.")
    choices = ["Yes", "No"]
    api = remote.choice_probs([request], choices)
    _assert_close(local.choice_probs([request], choices), api)
    assert remote.cost.calls == 1  # a trained model puts both answers in its top 20
    remote.close()


SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"enum": ["good", "bad"]}, "score": {"type": "integer"}},
    "required": ["verdict", "score"],
    "additionalProperties": False,
}


@pytest.mark.slow
def test_json_schema_structured_output(embedded_server):
    url, local = embedded_server
    messages = [
        {"role": "user", "content": "Judge the story 'A cat sails to Spain.' as JSON with a verdict and a score."}
    ]
    body = {
        "model": DEFAULT_MODEL,
        "messages": messages,
        "max_tokens": 40,
        "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "judgment", "schema": SCHEMA}},
    }
    answer = _post(url, body).json()
    text = answer["choices"][0]["message"]["content"]
    data = json.loads(text)
    assert set(data) == {"verdict", "score"} and data["verdict"] in {"good", "bad"} and isinstance(data["score"], int)
    # vLLM's other spelling of the same constraint gives the same completion
    other = _post(url, {"messages": messages, "max_tokens": 40, "temperature": 0, "guided_json": SCHEMA}).json()
    assert other["choices"][0]["message"]["content"] == text
    # the client sends response_format and guided_json together; they agree, so the server accepts it
    remote = load_engine(backend="openai", base_url=url)
    params = GenerationParams(max_new_tokens=40, json_schema=SCHEMA)
    assert remote.generate([ChatRequest.of(messages[0]["content"])], params)[0].text == text
    remote.close()


@pytest.mark.slow
def test_choice_extended_by_a_likely_token(embedded_server):
    """A choice and its extension by the model's favourite next token: P(choice) must drop that mass.

    Built from the real model's own preferences so that the subtracted mass is large; the tiny
    random model's distributions are too flat for a wrong subtraction to show.
    """
    url, local = embedded_server
    backend = local.backend
    request = ChatRequest.of(
        "Give a one-word verdict on the story 'A cat sails to Spain.'", assistant_prefix="Verdict: "
    )
    word = _top_choices(url, backend, request)[0]
    extended = request.model_copy(update={"assistant_prefix": f"Verdict: {word}"})
    text = backend.render(extended)
    entry = backend.token_logprobs(backend.encode(text), len(backend.encode(text)), top_k=1)[-1]
    ((next_token, logprob),) = entry["top"]
    follow = backend.tokenizer.decode([next_token])
    assert backend.encode(text + follow) == backend.encode(text) + [next_token]
    assert logprob > -3, "the extension must carry visible mass for this test to mean anything"
    choices = [word, word + follow]
    remote = load_engine(backend="openai", base_url=url)
    _assert_close(local.choice_probs([request], choices), remote.choice_probs([request], choices))
    remote.close()
