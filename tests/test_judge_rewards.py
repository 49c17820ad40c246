"""The judge rewards (``persetrain.rewards.verdict``) against plain restatements, on hand-made completions laid out as
TRL lays a batch out, and the verl adapter against the TRL rewards."""

from __future__ import annotations

import pytest

from persetrain.rewards.verdict import (
    VERDICT_REWARDS,
    parse_verdict,
    verdict_consistent,
    verdict_correct,
    verdict_correct_balanced,
    verdict_format,
)
from persetrain.rewards.verdict_verl import compute_score
from persetrain.train.grpo import make_parser
from persetrain.train.recipe import RecipeError

ABCD = ["A", "B", "C", "D"]
YES_NO = ["yes", "no"]

# (completion, verdicts, mode, what it reads as)
PARSES = [
    ("A", ABCD, "verdict", "A"),
    ("a.", ABCD, "verdict", "A"),
    ("(B)", ABCD, "verdict", "B"),
    ("B) because it has no meat", ABCD, "verdict", "B"),
    ("  **C**\n", ABCD, "verdict", "C"),
    ("Answer: C", ABCD, "verdict", "C"),
    ("verdict: d", ABCD, "verdict", "D"),
    ("Yes", YES_NO, "verdict", "yes"),
    ("no.", YES_NO, "verdict", "no"),
    ("NO, it ignores the preference", YES_NO, "verdict", "no"),
    ("", ABCD, "verdict", None),
    ("maybe", YES_NO, "verdict", None),
    ("The answer is", ABCD, "verdict", None),
    ("E", ABCD, "verdict", None),
    ("Option B keeps it vegan.\nVerdict: B", ABCD, "think", "B"),
    ("A is close, but\n\nverdict: (c).\n\n", ABCD, "think", "C"),
    ("It states the allergy.\nVERDICT: Yes", YES_NO, "think", "yes"),
    ("B is the best answer for this person.", ABCD, "think", None),
    ("Verdict: A\nOn reflection B is better.", ABCD, "think", None),
    ("Clearly the answer is A.\nSo I pick it.", ABCD, "think", None),
    ("A", ABCD, "think", None),
    ("", ABCD, "think", None),
    ("Verdict:", ABCD, "think", None),
]


@pytest.mark.parametrize(("text", "verdicts", "mode", "expected"), PARSES)
def test_parse_verdict_reads_the_first_word_or_the_last_line(text, verdicts, mode, expected):
    assert parse_verdict(text, verdicts, mode) == expected


def test_parse_verdict_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="'chat'"):
        parse_verdict("A", ABCD, "chat")


def _batch() -> dict:
    """Rows for every case above, some completions conversational, with the gold of each row."""
    golds = ["A", "B", "B", "B", "C", "D", "D", "yes", "yes", "no", "A", "no", "C", "A", "B", "C", "no", "B", "A"]
    golds += ["A", "A", "B", "C"]
    completions = [text if k % 3 else [{"role": "assistant", "content": text}] for k, (text, *_) in enumerate(PARSES)]
    return {
        "completions": completions,
        "texts": [text for text, *_ in PARSES],
        "gold": golds,
        "verdicts": [v for _, v, _, _ in PARSES],
        "mode": [m for _, _, m, _ in PARSES],
        "id": [f"row{k}" for k in range(len(PARSES))],
    }


def _columns(batch: dict) -> dict:
    """What TRL passes: the dataset's columns, its own arguments, and a column the rewards do not read."""
    n = len(batch["completions"])
    return {
        "prompts": ["p"] * n,
        "completions": batch["completions"],
        "completion_ids": [[1]] * n,
        "gold": batch["gold"],
        "verdicts": batch["verdicts"],
        "mode": batch["mode"],
        "id": batch["id"],
        "topic": ["food"] * n,
        "trainer_state": None,
        "log_extra": None,
    }


def test_verdict_and_format_rewards_restate_right_and_readable():
    batch = _batch()
    right, readable = [], []
    for k, (_, _, _, expected) in enumerate(PARSES):
        right.append(1.0 if expected == batch["gold"][k] else 0.0)
        readable.append(0.0 if expected is None else 1.0)
    logged = {}
    columns = _columns(batch)
    assert verdict_correct(**columns, log_metric=logged.__setitem__) == right
    assert verdict_format(**columns, log_metric=logged.__setitem__) == readable
    assert 0 < sum(right) < len(right) and 0 < sum(readable) < len(readable)
    assert logged == {
        "verdict/accuracy": pytest.approx(sum(right) / len(right)),
        "verdict/parsed_share": pytest.approx(sum(readable) / len(readable)),
        "verdict/entropy": 0.0,  # every row is its own prompt: one verdict each, no spread
    }


def test_the_rewards_are_named_as_trl_logs_them():
    assert {name: f.__name__ for name, f in VERDICT_REWARDS.items()} == {
        "verdict-correct": "verdict_correct",
        "verdict-correct-balanced": "verdict_correct_balanced",
        "verdict-format": "verdict_format",
        "verdict-consistent": "verdict_consistent",
    }


