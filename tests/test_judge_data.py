"""`persetrain prepare verdict`: verdict prompts with their gold verdict from the real PrefEval slice, a synthetic PerSE
dataset and verifier datasets; order variants, prompts, splits, the card and errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict, load_from_disk
from typer.testing import CliRunner

from data_prep.parl.prepare import prepare_parl
from data_prep.parl.rule_verifier import prepare_verifier
from data_prep.perse.prepare import prepare_perse
from data_prep.preference.prepare import prepare_preference
from data_prep.preference.sources import prefeval_groups
from data_prep.synthetic.parl import write_parl_sample
from data_prep.synthetic.perse import write_sample_data
from data_prep.verdict.prepare import orders_of, prepare_verdict
from persetrain.cli import app
from persetrain.io import InputError
from persetrain.prompts.mcq_letter import LETTERS, letter_request
from persetrain.prompts.verdict import VERDICT_MARK, pair_request, prompt_messages, yes_no_request

PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"
HOLDOUT = "travel_restaurant"
#: Questions per topic of the dev slice (its README).
QUESTIONS = {"education_learning_styles": 31, "lifestyle_dietary": 57, "travel_restaurant": 56}


def _items(rows) -> list[list[dict]]:
    """Consecutive rows grouped by item_id, in dataset order."""
    items: list[list[dict]] = []
    for row in rows:
        if items and items[-1][0]["item_id"] == row["item_id"]:
            items[-1].append(row)
        else:
            items.append([row])
    return items


def _verifier(path: Path, rows: dict[str, list[dict]]) -> Path:
    """A hand-made verifier dataset: conversational prompt and completion per row."""
    DatasetDict({split: Dataset.from_list(r) for split, r in rows.items()}).save_to_disk(str(path))
    return path


def _check(id: str, answer: str, task: str = "amazon") -> dict:
    return {
        "id": id,
        "task": task,
        "prompt": [{"role": "system", "content": "Judge."}, {"role": "user", "content": f"Does {id} pass?"}],
        "completion": [{"role": "assistant", "content": answer}],
    }


@pytest.fixture(scope="module")
def prefeval_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("judge") / "prefeval"
    prepare_verdict(out, prefeval=[PREFEVAL], holdout_topics=[HOLDOUT], seed=0)
    return out


@pytest.fixture(scope="module")
def groups() -> dict:
    return {g.id: g for g in prefeval_groups([PREFEVAL], [HOLDOUT], 0).groups}


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, Path]:
    """A synthetic PerSE dataset (per_mpst_k3) and a verifier dataset of the synthetic PARL amazon users."""
    root = tmp_path_factory.mktemp("synthetic")
    perse = prepare_perse(write_sample_data(root / "raw", seed=0).root, root / "perse").datasets["per_mpst_k3"]
    prepare_parl(write_parl_sample(root / "parl-raw").root, root / "parl", tasks=("amazon",))
    verifier = root / "verifier"
    prepare_verifier(verifier, parl=[root / "parl" / "parl_amazon"])
    return perse, verifier


# ----------------------------------------------------------------------------------------- PrefEval
def test_prefeval_splits_are_topic_disjoint_and_counted_on_the_card(prefeval_out):
    data = load_from_disk(str(prefeval_out))
    assert set(data["validation"]["topic"]) == {HOLDOUT}
    assert set(data["train"]["topic"]) == set(QUESTIONS) - {HOLDOUT}
    assert len(data["validation"]) == 2 * QUESTIONS[HOLDOUT]
    assert len(data["train"]) == 2 * (sum(QUESTIONS.values()) - QUESTIONS[HOLDOUT])
    info = json.loads((prefeval_out / "build_info.json").read_text())
    assert info["splits"] == {split: len(data[split]) for split in ("train", "validation")}
    assert info["items"] == {"train": sum(QUESTIONS.values()) - QUESTIONS[HOLDOUT], "validation": QUESTIONS[HOLDOUT]}
    assert info["counts"]["validation"] == {f"prefeval/{HOLDOUT}": 2 * QUESTIONS[HOLDOUT]}
    assert info["mode"] == "verdict" and info["license"] == "cc-by-nc-4.0" and not info["synthetic"]
    card = (prefeval_out / "README.md").read_text()
    assert "CC BY-NC 4.0" in card and "shuffle_dataset: false" in card and "## Verdict balance" in card
    assert not list(prefeval_out.parent.glob(".prefeval.*"))  # no temporary folder left


def test_every_item_has_its_order_variants_adjacent_with_consistent_golds(prefeval_out, groups):
    data = load_from_disk(str(prefeval_out))
    for split in ("train", "validation"):
        assert set(data[split]["gold"]) == set("ABCD")  # two orders of shuffled options: every letter is gold
        items = _items(data[split])
        assert len({variants[0]["item_id"] for variants in items}) == len(items)  # each item once: adjacent
        for variants in items:
            group = groups[variants[0]["item_id"]]
            assert [row["id"] for row in variants] == [f"{group.id}:o0", f"{group.id}:o1"]
            assert [row["n_orders"] for row in variants] == [2, 2]
            assert variants[0]["order"] == [0, 1, 2, 3] and variants[1]["order"] == [3, 2, 1, 0]
            for row in variants:
                assert row["options"] == [group.options[i] for i in row["order"]]
                assert row["options"][row["gold_index"]] == group.options[group.gold]
                assert row["gold"] == LETTERS[row["gold_index"]] and row["verdicts"] == ["A", "B", "C", "D"]
                assert (row["source"], row["kind"], row["mode"]) == ("prefeval", "choice", "verdict")


def test_verdict_prompt_is_the_mcq_letter_prompt_and_blind_drops_the_preference(prefeval_out):
    for row in load_from_disk(str(prefeval_out))["train"]:
        assert row["prompt"] == prompt_messages(letter_request(row["preference"], row["question"], row["options"]))
        assert row["prompt"][-1] == {"role": "assistant", "content": "Answer: "}
        blind = json.dumps(row["prompt_blind"])
        assert json.dumps(row["preference"])[1:-1] not in blind and "(not stated)" in blind
        assert json.dumps(row["question"])[1:-1] in blind


def test_rows_are_shuffled_by_item_and_the_seed_fixes_them(prefeval_out, tmp_path):
    rows = load_from_disk(str(prefeval_out))["train"].to_list()
    topics = [variants[0]["topic"] for variants in _items(rows)]
    assert topics != sorted(topics)  # topics interleaved, not read in file order
    prepare_verdict(tmp_path / "again", prefeval=[PREFEVAL], holdout_topics=[HOLDOUT], seed=0)
    assert load_from_disk(str(tmp_path / "again"))["train"].to_list() == rows
    prepare_verdict(tmp_path / "other", prefeval=[PREFEVAL], holdout_topics=[HOLDOUT], seed=1)
    assert load_from_disk(str(tmp_path / "other"))["train"]["id"] != [row["id"] for row in rows]


def test_four_orders_show_every_question_gold_at_every_letter(tmp_path):
    prepare_verdict(tmp_path / "out", prefeval=[PREFEVAL], orders=4)
    train = load_from_disk(str(tmp_path / "out"))["train"]
    for variants in _items(train):
        assert sorted(row["gold"] for row in variants) == ["A", "B", "C", "D"]
        assert len({tuple(row["order"]) for row in variants}) == 4
    golds = Counter(train["gold"])
    assert golds == dict.fromkeys("ABCD", sum(QUESTIONS.values()))
    info = json.loads((tmp_path / "out" / "build_info.json").read_text())
    assert info["verdict_balance"]["train"] == {"choice": dict(golds)}


def test_orders_are_distinct_and_at_most_the_permutations():
    assert len(set(orders_of(4, 1, 100, "k"))) == len(orders_of(4, 1, 100, "k")) == 24
    assert orders_of(2, 0, 5, "k") == [(0, 1), (1, 0)]
    assert orders_of(3, 0, 1, "k") == [(0, 1, 2)]
    # the gold (option 1) of the third order is at a position neither the own order (1) nor its reverse (2) shows
    assert orders_of(4, 1, 3, "k")[2].index(1) in (0, 3)


def test_think_mode_asks_for_the_verdict_line(tmp_path):
    prepare_verdict(tmp_path / "out", prefeval=[PREFEVAL], holdout_topics=[HOLDOUT], mode="think")
    data = load_from_disk(str(tmp_path / "out"))
    row = data["train"][0]
    assert row["mode"] == "think" and row["prompt"][-1]["role"] == "user"
    assert f"'{VERDICT_MARK} X'" in row["prompt"][-1]["content"]
    assert f"'{VERDICT_MARK} X'" in row["prompt_blind"][-1]["content"]
    assert "think mode" in (tmp_path / "out" / "README.md").read_text()


# ------------------------------------------------------------------------------- PerSE and verifiers
def test_perse_and_a_verifier_dataset_join_prefeval_in_one_schema(synthetic, tmp_path):
    perse, verifier = synthetic
    out = tmp_path / "mixed"
    sizes = prepare_verdict(out, prefeval=[PREFEVAL], perse=[perse], verifier=[verifier], orders=3, mode="think")
    data = load_from_disk(str(out))
    assert sizes == {split: len(data[split]) for split in ("train", "validation")}
    rows = data["train"].to_list() + data["validation"].to_list()
    assert {(r["source"], r["kind"]) for r in rows} == {
        ("prefeval", "choice"),
        ("perse", "choice"),
        ("parl-verifier", "yes-no"),
    }
    for variants in _items(rows):
        assert len(variants) == variants[0]["n_orders"]
    source = load_from_disk(str(verifier))
    checks = {row["id"]: row for split in source for row in source[split]}
    for row in rows:
        if row["source"] == "perse":  # a pair has 2 orders, however many are asked for
            assert row["n_orders"] == 2 and row["verdicts"] == ["A", "B"]
            label = row["prompt"][0]["content"].split(":", 1)[0]
            expected = pair_request(label, row["preference"], row["question"], row["options"], "think")
            assert row["prompt"] == prompt_messages(expected)
            assert row["preference"][:60] not in json.dumps(row["prompt_blind"])
        elif row["source"] == "parl-verifier":
            check = checks[row["item_id"]]
            assert row["gold"] == check["completion"][0]["content"] and row["topic"] == "amazon"
            assert (row["order"], row["n_orders"], row["gold_index"], row["options"]) == ([], 1, -1, [])
            assert row["prompt"] == prompt_messages(yes_no_request(check["prompt"], "think"))
    assert {r["item_id"] for r in data["validation"] if r["source"] == "parl-verifier"} == {
        row["id"] for row in source["validation"]
    }
    info = json.loads((out / "build_info.json").read_text())
    assert info["synthetic"] and set(info["verdict_balance"]["train"]) == {"choice", "yes-no"}
    card = (out / "README.md").read_text()
    assert "**SYNTHETIC**" in card and "CC BY-NC 4.0" in card and "- synthetic" in card


def test_a_verifier_row_is_kept_as_it_is_in_verdict_mode(tmp_path):
    folder = _verifier(
        tmp_path / "ver",
        {
            "train": [{**_check("a", "yes"), "prompt_blind": _check("blind a", "yes")["prompt"]}],
            "validation": [{**_check("c", "no", task="news"), "prompt_blind": _check("c", "no")["prompt"]}],
        },
    )
    prepare_verdict(tmp_path / "out", verifier=[folder])
    data = load_from_disk(str(tmp_path / "out"))
    row = data["train"][0]
    assert row["prompt"] == _check("a", "yes")["prompt"]
    assert row["prompt_blind"] == _check("blind a", "yes")["prompt"]
    assert (row["id"], row["gold"], row["verdicts"], row["mode"]) == ("a:o0", "yes", ["yes", "no"], "verdict")
    assert data["validation"]["topic"] == ["news"]


def test_the_preference_verifier_view_makes_one_item_of_a_question_and_balance_keeps_one_no(tmp_path):
    """The verifier view of `prepare preference`: its rows of one question (group_id) are one item whose variants
    are the candidates, so verdict-consistent compares them; --balance-yes-no keeps the "yes" and one drawn "no"."""
    views = prepare_preference(tmp_path / "pref", prefeval=[PREFEVAL], holdout_topics=[HOLDOUT])
    source = load_from_disk(str(views["verifier"]))
    prepare_verdict(tmp_path / "all", verifier=[views["verifier"]])
    prepare_verdict(tmp_path / "bal", verifier=[views["verifier"]], balance_yes_no=True, seed=3)
    full, bal = load_from_disk(str(tmp_path / "all")), load_from_disk(str(tmp_path / "bal"))
    for split in ("train", "validation"):
        by_group: dict[str, list[dict]] = {}
        for row in source[split]:
            by_group.setdefault(row["group_id"], []).append(row)
        full_rows = {row["id"]: row for row in full[split]}
        items = _items(full_rows.values())
        assert sorted(v[0]["item_id"] for v in items) == sorted(by_group)  # each question one item, adjacent
        for variants in items:
            rows = by_group[variants[0]["item_id"]]
            assert [v["order"] for v in variants] == [[k] for k in range(len(rows))]
            assert [v["gold"] for v in variants] == [r["completion"][0]["content"] for r in rows]
            assert [v["prompt"] for v in variants] == [r["prompt"] for r in rows]  # verdict mode: unchanged
            assert {(v["n_orders"], v["source"], v["kind"], v["topic"]) for v in variants} == {
                (len(rows), "prefeval-verifier", "yes-no", rows[0]["topic"])
            }
        kept = _items(bal[split])
        assert len(kept) == len(items)
        for variants in kept:
            assert sorted(v["gold"] for v in variants) == ["no", "yes"] and {v["n_orders"] for v in variants} == {2}
            assert variants[0]["order"] < variants[1]["order"]  # in candidate order
            n = len(by_group[variants[0]["item_id"]])
            assert all({**v, "n_orders": n} == full_rows[v["id"]] for v in variants)
    drawn = {v["id"] for v in bal["train"] if v["gold"] == "no"}
    prepare_verdict(tmp_path / "bal0", verifier=[views["verifier"]], balance_yes_no=True, seed=0)
    assert drawn != {v["id"] for v in load_from_disk(str(tmp_path / "bal0"))["train"] if v["gold"] == "no"}


def test_swap_persons_shows_each_questions_yes_candidate_to_another_user_of_its_split_and_topic(tmp_path):
    """--swap-persons: each question's "yes" candidate under another person of the same split (the same topic where
    it has one), gold "no", the rest of the prompt unchanged, is one more of the question's "no" candidates: all
    kept unbalanced, drawn as often as any other "no" one with --balance-yes-no; drawn with the seed."""
    views = prepare_preference(tmp_path / "pref", prefeval=[PREFEVAL], holdout_topics=[HOLDOUT])
    source = load_from_disk(str(views["verifier"]))
    prepare_verdict(tmp_path / "all", verifier=[views["verifier"]], swap_persons=True, seed=3)
    prepare_verdict(tmp_path / "bal", verifier=[views["verifier"]], balance_yes_no=True, swap_persons=True, seed=3)
    full, bal = load_from_disk(str(tmp_path / "all")), load_from_disk(str(tmp_path / "bal"))
    for split in ("train", "validation"):
        groups: dict[str, list[dict]] = {}
        for row in source[split]:
            groups.setdefault(row["group_id"], []).append(row)
        full_rows = {row["id"]: row for row in full[split]}
        for variants in _items(full_rows.values()):
            rows = groups[variants[0]["item_id"]]
            *own, swapped = variants
            assert [v["gold"] for v in own] == [r["label"] for r in rows] and {v["n_orders"] for v in variants} == {
                len(rows) + 1
            }
            yes = next(r for r in rows if r["label"] == "yes")
            user, mine = swapped["prompt"][-1]["content"], yes["prompt"][-1]["content"]
            others = {r["person"] for g in groups.values() for r in g if r["topic"] == yes["topic"]} - {yes["person"]}
            assert any(user == mine.replace(yes["person"], other) for other in others)  # a same-topic person
            assert (swapped["id"], swapped["gold"], swapped["order"]) == (f"{yes['group_id']}:swap", "no", [len(rows)])
            assert swapped["prompt_blind"] == next(v for v in own if v["gold"] == "yes")["prompt_blind"]
        kept = _items(bal[split])
        assert all(sorted(v["gold"] for v in variants) == ["no", "yes"] for variants in kept)
        assert all({**v, "n_orders": full_rows[v["id"]]["n_orders"]} == full_rows[v["id"]] for v in bal[split])
    drawn = sum(v["id"].endswith(":swap") for v in bal["train"])
    assert 0.15 < drawn / len(_items(bal["train"])) < 0.35  # one "no" of four, as often as the others
    prepare_verdict(tmp_path / "all0", verifier=[views["verifier"]], swap_persons=True, seed=0)
    shown = [r["prompt"] for r in full["train"] if r["id"].endswith(":swap")]
    assert shown != [r["prompt"] for r in load_from_disk(str(tmp_path / "all0"))["train"] if r["id"].endswith(":swap")]


def test_the_validation_topics_questions_are_written_for_the_evaluator_that_judges_each_checkpoint(
    prefeval_out, tmp_path
):
    """Beside the verdict rows, `prepare verdict` writes the validation topics' whole questions (``questions``), an
    ``mcq`` dataset `persetrain evaluate` reads: from PrefEval itself, and from the ``listwise`` view beside a
    ``prepare preference`` verifier view (a yes / no row holds one candidate, not its question). A verifier dataset
    with no such view has none."""
    from persetrain.data import read_split

    task, questions = read_split(prefeval_out / "questions", "validation")
    assert task.name == "mcq" and len(questions) == QUESTIONS[HOLDOUT]
    assert {q.id for q in questions} == set(load_from_disk(str(prefeval_out))["validation"]["item_id"])
    assert {q.topic for q in questions} == {HOLDOUT}
    views = prepare_preference(tmp_path / "pref", prefeval=[PREFEVAL], holdout_topics=[HOLDOUT])
    prepare_verdict(tmp_path / "yes-no", verifier=[views["verifier"]], balance_yes_no=True)
    _, from_view = read_split(tmp_path / "yes-no" / "questions", "validation")
    listwise = load_from_disk(str(views["listwise"]))["validation"]
    assert [q.model_dump(include={"id", "options", "gold"}) for q in sorted(from_view, key=lambda q: q.id)] == [
        {"id": row["id"], "options": row["options"], "gold": row["gold"]}
        for row in sorted(listwise, key=lambda row: row["id"])
    ]
    alone = _verifier(tmp_path / "alone", {"train": [_check("a", "yes")], "validation": [_check("b", "no")]})
    prepare_verdict(tmp_path / "no-questions", verifier=[alone])
    assert not (tmp_path / "no-questions" / "questions").exists()


# ------------------------------------------------------------------------------------------- errors
def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="no source: give --prefeval, --perse and/or --verifier") as err:
        prepare_verdict(out)
    _one_line(err)
    with pytest.raises(ValueError, match="judge mode is one of verdict, think, not 'fast'"):
        prepare_verdict(out, prefeval=[PREFEVAL], mode="fast")
    with pytest.raises(ValueError, match="--orders must be at least 1, not 0"):
        prepare_verdict(out, prefeval=[PREFEVAL], orders=0)
    with pytest.raises(InputError, match="unknown holdout topic"):
        prepare_verdict(out, prefeval=[PREFEVAL], holdout_topics=["nope"])
    assert not out.exists()


def test_a_bad_verifier_dataset_names_its_folder_record_and_field(tmp_path):
    out = tmp_path / "out"
    bad = _verifier(tmp_path / "bad", {"train": [_check("a", "yes"), _check("b", "maybe")]})
    with pytest.raises(InputError, match=rf"^{bad}:b: field 'completion': the completion is 'maybe'") as err:
        prepare_verdict(out, verifier=[bad])
    _one_line(err)
    rows = [{k: v for k, v in _check("a", "yes").items() if k != "completion"}]
    no_completion = _verifier(tmp_path / "no-completion", {"train": rows})
    with pytest.raises(InputError, match=rf"^{no_completion}: field 'completion': no such column"):
        prepare_verdict(out, verifier=[no_completion])
    plain = _verifier(tmp_path / "plain", {"train": [{**_check("a", "yes"), "prompt": "Does a pass?"}]})
    with pytest.raises(InputError, match=rf"^{plain}:a: field 'prompt': expected conversational messages"):
        prepare_verdict(out, verifier=[plain])
    with pytest.raises(InputError, match=rf"^{tmp_path}: not a dataset `persetrain prepare verifier` wrote"):
        prepare_verdict(out, verifier=[tmp_path])
    test_split = _verifier(tmp_path / "test-split", {"test": [_check("a", "yes")]})
    with pytest.raises(InputError, match=rf"^{test_split}: field 'split': has the splits \['test'\]"):
        prepare_verdict(out, verifier=[test_split])
    grouped = [{**_check(id, gold), "group_id": "q1"} for id, gold in (("q1:0", "yes"), ("q1:1", "no"))]
    no_person = _verifier(tmp_path / "no-person", {"train": grouped})
    with pytest.raises(InputError, match=rf"^{no_person}:q1:0: field 'person': swapped-person rows need") as err:
        prepare_verdict(out, verifier=[no_person], balance_yes_no=True, swap_persons=True)
    _one_line(err)
    alone = _verifier(tmp_path / "one-person", {"train": [{**row, "person": "q1"} for row in grouped]})
    with pytest.raises(InputError, match=rf"^{alone}: field 'person': the train split: drawing 1 other person"):
        prepare_verdict(out, verifier=[alone], balance_yes_no=True, swap_persons=True)
    assert not out.exists()


def test_an_empty_train_split_or_a_source_twice_is_refused_and_out_is_left_as_it_was(tmp_path):
    out = tmp_path / "out"
    held = _verifier(tmp_path / "held", {"validation": [_check("a", "yes")]})
    with pytest.raises(InputError, match=rf"^{out}: the train split would be empty"):
        prepare_verdict(out, verifier=[held])
    assert not out.exists()
    good = _verifier(tmp_path / "good", {"train": [_check("a", "yes")]})
    prepare_verdict(out, verifier=[good])
    before = load_from_disk(str(out))["train"].to_list()
    with pytest.raises(InputError, match=rf"^{good}: field 'id': item 'a' also comes from {good}; give each source"):
        prepare_verdict(out, verifier=[good, good])
    assert load_from_disk(str(out))["train"].to_list() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good", "held", "out"]


# ---------------------------------------------------------------------------------------------- CLI
def test_cli_writes_the_dataset_and_its_card_and_reports_bad_input_in_one_line(tmp_path):
    runner = CliRunner()
    out = tmp_path / "out"
    args = ["-q", "prepare", "verdict", "--out", str(out), "--prefeval", str(PREFEVAL)]
    result = runner.invoke(app, [*args, "--holdout-topics", f"{HOLDOUT}, ", "--mode", "think", "--orders", "3"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "build_info.json").read_text())
    questions = sum(QUESTIONS.values())
    assert info["splits"] == {"train": 3 * (questions - QUESTIONS[HOLDOUT]), "validation": 3 * QUESTIONS[HOLDOUT]}
    assert info["mode"] == "think" and info["params"]["orders"] == 3
    assert "wrote" in result.output and (out / "README.md").is_file()
    result = runner.invoke(app, [*args, "--mode", "fast"])
    assert result.exit_code == 2 and "error: judge mode is one of verdict, think, not 'fast'" in result.output
