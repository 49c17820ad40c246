"""The engine against independent reference computations: plain forward passes and HF generate."""

from __future__ import annotations

import json
import math
import warnings

import pytest
import torch
from numerics import close, tensor_tolerance

from persetrain.engine import ChatRequest, GenerationParams, load_engine
from persetrain.engine.hf import ContextOverflowError
from persetrain.models import cache_argument

SYSTEM = (
    "You judge short texts for one particular reader. The reader has written many reviews before; "
    "they like quiet endings, dislike talking animals and always reward careful world building. "
) * 2


def _requests(n_items: int = 3, n_tails: int = 4) -> list[ChatRequest]:
    return [
        ChatRequest.of(
            f"Item {i}: a story about a lighthouse keeper. Rule {j}: does it satisfy rule {j}?",
            system=SYSTEM,
            id=f"{i}-{j}",
        )
        for i in range(n_items)
        for j in range(n_tails)
    ]


def _reference_logprob(backend, request: ChatRequest, choice: str) -> tuple[float, torch.Tensor]:
    """log p(choice tokens | prompt) by one plain forward pass, plus the distribution after it."""
    prompt = backend.encode(backend.render(request))
    tokens = backend.encode(backend.render(request) + choice)
    assert tokens[: len(prompt)] == prompt, "test prompts must have a clean token boundary"
    with torch.no_grad():
        logits = backend.model(torch.tensor([tokens], device=backend.model.device)).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    total = sum(logp[p - 1, tokens[p]].item() for p in range(len(prompt), len(tokens)))
    return total, logp[len(tokens) - 1]


@pytest.fixture(scope="module")
def tiny_engine(tiny_llama_dir):
    return load_engine(str(tiny_llama_dir), min_shared_prefix=16)


@pytest.fixture(scope="module")
def tiny_engine_no_sharing(tiny_llama_dir):
    return load_engine(str(tiny_llama_dir), prefix_sharing=False)


@pytest.mark.parametrize("choices", [["yes", "no"], ["A", "B", "C"], ["Plot A", "Plot B"]])
def test_choice_probs_match_plain_forward(tiny_engine, tiny_engine_no_sharing, choices):
    requests = _requests()
    shared = tiny_engine.choice_probs(requests, choices)
    plain = tiny_engine_no_sharing.choice_probs(requests, choices)
    backend = tiny_engine.backend
    for request, a, b in zip(requests, shared, plain, strict=True):
        ref = {c: _reference_logprob(backend, request, c)[0] for c in choices}
        z = math.log(sum(math.exp(v) for v in ref.values()))
        for c in choices:
            assert a.logprobs[c] == close(ref[c], abs=1e-4)
            assert b.logprobs[c] == close(ref[c], abs=1e-4)
            assert a.probs[c] == close(math.exp(ref[c] - z), abs=1e-5)
        assert a.id == request.id
        assert sum(a.probs.values()) == pytest.approx(1.0)


def test_groups_of_different_prefix_lengths_scored_in_one_batch_match_plain_forward(tiny_engine):
    """Packs that continue different prefixes run as one batch, their states right-padded to the longest."""
    requests = [
        ChatRequest.of(f"Rule {j}: is it satisfied?", system=f"Reader {i}. " + SYSTEM[: 150 + 90 * i], id=f"{i}-{j}")
        for i in range(3)
        for j in range(4)
    ]
    backend = tiny_engine.backend
    rows = backend._choice_rows(requests, ["yes", "no"]).rows
    groups = backend._prefix_groups(rows)
    assert sorted(len(group.members) for group in groups) == [4, 4, 4]
    assert len({group.prefix_len for group in groups}) == 3
    found = tiny_engine.choice_probs(requests, ["yes", "no"])
    for request, a in zip(requests, found, strict=True):
        for c in ("yes", "no"):
            assert a.logprobs[c] == close(_reference_logprob(backend, request, c)[0], abs=1e-4)