# --- the position-consistent reward --------------------------------------------------------------------------

G = 3
FORWARD, BACKWARD = [0, 1, 2, 3], [3, 2, 1, 0]


def _consistent_batch() -> dict:
    """Items q1 and q2 in two orders, q3 in one; each prompt's G rollouts consecutive, an item's orders adjacent.

    The gold option is the first one shown forward, so the last one backward: a judge that always answers "A"
    is right forward and wrong backward (q2's rollouts do that).
    """
    prompts = [
        ("q1", FORWARD, "A", ["A", "A", "B"]),
        ("q1", BACKWARD, "D", ["D", "C", "D"]),
        ("q2", FORWARD, "A", ["A", "A", "A"]),
        ("q2", BACKWARD, "D", ["A", "A", "A"]),
        ("q3", FORWARD, "B", ["B", "maybe", "Verdict: B"]),
    ]
    batch = {"completions": [], "gold": [], "item_id": [], "order": []}
    for item, order, gold, answers in prompts:
        for answer in answers:
            batch["completions"].append([{"role": "assistant", "content": answer}])
            batch["gold"].append(gold)
            batch["item_id"].append(item)
            batch["order"].append(list(order))
    n = len(batch["completions"])
    return {**batch, "verdicts": [ABCD] * n, "mode": ["verdict"] * n, "prompts": ["p"] * n}


def _consistent_restated(right: list[bool], items: list[str], orders: list[list[int]]) -> list[float]:
    n = len(right)
    rollout = [sum(1 for j in range(i) if items[j] == items[i] and orders[j] == orders[i]) for i in range(n)]
    rewards = []
    for i in range(n):
        ok = right[i]
        for j in range(n):
            if items[j] == items[i] and orders[j] != orders[i] and rollout[j] == rollout[i]:
                ok = ok and right[j]
        rewards.append(1.0 if ok else 0.0)
    return rewards


def test_consistent_reward_pays_only_rollouts_right_in_every_order():
    batch = _consistent_batch()
    right = [r == 1.0 for r in verdict_correct(**batch)]
    rewards = verdict_consistent(**batch)
    assert rewards == _consistent_restated(right, batch["item_id"], batch["order"])
    # q1: rollout 0 right both ways, 1 wrong backward, 2 wrong forward; q2 always "A"; q3 alone is verdict-correct.
    assert rewards == [1.0, 0.0, 0.0] * 2 + [0.0] * 6 + [1.0, 0.0, 1.0]


def test_consistent_reward_of_an_item_in_one_order_is_the_verdict_reward():
    batch = _consistent_batch()
    alone = {key: values[12:] for key, values in batch.items()}
    assert verdict_consistent(**alone) == verdict_correct(**alone) == [1.0, 0.0, 1.0]
    # Groups in another order of the batch: the same reward for each completion.
    swapped = {key: values[3:6] + values[:3] for key, values in batch.items()}
    assert verdict_consistent(**swapped) == verdict_consistent(**batch)[3:6] + verdict_consistent(**batch)[:3]


def test_consistent_reward_logs_the_share_of_completions_whose_item_the_batch_split():
    """q3 written in two orders but shown in one: its 3 completions of 15 are rewarded by their verdict alone. The
    share of right verdicts and their entropy are logged as verdict-correct logs them, so that a recipe paying by
    consistency alone still shows them."""
    batch = _consistent_batch()
    correct: dict[str, float] = {}
    verdict_correct(**batch, log_metric=correct.__setitem__)
    assert 0 < correct["verdict/accuracy"] < 1 and correct["verdict/entropy"] > 0
    for q3_orders, expected in ((1, 0.0), (2, 3 / 15)):
        logged: dict[str, float] = {}
        n_orders = [2] * 12 + [q3_orders] * 3
        rewards = verdict_consistent(**batch, n_orders=n_orders, log_metric=logged.__setitem__)
        assert rewards == verdict_consistent(**batch)
        assert logged == {**correct, "verdict/split_item_share": expected}


# --- the balanced reward -------------------------------------------------------------------------------------


def _question_batch(answers: dict[str, list[str]]) -> dict:
    """Item q1: a question's four candidates (gold yes, no, no, no), item q2: a balanced pair (yes, no), item q3: two
    swapped-person rows (both gold no); ``answers[row]`` the G rollouts of each row, consecutive as TRL lays them."""
    rows = [("q1", "yes"), ("q1", "no"), ("q1", "no"), ("q1", "no"), ("q2", "yes"), ("q2", "no")]
    rows += [("q3", "no"), ("q3", "no")]
    batch: dict[str, list] = {key: [] for key in ("completions", "gold", "item_id", "id", "verdicts", "mode")}
    for k, (item, gold) in enumerate(rows):
        for text in answers.get(f"{item}-{k}", [gold] * G):
            batch["completions"].append([{"role": "assistant", "content": text}])
            batch["gold"].append(gold)
            batch["item_id"].append(item)
            batch["id"].append(f"{item}-{k}")
            batch["verdicts"].append(YES_NO)
            batch["mode"].append("verdict")
    return batch


