"""PARL reward: the math with exact values, the parser's limits, and batched == sequential judging."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from numerics import close

from persetrain.engine import load_engine
from persetrain.rewards.parl import (
    RewardConfig,
    RewardError,
    RubricJudge,
    RubricSample,
    parse_rubric,
    reward_parts,
    score_batch,
    score_sequential,
)
from persetrain.rewards.parl_trl import PARLReward
from persetrain.rewards.parl_verl import compute_score

RULES = [
    "The text is written entirely in lowercase letters.",
    "The text ends with the sign-off 'cheers, kal'.",
    "Every sentence of the text has at most eight words.",
]
P_HISTORY = [[0.9, 0.8], [0.6, 0.4], [0.7, 0.95]]  # rule 1 fails on the second history item
P_GT = [0.9, 0.1, 0.7]  # S_gt over rules 0 and 2 = 0.8
P_NEG = [[0.5, 0.9, 0.3], [0.6, 0.2, 0.8]]  # S = 0.4 and 0.7: D = sigmoid(8) * sigmoid(2) = 0.8805017025628681


@pytest.mark.parametrize(
    ("variant", "expected", "c"),
    [
        ("parl-a", 7.144013620502944, 1.0),  # 0.1 + 10 * 0.8 * 1 * D
        ("parl-b", 8.90501702562868, 1.0),  # 0.1 + 10 * 1 * D
        ("parl-0", 8.1, 1.0),  # 0.1 + 10 * 0.8 * 1 (no margin)
        ("parl-a-linear", 1.508802724100589, 0.2),  # c = 2 valid rules / 10
    ],
)
def test_reward_math_exact(variant, expected, c):
    parts = reward_parts(3, RULES, P_HISTORY, P_GT, P_NEG, RewardConfig(variant=variant))
    assert parts.valid_rules == 2 and parts.total_rules == 3
    assert parts.rules == [RULES[0], RULES[2]]
    assert parts.s_gt == pytest.approx(0.8, abs=1e-12)
    assert parts.s_negatives == pytest.approx([0.4, 0.7], abs=1e-12)
    assert parts.d == pytest.approx(0.8805017025628681, abs=1e-12)
    assert parts.c == c
    assert parts.reward == pytest.approx(expected, abs=1e-12)
    assert parts.variant == variant


def test_threshold_is_strict_and_too_few_rules_give_point_one():
    # p(yes) == 0.5 is not "satisfied": only one rule survives -> 0.1 and no scoring
    parts = reward_parts(3, RULES, [[0.9, 0.9], [0.5, 0.9], [0.2, 0.9]], P_GT, P_NEG)
    assert (parts.reward, parts.valid_rules, parts.s_gt, parts.d) == (0.1, 1, None, None)


def test_unknown_variant_is_an_error():
    with pytest.raises(ValueError, match="parl-a"):
        RewardConfig(variant="parl-c")


def _rubric(rules):
    return json.dumps([{"rule": r} for r in rules])


@pytest.mark.parametrize(
    "text",
    [
        _rubric(RULES),
        "```json\n" + _rubric(RULES) + "\n```",
        "<think>maybe [1, 2] or not</think>\n" + _rubric(RULES) + "\nThese rules capture the user.",
        "Here are the rubrics: " + _rubric(RULES) + " [done]",
    ],
)
def test_parser_is_robust(text):
    parsed = parse_rubric(text)
    assert parsed.rules == RULES and parsed.total_rules == 3


def test_parser_limits():
    assert parse_rubric("no json at all").rules is None
    assert parse_rubric(_rubric(RULES[:1])).rules is None  # 1 rule: below 2
    assert parse_rubric(_rubric(RULES * 4)).rules is None  # 12 rules: above 10
    assert parse_rubric('[{"rule": "a long enough rule text here"}, "bare string"]').rules is None
    # rules outside 20..400 characters are dropped, the set still counts them
    parsed = parse_rubric(_rubric(["too short", "x" * 401, RULES[0], RULES[1]]))
    assert parsed.rules == RULES[:2] and parsed.total_rules == 4
    # a rule repeated (up to case and spacing) counts once, so two copies of one rule are too few valid rules
    repeated = parse_rubric(_rubric([RULES[0], "  " + RULES[0].upper().replace(" ", "  "), RULES[1]]))
    assert repeated.rules == RULES[:2] and repeated.total_rules == 3
    assert parse_rubric(_rubric([RULES[0], RULES[0]])).rules == RULES[:1]


def _samples():
    history_inputs = ["Item: kettle. Rating: 5", "Item: lamp. Rating: 4"]
    history_outputs = ["works great. cheers, kal", "bright and small. cheers, kal"]
    good = _rubric(RULES)
    return [
        RubricSample(
            "amazon",
            good,
            history_inputs,
            history_outputs,
            "Item: mug. Rating: 5",
            "holds my tea. cheers, kal",
            ["This mug is a solid purchase.", "A fine mug overall."],
        ),
        RubricSample(
            "amazon",
            "not a rubric",
            history_inputs,
            history_outputs,
            "Item: mug. Rating: 5",
            "holds my tea. cheers, kal",
            ["This mug is a solid purchase."],
        ),
        RubricSample(
            "amazon",
            _rubric(["short", "tiny", RULES[0]]),
            history_inputs,
            history_outputs,
            "Item: mug. Rating: 5",
            "holds my tea.",
            ["A mug."],
        ),
        RubricSample(
            "amazon",
            good,
            history_inputs,
            history_outputs,
            "Item: mug. Rating: 5",
            "holds my tea. cheers, kal",
            ["This mug is a solid purchase.", "A fine mug overall."],
        ),
    ]


@pytest.fixture(scope="module")
def tiny_engine(tiny_llama_dir):
    return load_engine(str(tiny_llama_dir), prefix_cache_bytes=0)


def test_batched_equals_sequential_and_dedupes(tiny_engine):
    judge = RubricJudge(tiny_engine)
    for variant in ("parl-a", "parl-b"):
        config = RewardConfig(variant=variant, tau=0.0)  # random weights: let rules survive validation
        before = tiny_engine.cost.calls
        batched = score_batch(judge, _samples(), config)
        calls = tiny_engine.cost.calls - before
        sequential = score_sequential(judge, _samples(), config)
        # samples 0 and 3 are identical: their 3 rules x 5 texts are checked once
        assert calls == 3 * 5
        assert [p.reward for p in batched] == close([p.reward for p in sequential], abs=1e-5)
        assert batched[0].valid_rules == 3 and batched[0].d is not None
        assert batched[1].reward == 0.0 and not batched[1].parsed
        assert batched[2].reward == 0.1 and batched[2].total_rules == 3


def test_user_negatives_join_the_margin_judged_with_their_own_inputs(tiny_engine):
    """Batched == sequential with user negatives; a user negative that is the user's own text halves D (σ(0))."""
    judge = RubricJudge(tiny_engine)
    config = RewardConfig(tau=0.0)
    own = _samples()[0]
    other = ("Item: chair. Rating: 3", "it wobbles a bit.")
    samples = [
        replace(own, user_negatives=[other]),
        replace(own, user_negatives=[other, (own.target_input, own.ground_truth)]),
    ]
    batched, sequential = score_batch(judge, samples, config), score_sequential(judge, samples, config)
    assert [p.reward for p in batched] == close([p.reward for p in sequential], abs=1e-5)
    alone = score_batch(judge, [own], config)[0]
    # batched with other checks, a check's padding differs: equal up to float rounding
    assert len(batched[0].s_negatives) == 3 and batched[0].s_negatives[:2] == close(alone.s_negatives, abs=1e-6)
    other_p = [judge.p_yes_many([(own.task, rule, *other)])[0] for rule in batched[0].rules]
    assert batched[0].s_negatives[2] == close(sum(other_p) / len(other_p), abs=1e-6)  # judged with its own input
    assert batched[1].s_negatives[3] == close(batched[1].s_gt, abs=1e-6)
    assert batched[1].d == close(batched[0].d * 0.5, abs=1e-6)