def test_heads_sharing_a_prefix_run_in_waves_and_match_plain_forward(tiny_llama_dir):
    """Group heads that share a long prefix with each other (PREF's orders of one question's candidates)
    run in waves: the first computes the shared part, the others continue it from the prefix cache.
    The probabilities equal plain forward passes, with the cache (waves) and without (one batch)."""
    questions = [f"Question {i}: " + " ".join(f"q{i}word{j}" for j in range(30)) for i in range(2)]
    orders = [" ".join(f"c{(order + j) % 3}x{j}" for j in range(25)) for order in range(3)]
    requests = [
        ChatRequest.of(
            f"{q}\nCandidates in order {order}: {listed}\nRule {rule}: is it satisfied?", id=f"{i}-{order}-{rule}"
        )
        for i, q in enumerate(questions)
        for order, listed in enumerate(orders)
        for rule in range(4)
    ]
    warm = load_engine(str(tiny_llama_dir), min_shared_prefix=16)
    cold = load_engine(str(tiny_llama_dir), min_shared_prefix=16, prefix_cache_bytes=0)
    rows = warm.backend._choice_rows(requests, ["yes", "no"]).rows
    assert sorted(len(group.members) for group in warm.backend._prefix_groups(rows)) == [4] * 6
    shared = len(warm.backend.encode(warm.backend.render(requests[0]).split("\nCandidates")[0]))
    waved, batched = warm.choice_probs(requests, ["yes", "no"]), cold.choice_probs(requests, ["yes", "no"])
    cache = warm.backend.prefix_cache
    # orders 1 and 2 of each question continue its order 0 (the first head of question 1 may reuse the
    # chat template's system part of question 0's)
    assert cache.hits >= 4 and cache.reused_tokens >= 4 * (shared - 2)
    for request, a, b in zip(requests, waved, batched, strict=True):
        for c in ("yes", "no"):
            reference = _reference_logprob(warm.backend, request, c)[0]
            assert a.logprobs[c] == close(reference, abs=1e-4)
            assert b.logprobs[c] == close(reference, abs=1e-4)