def _balanced_restated(batch: dict) -> list[float]:
    """Right, times the item's completions over (its distinct golds x the completions sharing this gold)."""
    rewards = []
    for i, gold in enumerate(batch["gold"]):
        item = batch["item_id"][i]
        n_item = batch["item_id"].count(item)
        golds = {g for g, it in zip(batch["gold"], batch["item_id"], strict=True) if it == item}
        n_gold = sum(1 for g, it in zip(batch["gold"], batch["item_id"], strict=True) if it == item and g == gold)
        right = verdict_correct(**{k: v[i : i + 1] for k, v in batch.items()})[0]
        rewards.append(right * n_item / (len(golds) * n_gold))
    return rewards


def test_the_balanced_reward_weighs_a_questions_one_yes_as_its_three_noes():
    mixed = _question_batch({"q1-0": ["yes", "no", "yes"], "q1-2": ["yes", "no", "no"], "q2-5": ["yes", "no", "x"]})
    rewards = verdict_correct_balanced(**mixed)
    assert rewards == pytest.approx(_balanced_restated(mixed))
    # q1's "yes" candidate pays 4 / (2 x 1) = 2 a right verdict, each "no" candidate 4 / (2 x 3) = 2/3.
    assert rewards[:12] == pytest.approx([2, 0, 2] + [2 / 3] * 3 + [0, 2 / 3, 2 / 3] + [2 / 3] * 3)
    # The balanced pair and an item of one gold earn verdict-correct's rewards.
    assert rewards[12:] == verdict_correct(**{k: v[12:] for k, v in mixed.items()})
    # Answering one verdict to every candidate earns the same, whichever it is: nothing to gain from a favourite.
    for verdict in YES_NO:
        one = verdict_correct_balanced(**_question_batch({f"q1-{k}": [verdict] * G for k in range(4)}))
        assert sum(one[:12]) == pytest.approx(12 / 2)
    logged: dict[str, float] = {}
    verdict_correct_balanced(**mixed, log_metric=logged.__setitem__)
    assert logged["verdict/accuracy"] == pytest.approx(sum(verdict_correct(**mixed)) / len(rewards))


# --- errors --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reward", [verdict_correct, verdict_correct_balanced, verdict_format, verdict_consistent])
def test_a_missing_column_names_it_and_the_command_that_writes_it(reward):
    batch = _consistent_batch()
    del batch["verdicts"]
    with pytest.raises(KeyError, match=r"verdicts.*persetrain prepare verdict"):
        reward(**batch)


def test_a_bad_mode_or_gold_names_the_row_and_the_field():
    batch = _consistent_batch()
    batch["id"] = [f"row{k}" for k in range(len(batch["gold"]))]
    batch["mode"][4] = "chat"
    with pytest.raises(ValueError, match=r"'row4' has mode 'chat'"):
        verdict_format(**batch)
    batch = _consistent_batch()
    batch["gold"][2] = "E"
    with pytest.raises(ValueError, match=r"row 2 of the batch has gold 'E'"):
        verdict_correct(**batch)
    with pytest.raises(ValueError, match=r"gold 'E'"):
        verdict_consistent(**batch)
    assert verdict_format(**batch)  # the format reward reads no gold


# --- verl ----------------------------------------------------------------------------------------------------


def test_verl_scores_each_sample_as_the_trl_rewards_do():
    batch = _batch()
    right, readable = verdict_correct(**_columns(batch)), verdict_format(**_columns(batch))
    for k, text in enumerate(batch["texts"]):
        info = {"verdicts": batch["verdicts"][k], "mode": batch["mode"][k]}
        scored = compute_score("judge/prefeval", text, batch["gold"][k], info)
        assert scored == {"score": right[k], "verdict_correct": int(right[k]), "parsed": int(readable[k])}
        formatted = compute_score("judge/prefeval", text, batch["gold"][k], info, reward="verdict-format")
        assert formatted["score"] == readable[k]


def test_verl_refuses_the_batch_rewards_and_a_row_without_its_verdicts():
    info = {"verdicts": ABCD, "mode": "verdict"}
    for reward in ("verdict-consistent", "verdict-correct-balanced"):
        with pytest.raises(ValueError, match=f"{reward} compares the samples of one batch.*use verdict-correct"):
            compute_score("judge/prefeval", "A", "A", info, reward=reward)
    with pytest.raises(KeyError, match=r"extra_info\['mode'\].*persetrain prepare verdict"):
        compute_score("judge/prefeval", "A", "A", {"verdicts": ABCD})


def test_a_reward_named_as_before_the_rename_is_refused_with_its_new_name(tmp_path):
    """A recipe written when these rewards were ``judge-*`` fails on its first old name, in one line that gives the
    new one, before anything loads."""
    recipe = tmp_path / "old.yaml"
    recipe.write_text("output_dir: runs/x\nreward_funcs: [judge-verdict, judge-consistent]\n")
    with pytest.raises(RecipeError) as err:
        make_parser().parse_args_and_config(["--config", str(recipe)])
    assert str(err.value) == f"{recipe}: reward_funcs: 'judge-verdict' is now 'verdict-correct'"