def test_trl_adapter_logs_parts(tiny_engine, tmp_path):
    samples = _samples()[:2]
    reward = PARLReward(tiny_engine, RewardConfig(tau=0.0), parts_path=tmp_path / "parts.jsonl")
    extra, metrics = {}, {}
    columns = {
        "task": [s.task for s in samples],
        "history_inputs": [s.history_inputs for s in samples],
        "history_outputs": [s.history_outputs for s in samples],
        "target_input": [s.target_input for s in samples],
        "ground_truth": [s.ground_truth for s in samples],
        "negatives": [s.negatives for s in samples],
        "id": ["amazon:u1", "amazon:u2"],
    }
    rewards = reward(
        prompts=[[{"role": "user", "content": "x"}]] * 2,
        completions=[[{"role": "assistant", "content": s.completion}] for s in samples],
        completion_ids=[[1], [2]],
        log_extra=extra.__setitem__,
        log_metric=metrics.__setitem__,
        trainer_state=None,
        **columns,
    )
    assert rewards[1] == 0.0 and rewards[0] > 0.1
    assert extra["parl/valid_rules"] == [3, 0] and metrics["parl/parsed_share"] == 0.5
    lines = [json.loads(line) for line in (tmp_path / "parts.jsonl").read_text().splitlines()]
    assert {"total_rules", "valid_rules", "s_gt", "s_negatives", "d", "c", "reward", "variant"} <= lines[0].keys()
    assert [(line["rollout"], line["id"]) for line in lines] == [(0, "amazon:u1"), (1, "amazon:u2")]
    users = {"user_negatives": [["it wobbles."]] * 2, "user_negative_inputs": [["Item: chair. Rating: 3"]] * 2}
    reward(completions=[s.completion for s in samples], **columns, **users)
    assert len(reward.last_parts[0].s_negatives) == len(samples[0].negatives) + 1


