"""`persetrain serve` answers the public PARL judge request (vLLM's choice constraint) through the openai client."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from loopback_server import serving
from numerics import close

from persetrain.engine import load_engine
from persetrain.engine.hf import HFBackend
from persetrain.engine.server import build_app
from persetrain.prompts.parl import judge_request
from persetrain.rewards.parl import RubricJudge

SERVED = "parl-judge"
RULE, INPUT, TEXT = (
    "The review ends with the sign-off 'cheers, kal'.",
    "Item title: Pro Kettle\nRating: 5",
    "boils fast. cheers, kal",
)
CHECK = judge_request("amazon", INPUT, TEXT, RULE)


@pytest.fixture(scope="module")
def judge_server(tiny_llama_dir) -> Iterator[tuple[str, HFBackend]]:
    backend = HFBackend(str(tiny_llama_dir))
    with serving(build_app(backend, SERVED)) as url:
        yield f"{url}/v1", backend


def _messages():
    return [m.model_dump() for m in CHECK.messages]


@pytest.mark.parametrize(
    "extra_body",
    [{"structured_outputs": {"choice": ["yes", "no"]}}, {"guided_choice": ["yes", "no"]}],
    ids=["structured_outputs", "guided"],
)
def test_parl_judge_request_through_openai_client(judge_server, extra_body):
    url, backend = judge_server
    client = openai.OpenAI(base_url=url, api_key="unused")
    response = client.chat.completions.create(
        model=SERVED,
        messages=_messages(),
        max_tokens=1,
        temperature=0.0,
        logprobs=True,
        top_logprobs=5,
        extra_body=extra_body,
    )
    choice = response.choices[0]
    # the constraint holds whatever the model prefers: one token that starts "yes" or "no" ("ye" is allowed,
    # as in vLLM, since max_tokens=1 cuts the choice)
    content = choice.message.content
    assert content and any(c.startswith(content) for c in ("yes", "no"))
    top = choice.logprobs.content[0].top_logprobs
    assert len(top) == 5
    # the log-probs are the model's own next-token distribution (vLLM V1's default: before the constraint)
    prompt = backend.encode(backend.render(CHECK))
    expected = backend.token_logprobs(prompt, len(prompt), top_k=5)[-1]["top"]
    assert [t.logprob for t in top] == close([lp for _, lp in expected], abs=1e-4)
    assert [t.token for t in top] == [backend.tokenizer.decode([i]) for i, _ in expected]


def _local_engine(backend: HFBackend):
    from persetrain.engine import Engine

    return Engine(backend)


def test_served_judge_scores_like_the_local_one(judge_server):
    """Exact scoring through the server equals local scoring; PARL's top-5 approximation floors what is missing."""
    url, backend = judge_server
    local = RubricJudge(_local_engine(backend)).p_yes("amazon", [(RULE, INPUT, TEXT)])
    exact = load_engine(SERVED, backend="openai", base_url=url, scoring="auto", top_logprobs=5)
    assert RubricJudge(exact).p_yes("amazon", [(RULE, INPUT, TEXT)]) == close(local, abs=1e-4)
    approx = load_engine(SERVED, backend="openai", base_url=url, scoring="top_logprobs", top_logprobs=5)
    # the random tiny model puts neither "yes" nor "no" in its top 5: both get log p = -20, so p(yes) = 0.5
    prompt = backend.encode(backend.render(CHECK))
    top5 = {backend.tokenizer.decode([i]) for i, _ in backend.token_logprobs(prompt, len(prompt), top_k=5)[-1]["top"]}
    assert not top5 & {"yes", "no"}
    assert RubricJudge(approx).p_yes("amazon", [(RULE, INPUT, TEXT)]) == [0.5]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"guided_choice": []}, "guided_choice"),
        ({"structured_outputs": {"choice": "yes"}}, "structured_outputs"),
        ({"guided_choice": ["yes", ""]}, "guided_choice"),
    ],
)
def test_bad_choice_sets_are_refused(judge_server, body, param):
    client = openai.OpenAI(base_url=judge_server[0], api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=SERVED, messages=_messages(), max_tokens=1, extra_body=body)
    assert err.value.body["param"] == param