@pytest.mark.parametrize("family", ["mistral", "qwen2"])
def test_sliding_window_applies_to_packed_rows(tmp_path, embedded_tokenizer, family):
    """Packed tails and batched heads run under persetrain's own mask, which must apply the model's sliding
    window: to every layer (Mistral) or to the windowed layers of a model that mixes both (Qwen2)."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(
        vocab_size=len(embedded_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        sliding_window=8,
        pad_token_id=embedded_tokenizer.pad_token_id,
        eos_token_id=embedded_tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    if family == "mistral":
        model = MistralForCausalLM(MistralConfig(**shape))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**shape, use_sliding_window=True, max_window_layers=1))
        assert model.config.layer_types == ["full_attention", "sliding_attention"]
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    model.save_pretrained(tmp_path)
    embedded_tokenizer.save_pretrained(tmp_path)
    engine = load_engine(str(tmp_path), min_shared_prefix=16)
    backend = engine.backend
    requests = _requests(2, 3)
    assert len(backend._prefix_groups(backend._choice_rows(requests, ["yes", "no"]).rows)) == 1
    for request, found in zip(requests, engine.choice_probs(requests, ["yes", "no"]), strict=True):
        for c in ("yes", "no"):
            assert found.logprobs[c] == close(_reference_logprob(backend, request, c)[0], abs=1e-4)
    # Generation keeps whole sequences for the prefix cache, and scoring then continues them.
    generated = engine.generate(requests[:1], GenerationParams(max_new_tokens=6))[0]
    ids = torch.tensor([backend.encode(backend.render(requests[0]))], device=model.device)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=sorted(backend.eos_ids),
            pad_token_id=backend.tokenizer.pad_token_id,
        )
    assert generated.text == backend.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    scoring = requests[0].model_copy(update={"assistant_prefix": generated.text + " Verdict:"})
    hits = backend.prefix_cache.hits
    found = engine.choice_probs([scoring], ["yes", "no"])[0]
    assert backend.prefix_cache.hits > hits
    assert found.logprobs["yes"] == close(_reference_logprob(backend, scoring, "yes")[0], abs=1e-4)


def test_prefix_sharing_groups_requests(tiny_engine):
    backend = tiny_engine.backend
    rows = backend._choice_rows(_requests(3, 4), ["yes", "no"]).rows
    groups = backend._prefix_groups(rows)
    assert sorted(len(group.members) for group in groups) == [12]  # one shared system prompt
    assert groups[0].prefix_len >= len(backend.encode(SYSTEM)) // 2


def test_choice_that_is_a_token_prefix_of_another(tiny_engine):
    """ "1" and "10" share the token "1": P("1") must exclude continuing into "10"."""
    request = ChatRequest.of("Score the story from 1 to 10.", assistant_prefix="[Score] ")
    choices = [str(i) for i in range(1, 11)]
    result = tiny_engine.choice_probs([request], choices)[0]
    backend = tiny_engine.backend
    assert len(backend._choice_rows([request], choices).rows) == 1  # context + "1" gives every distribution
    p1, after_1 = _reference_logprob(backend, request, "1")
    p10, _ = _reference_logprob(backend, request, "10")
    zero = backend.encode("0")[0]
    expected_1 = p1 + math.log1p(-math.exp(after_1[zero].item()))
    assert result.logprobs["1"] == close(expected_1, abs=1e-4)
    assert result.logprobs["10"] == close(p10, abs=1e-4)
    assert sum(result.probs.values()) == pytest.approx(1.0)
    assert 1.0 <= result.expectation() <= 10.0


def test_choice_validation(tiny_engine):
    request = ChatRequest.of("Yes or no?")
    with pytest.raises(ValueError, match="distinct"):
        tiny_engine.choice_probs([request], ["yes", "yes"])
    with pytest.raises(ValueError, match="at least two"):
        tiny_engine.choice_probs([request], ["yes"])
    with pytest.raises(ValueError, match="non-empty"):
        tiny_engine.choice_probs([request], ["yes", ""])


def test_context_overflow_policies(tiny_llama_dir):
    long_request = ChatRequest.of("word " * 700, id="too-long")
    strict = load_engine(str(tiny_llama_dir), truncation="error")
    with pytest.raises(ContextOverflowError, match="too-long"):
        strict.choice_probs([long_request], ["yes", "no"])
    with pytest.raises(ContextOverflowError, match="too-long"):
        strict.generate([long_request], GenerationParams(max_new_tokens=4))
    lenient = load_engine(str(tiny_llama_dir), truncation="left")
    result = lenient.choice_probs([long_request], ["yes", "no"])[0]
    assert result.cost.prompt_tokens == 512 - 1  # window minus the one choice token
    generated = lenient.generate([long_request], GenerationParams(max_new_tokens=4))[0]
    assert generated.cost.prompt_tokens == 512 - 4


def test_greedy_generation_matches_hf_generate(tiny_engine):
    backend = tiny_engine.backend
    requests = [ChatRequest.of("Hi"), ChatRequest.of("Tell me a long story about a lighthouse keeper and a cat.")]
    ours = tiny_engine.generate(requests, GenerationParams(max_new_tokens=12))
    for request, result in zip(requests, ours, strict=True):
        ids = torch.tensor([backend.encode(backend.render(request))], device=backend.model.device)
        with torch.no_grad():
            out = backend.model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=12,
                do_sample=False,
                eos_token_id=sorted(backend.eos_ids),
                pad_token_id=backend.tokenizer.pad_token_id,
            )
        expected = backend.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        assert result.text == expected
        assert result.cost.prompt_tokens == ids.shape[1]


def test_sampling_is_seeded_per_request_not_per_batch(tiny_engine):
    a, b = ChatRequest.of("Write a poem."), ChatRequest.of("Write a much longer poem about the sea.")
    params = GenerationParams(max_new_tokens=10, temperature=1.0, seed=7)
    alone = tiny_engine.generate([a], params)[0].text
    batched = tiny_engine.generate([b, a], params)[1].text
    assert alone == batched
    other_seed = tiny_engine.generate([a], params.model_copy(update={"seed": 8}))[0].text
    assert other_seed != alone


@pytest.mark.slow
@pytest.mark.usefixtures("fp32_compute")
def test_requests_join_and_leave_a_running_batch_and_generate_what_they_would_alone():
    """Continuous batching on the embedded model, whose answers end at different lengths. The token budget holds
    three requests at a time, so the others join the running batch as earlier ones end. Each request's text
    equals its text generated alone (sampled, seeded per request; and under a JSON schema), and the prompt
    states each generation leaves in the prefix cache equal a plain forward pass of the prompt."""
    asks = [
        "Name a colour.",
        "Write two sentences about the sea.",
        "Say hello.",
        "List three fruits.",
        "What is 2+2?",
        "Describe a lighthouse keeper's morning.",
    ]
    requests = [ChatRequest.of(ask, id=str(k)) for k, ask in enumerate(asks)]
    probe = load_engine().backend
    longest = max(len(probe.encode(probe.render(r))) for r in requests)
    engine = load_engine(max_batch_tokens=3 * (longest + 32))
    backend = engine.backend
    sampled = GenerationParams(max_new_tokens=32, temperature=0.7, seed=1)
    batched = engine.generate(requests, sampled)
    assert len({g.cost.completion_tokens for g in batched}) > 2  # ends staggered: rows joined a running batch
    for request in requests:
        prompt = backend.encode(backend.render(request))
        n, states = backend.prefix_cache.longest(prompt)
        with torch.no_grad():
            plain = backend.model(torch.tensor([prompt], device=backend.model.device), use_cache=True).past_key_values
        assert n == len(prompt)
        for (keys, values), layer in zip(states, plain.layers, strict=True):
            assert torch.allclose(keys, layer.keys, atol=1e-4) and torch.allclose(values, layer.values, atol=1e-4)
    assert [g.text for g in batched] == [engine.generate([r], sampled)[0].text for r in requests]
    structured = GenerationParams(
        max_new_tokens=32,
        json_schema={"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]},
    )
    assert [g.text for g in engine.generate(requests, structured)] == [
        engine.generate([r], structured)[0].text for r in requests
    ]


def test_caches_go_under_the_keyword_the_model_takes(tiny_llama_dir):
    """transformers renamed a forward's ``past_key_values`` to ``cache`` (the old name warns, and goes in 5.40),
    and the transformers of verl's environment knows only the old one (tests/test_verl.py scores there), while
    a model ignores a keyword it does not know. The engine's generation and scoring raise no deprecation
    warning, and a PEFT-wrapped model continues its cache under the keyword of the model it wraps: its
    logits after a cached prefix equal one forward pass over the whole text."""
    from peft import LoraConfig, get_peft_model
    from transformers import DynamicCache

    engine = load_engine(str(tiny_llama_dir), min_shared_prefix=4)
    model = get_peft_model(engine.backend.model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    ids = torch.tensor([engine.backend.encode("A prefix, then a tail.")], device=engine.backend.model.device)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        engine.generate(
            [ChatRequest.of("Hi"), ChatRequest.of("Tell me about lighthouses.")], GenerationParams(max_new_tokens=6)
        )
        engine.choice_probs(_requests(n_items=2, n_tails=2), ["yes", "no"])
        whole = model(input_ids=ids).logits[0, -1]
        cache = DynamicCache()
        model(input_ids=ids[:, :-1], **cache_argument(model, cache), use_cache=True)
        continued = model(input_ids=ids[:, -1:], **cache_argument(model, cache), use_cache=True).logits[0, -1]
    assert not [str(w.message) for w in caught if "past_key_values" in str(w.message)]
    assert torch.allclose(continued, whole, **tensor_tolerance(1e-5))


def test_stop_strings_cut_the_text(tiny_engine):
    request = ChatRequest.of("Say anything.")
    full = tiny_engine.generate([request], GenerationParams(max_new_tokens=16))[0]
    stop = full.text[len(full.text) // 2 : len(full.text) // 2 + 3]
    assert stop.strip(), "greedy output too short to pick a stop string"
    cut = tiny_engine.generate([request], GenerationParams(max_new_tokens=16, stop=(stop,)))[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.find(stop)]


def test_cache_skips_finished_calls(tiny_llama_dir, tmp_path):
    requests = _requests(2, 2)
    first = load_engine(str(tiny_llama_dir), cache_path=tmp_path / "cache.sqlite")
    expected = first.choice_probs(requests, ["yes", "no"])
    assert first.cost.calls == len(requests)
    first.close()
    again = load_engine(str(tiny_llama_dir), cache_path=tmp_path / "cache.sqlite")
    results = again.choice_probs(requests, ["yes", "no"])
    assert again.cost.calls == 0 and again.cache_hits == len(requests)
    assert [r.probs for r in results] == [r.probs for r in expected]
    assert all(r.cached and r.cost.calls == 1 for r in results)  # a result still says what it cost
    assert [r.id for r in results] == [r.id for r in requests]


def test_identical_requests_in_one_call_are_computed_once(tiny_llama_dir):
    """Identical requests (a GRPO group's equal completions scored by one judge) are computed once per call,
    with no request cache: the copies are the first's result, marked as cache hits, under their own ids."""
    engine = load_engine(str(tiny_llama_dir))
    a, b = ChatRequest.of("Is tea hot?", id="a"), ChatRequest.of("Is ice cold?", id="b")
    again = a.model_copy(update={"id": "again"})
    scored = engine.choice_probs([a, b, again], ["yes", "no"])
    assert engine.cost.calls == 2 and engine.cache_hits == 1
    assert scored[2].probs == scored[0].probs and scored[2].cost == scored[0].cost
    assert [r.cached for r in scored] == [False, False, True] and [r.id for r in scored] == ["a", "b", "again"]
    params = GenerationParams(max_new_tokens=5, temperature=1.0, seed=3)
    written = engine.generate([again, b, a], params)
    assert engine.cost.calls == 4 and written[2].text == written[0].text and written[2].cached


@pytest.mark.slow
def test_structured_json_on_embedded_model():
    """End to end on the real embedded model: the schema holds even for a 135M model."""
    engine = load_engine()
    schema = {
        "type": "object",
        "properties": {
            "names": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                    "required": ["old", "new"],
                },
                "maxItems": 3,
            }
        },
        "required": ["names"],
    }
    request = ChatRequest.of("List the character names in 'Anna met Boris in Oslo.' with new names, as JSON.")
    result = engine.generate([request], GenerationParams(max_new_tokens=80, json_schema=schema))[0]
    data = json.loads(result.text)
    assert isinstance(data["names"], list)
    assert all(set(item) == {"old", "new"} for item in data["names"])
    digits = engine.generate(
        [ChatRequest.of("Rate the film 1-10.")], GenerationParams(max_new_tokens=4, regex="[1-9]|10")
    )[0]
    assert digits.text in {str(i) for i in range(1, 11)}