def test_verl_adapter_same_keys(tiny_llama_dir):
    info = {
        "metadata": "Item: mug. Rating: 5",
        "profile": [{"input": "Item: kettle", "output": "works. cheers"}],
        "baseline": {"non": "A fine mug."},
    }
    good = compute_score("parl/amazon", _rubric(RULES), "holds my tea. cheers", info, judge_model=str(tiny_llama_dir))
    bad = compute_score("parl/amazon", "nope", "holds my tea. cheers", info, judge_model=str(tiny_llama_dir))
    assert good.keys() == bad.keys() and bad["score"] == 0.0
    assert all(v is not None for v in good.values())


def test_judge_failure_is_loud():
    engine = load_engine("judge", backend="openai", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff=0.01)
    with pytest.raises(RewardError, match="127.0.0.1:9"):
        score_batch(RubricJudge(engine), _samples()[:1])


def test_perse_judge_as_reward(tiny_engine):
    from persetrain.rewards.perse import PerSEReward

    profile = [{"plot_id": "p1", "plot": "A knight guards a bridge.", "review": "Too slow.", "score": 3}]
    reward = PerSEReward(tiny_engine)
    scores = reward(
        prompts=["write a plot"] * 3,
        completions=["A dragon wins a race.", "", "A dragon wins a race."],
        completion_ids=[[1]] * 3,
        profile=[profile] * 3,
        id=["a", "b", "c"],
        reviewer_id=["r"] * 3,
        score_max=[10] * 3,
    )
    assert scores[1] == 1.0  # empty completion: the worst score
    assert 1.0 <= scores[0] <= 10.0 and scores[0] == scores[2]


def test_checks_of_one_text_share_one_prefix_group(tiny_engine):
    """The judge prompt ends with the rule, so the engine computes each text's head once for all its rules
    (and does not merge two review-length texts that share only the system prompt and the task input)."""
    from persetrain.prompts.parl import judge_request

    texts = [
        "holds my tea and keeps it warm for hours. " * 8 + "cheers, kal",
        "A fine mug overall, solid and simple, with a handle that stays cool. " * 6,
    ]
    requests = [judge_request("amazon", "Item: mug. Rating: 5", t, r) for t in texts for r in RULES]
    backend = tiny_engine.backend
    rows = backend._choice_rows(requests, ["yes", "no"]).rows
    groups = backend._prefix_groups(rows)
    assert sorted(len(group.members) for group in groups) == [3, 3]
    for group in groups:
        first = rows[group.members[0]].request
        text = texts[0] if requests[first].messages[-1].content.find(texts[0]) >= 0 else texts[1]
        rendered = backend.render(judge_request("amazon", "Item: mug. Rating: 5", text, "x"))
        head = backend.encode(rendered[: rendered.index("<Personalized Evaluation Rubric>")])
        assert group.prefix_len >= len(head) - 2  # the whole head: system prompt, task input and text


@pytest.mark.slow
def test_rubric_judge_reads_both_spellings_as_the_verifier(tmp_path):
    """On the real embedded model, the rubric judge's p(yes) is P(yes) + P(Yes) over the four spellings (asked again
    by hand, every request is a cache hit): the untrained model answers mostly "Yes" / "No", so the lower case
    alone would read a yes that the model seldom says, near-constant and high on every check."""
    from persetrain.prompts.parl import judge_request

    checks = [
        ("news", RULES[0], "A city opens a new park.", "city opens a new park by the river"),
        ("news", RULES[0], "A city opens a new park.", "CITY OPENS A NEW PARK BY THE RIVER"),
        ("news", RULES[2], "A storm reaches the coast.", "Storm hits. Roads close. Schools shut today."),
    ]
    engine = load_engine("embedded:smollm2-135m-instruct", cache_path=tmp_path / "cache.sqlite")
    try:
        p_yes = RubricJudge(engine).p_yes_many(checks)
        hits = engine.cache_hits
        direct = engine.choice_probs([judge_request(t, i, x, r) for t, r, i, x in checks], ["yes", "Yes", "no", "No"])
        assert engine.cache_hits - hits == len(checks)
    finally:
        engine.close()
    assert p_yes == [d.probs["yes"] + d.probs["Yes"] for d in direct]
    assert all(d.probs["Yes"] + d.probs["No"] > d.probs["yes"] + d.probs["no"] for d in direct)
