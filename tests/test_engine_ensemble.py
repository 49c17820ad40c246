"""A comma-joined model spec is one judge: its answers equal the mean of each member engine's."""

from __future__ import annotations

import math

import pytest
from numerics import close

from persetrain.engine import ChatRequest, Engine, EngineError, GenerationParams, load_engine
from persetrain.engine.ensemble import EnsembleBackend
from persetrain.engine.hf import HFBackend
from persetrain.models import DEFAULT_MODEL
from persetrain.prompts.parl import judge_request


def _requests() -> list[ChatRequest]:
    texts = ["Big Kataford opens gym!", "did losaford: museum unveils restored train engine?", "Again Tazoton: library"]
    rules = ["The headline ends with an exclamation mark.", "No uppercase characters appear anywhere in the headline."]
    return [judge_request("news", "A town news item.", text, rule) for text in texts for rule in rules]


@pytest.mark.slow
def test_ensemble_probs_are_the_mean_of_its_members(tiny_llama_dir, tmp_path):
    members = [str(tiny_llama_dir), DEFAULT_MODEL]
    requests, choices = _requests(), ["yes", "no"]
    alone = [load_engine(m).choice_probs(requests, choices) for m in members]
    ensemble = load_engine(",".join(members), cache_path=tmp_path / "cache.sqlite")
    joined = ensemble.choice_probs(requests, choices)
    for i, result in enumerate(joined):
        for c in choices:
            assert result.probs[c] == close(sum(a[i].probs[c] for a in alone) / 2, abs=1e-6)
            mixture = math.log(sum(math.exp(a[i].logprobs[c]) for a in alone) / 2)
            assert result.logprobs[c] == close(mixture, abs=1e-5)
        assert result.cost == alone[0][i].cost + alone[1][i].cost
    # the members differ, so the mean is not either member's answer
    assert any(abs(alone[0][i].probs["yes"] - alone[1][i].probs["yes"]) > 0.05 for i in range(len(requests)))
    # cached under the ensemble's own fingerprint: a second call is all hits, a single member's engine misses
    again = ensemble.choice_probs(requests, choices)
    assert all(r.cached for r in again) and [r.probs for r in again] == [r.probs for r in joined]
    member = load_engine(members[0], cache_path=tmp_path / "cache.sqlite")
    assert not any(r.cached for r in member.choice_probs(requests, choices))


@pytest.mark.slow
def test_chunked_rounds_equal_one_round(tiny_llama_dir):
    """Requests go through the members in chunks (progress, cache); the chunking changes no answer."""
    members = [str(tiny_llama_dir), DEFAULT_MODEL]
    requests = _requests()
    one_round = load_engine(",".join(members)).choice_probs(requests, ["yes", "no"])
    chunked = Engine(EnsembleBackend([HFBackend(m) for m in members], chunk=4)).choice_probs(requests, ["yes", "no"])
    for a, b in zip(one_round, chunked, strict=True):
        assert a.probs == close(b.probs, abs=1e-5)


def test_ensemble_refuses_generation_and_empty_members(tiny_llama_dir):
    ensemble = load_engine(f"{tiny_llama_dir},{tiny_llama_dir}")
    with pytest.raises(EngineError, match="only answers closed sets"):
        ensemble.generate(_requests()[:1], GenerationParams(max_new_tokens=2))
    with pytest.raises(ValueError, match="empty model spec"):
        load_engine(f"{tiny_llama_dir},")