def test_scoring_after_generation_reuses_the_generated_states(tiny_llama_dir):
    """Generate, then score choices after prompt + generated text: the scoring pass starts from the
    states generation left behind and gives the probabilities a cold engine computes."""
    # Each request's own text outweighs what they share, so each is its own scoring group.
    requests = [
        ChatRequest.of(
            f"Story {i}: " + " ".join(f"keeper{i} letter{j} lamp{i * j}" for j in range(12)) + " Review it.", id=str(i)
        )
        for i in range(4)
    ]
    params = GenerationParams(max_new_tokens=12, temperature=0.8, seed=3)
    warm = load_engine(str(tiny_llama_dir), min_shared_prefix=16)
    cold = load_engine(str(tiny_llama_dir), min_shared_prefix=16, prefix_cache_bytes=0)
    texts = [g.text for g in warm.generate(requests, params)]
    assert texts == [g.text for g in cold.generate(requests, params)]
    assert len(warm.backend.prefix_cache) == len(requests) and len(cold.backend.prefix_cache) == 0

    scoring = [r.model_copy(update={"assistant_prefix": f"{t} Verdict:"}) for r, t in zip(requests, texts, strict=True)]
    choices = ["1", "10", "2"]  # "10" makes each request's row context + "1", longer than the cached head
    rows = warm.backend._choice_rows(scoring, choices).rows
    # each row joins no other, and is scored from its own cached head
    assert [len(group.members) for group in warm.backend._prefix_groups(rows)] == [1] * len(requests)
    reused = warm.choice_probs(scoring, choices)
    fresh = cold.choice_probs(scoring, choices)
    cache = warm.backend.prefix_cache
    assert cache.hits == len(requests)
    prompt_tokens = min(len(warm.backend.encode(warm.backend.render(r))) for r in requests)
    assert cache.reused_tokens >= len(requests) * prompt_tokens
    for a, b in zip(reused, fresh, strict=True):
        for c in choices:
            assert a.probs[c] == close(b.probs[c], abs=1e-5)


def test_prefix_cache_evicts_least_recently_used():
    from persetrain.engine.prefix_cache import PrefixCache

    def states(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.full((1, 2, n, 4), float(n)), torch.zeros(1, 2, n, 4))]

    per_token = 2 * 2 * 4 * 4  # keys + values, 2 heads x 4 dims, fp32
    cache = PrefixCache(max_bytes=per_token * 10, min_tokens=2)
    cache.put([1, 2, 3, 4], states(4))
    cache.put([5, 6, 7, 8], states(4))
    assert cache.longest([1, 2, 3, 9])[0] == 3  # a shared prefix of an entry is usable
    cache.put([9, 9, 9, 9], states(4))  # over budget: [5, 6, 7, 8] was used least recently
    assert cache.longest([5, 6, 7, 8]) == (0, None)
    n, found = cache.longest([1, 2, 3, 4, 5])
    assert n == 4 and found[0][0].shape == (1, 2, 4, 4)
    cache.put([1, 2, 3, 4, 5], states(5))  # subsumes [1, 2, 3, 4]
    assert len(cache) == 2 and cache.bytes <= cache.max_bytes


def test_prefix_cache_keeps_unused_entries_through_a_scan():
    """Generate N, then score the N in order, with room for fewer than N: plain LRU would make every
    scoring call miss (each miss's entry evicts the next one needed); entries put with
    evict_unused=False only displace entries that have served a lookup, so the last that fit hit."""
    from persetrain.engine.prefix_cache import PrefixCache

    def states(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(torch.zeros(1, 1, n, 1), torch.zeros(1, 1, n, 1))]

    cache = PrefixCache(max_bytes=2 * 4 * 4 * 3, min_tokens=2)  # room for three 4-token entries
    texts = [[i, i, i, i] for i in range(6)]
    for tokens in texts:  # generation: plain LRU keeps the newest three
        cache.put(tokens, states(4))
    hits = []
    for tokens in texts:  # scoring in the same order; a miss offers its own head back
        n, _ = cache.longest(tokens)
        hits.append(n == 4)
        if n < 4:
            cache.put(tokens + [9], states(5), evict_unused=False)
    assert hits == [False, False, False, True, True, True]
    cache.put([7, 7, 7, 7], states(4), evict_unused=False)  # used entries now make room
    assert cache.longest([7, 7, 7, 7])[0] == 4 and cache.bytes <= cache.max_bytes


def test_requests_sharing_half_their_prompt_are_scored_from_their_own_cached_states(tiny_llama_dir):
    """Two prompts that share their first half, each with its whole context cached by its own generation,
    are each scored from their own entry, with the probabilities a cold engine gives."""
    shared = "Profile: " + " ".join(f"shared{j} word{j}" for j in range(20))
    requests = [
        ChatRequest.of(f"{shared} Story {i}: " + " ".join(f"own{i} text{j}" for j in range(20)), id=str(i))
        for i in range(2)
    ]
    params = GenerationParams(max_new_tokens=8, temperature=0.0)
    warm = load_engine(str(tiny_llama_dir), min_shared_prefix=16)
    cold = load_engine(str(tiny_llama_dir), min_shared_prefix=16, prefix_cache_bytes=0)
    texts = [g.text for g in warm.generate(requests, params)]
    scoring = [r.model_copy(update={"assistant_prefix": f"{t} Verdict:"}) for r, t in zip(requests, texts, strict=True)]
    choices = ["1", "10", "2"]
    rows = cold.backend._choice_rows(scoring, choices).rows
    # cold, the two are scored from their shared half; warm, each from its own cached context
    assert [len(group.members) for group in cold.backend._prefix_groups(rows)] == [2]
    assert [len(group.members) for group in warm.backend._prefix_groups(rows)] == [1, 1]
    reused, fresh = warm.choice_probs(scoring, choices), cold.choice_probs(scoring, choices)
    cache = warm.backend.prefix_cache
    prompt_tokens = min(len(warm.backend.encode(warm.backend.render(r))) for r in requests)
    assert cache.hits == 2 and cache.reused_tokens >= 2 * prompt_tokens
    for a, b in zip(reused, fresh, strict=True):
        for c in choices:
            assert a.probs[c] == close(b.probs[c], abs=1e-5)
