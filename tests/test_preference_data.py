"""`persetrain prepare preference`: the listwise, pairs and verifier datasets from the real PrefEval
folders and from a synthetic PerSE / reference sample; splits, counts, determinism and errors."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from datasets import load_from_disk
from typer.testing import CliRunner

from data_prep.parl.reference import build_reference, read_reference
from data_prep.perse.builders import build_per_mpst
from data_prep.perse.dataset import save_dataset
from data_prep.perse.prepare import prepare_perse
from data_prep.preference.prepare import prepare_preference
from data_prep.readers import mpst
from data_prep.readers.prefeval import read_prefeval
from data_prep.synthetic.parl import write_parl_sample
from data_prep.synthetic.perse import write_sample_data
from persetrain.cli import app
from persetrain.data import read_split
from persetrain.io import InputError
from persetrain.prompts.preference import rm_context

DATA = Path(__file__).resolve().parents[1] / "data" / "prefeval"
PREFEVAL = [DATA / "dev", DATA / "train"]
HOLDOUT = ["lifestyle_dietary", "travel_hotel"]
VIEWS = ("listwise", "pairs", "verifier")


def _load(out: Path) -> dict:
    return {view: load_from_disk(str(out / view)) for view in VIEWS}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def prefeval_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("pref") / "out"
    prepare_preference(out, prefeval=PREFEVAL, holdout_topics=HOLDOUT)
    return out


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """A synthetic PerSE dataset (per_mpst_k3) and a synthetic reference dataset."""
    root = tmp_path_factory.mktemp("sample")
    raw = write_sample_data(root / "raw", seed=0).root
    write_parl_sample(root / "parl", seed=0)
    perse = prepare_perse(raw, root / "perse").datasets["per_mpst_k3"]
    task = root / "parl" / "amazon"
    reference = build_reference(task, "amazon", [task / "baselines.jsonl"], root / "reference", synthetic=True)
    return perse, reference


# ----------------------------------------------------------------------------------------- PrefEval
def test_prefeval_splits_are_topic_disjoint_and_every_view_counts_right(prefeval_out):
    data = _load(prefeval_out)
    topics = {split: set(data["listwise"][split]["topic"]) for split in ("train", "validation")}
    assert topics["validation"] == set(HOLDOUT)
    assert not topics["train"] & topics["validation"]
    assert len(topics["train"]) == 6
    for view in ("pairs", "verifier"):
        for split in ("train", "validation"):
            assert set(data[view][split]["topic"]) == topics[split]
    for split in ("train", "validation"):
        questions = data["listwise"][split]
        assert len(data["pairs"][split]) == sum(len(o) - 1 for o in questions["options"])
        assert len(data["verifier"][split]) == sum(len(o) for o in questions["options"])
        assert data["verifier"][split]["label"].count("yes") == len(questions)
    assert len(data["listwise"]["train"]) + len(data["listwise"]["validation"]) == 144 + 247


def test_prefeval_rows_hold_the_gold_text_and_the_prompts_wording(prefeval_out):
    data = _load(prefeval_out)
    rows = {r["id"]: r for r in data["listwise"]["train"]}
    rejected = defaultdict(list)
    for pair in data["pairs"]["train"]:
        question = rows[pair["group_id"]]
        assert pair["chosen"] == question["options"][question["gold"]]
        assert pair["prompt"] == rm_context(question["preference"], question["question"])
        assert pair["prompt_blind"] == rm_context(None, question["question"])
        assert question["preference"] not in pair["prompt_blind"]
        rejected[pair["group_id"]].append(pair["rejected"])
    for gid, texts in rejected.items():
        question = rows[gid]
        assert sorted(texts) == sorted(o for k, o in enumerate(question["options"]) if k != question["gold"])
    for row in data["verifier"]["train"]:
        question = rows[row["group_id"]]
        option = question["options"][int(row["id"].rsplit(":", 1)[1])]
        assert row["completion"] == [{"role": "assistant", "content": row["label"]}]
        assert (row["label"] == "yes") == (option == question["options"][question["gold"]])
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert option in row["prompt"][1]["content"] and question["preference"] in row["prompt"][1]["content"]
        assert question["preference"] not in row["prompt_blind"][1]["content"]


def test_listwise_is_the_mcq_dataset_evaluate_reads_with_prefevals_option_order(prefeval_out):
    task, examples = read_split(prefeval_out / "listwise", "validation")
    assert task.name == "mcq"
    _, direct = read_prefeval(DATA / "dev")
    same = {e.id: e for e in direct}
    dietary = [e for e in examples if e.topic == "lifestyle_dietary"]
    assert len(dietary) == 57
    assert all(same[e.id].options == e.options and same[e.id].gold == e.gold for e in dietary)
    # The shuffle spreads the gold option over the positions.
    assert len({e.gold for e in examples}) == 4


def test_cards_declare_task_license_counts_and_balance(prefeval_out):
    infos = {v: json.loads((prefeval_out / v / "build_info.json").read_text()) for v in VIEWS}
    assert [infos[v]["task"] for v in VIEWS] == ["mcq", "preference_pairs", "verifier_sft"]
    assert infos["listwise"]["counts"]["validation"] == {"prefeval/lifestyle_dietary": 57, "prefeval/travel_hotel": 54}
    balance = infos["verifier"]["class_balance"]["train"]
    assert balance["no"] == 3 * balance["yes"] and balance["yes_share"] == 0.25
    for view in VIEWS:
        card = (prefeval_out / view / "README.md").read_text()
        assert "license: cc-by-nc-4.0" in card and "CC BY-NC 4.0" in card
        assert "| prefeval/travel_hotel | 0 |" in card


def test_same_seed_same_files_and_no_holdout_puts_every_topic_in_train(tmp_path):
    first, again, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for out, seed in ((first, 0), (again, 0), (other, 1)):
        prepare_preference(out, prefeval=[DATA / "dev"], seed=seed)
    assert _files(first) == _files(again)
    data, shuffled = _load(first), _load(other)
    assert len(data["listwise"]["train"]) == 144 and len(data["listwise"]["validation"]) == 0
    assert data["listwise"]["train"]["options"] != shuffled["listwise"]["train"]["options"]
    assert data["pairs"]["train"]["chosen"] == shuffled["pairs"]["train"]["chosen"]


# ----------------------------------------------------------------------------------- PerSE, reference
def test_perse_pairs_prefer_the_higher_score_and_hide_both_plots_from_the_profile(sample, tmp_path):
    perse, _ = sample
    out = tmp_path / "out"
    prepare_preference(out, perse=[perse], profile_items=2)
    source = load_from_disk(str(perse))
    score = {(r["reviewer_id"], r["query_plot"]): r["score"] for s in source for r in source[s]}
    split_of = {r["reviewer_id"]: ("train" if s == "train" else "validation") for s in source for r in source[s]}
    data = _load(out)
    n_pairs = 0
    for split in ("train", "validation"):
        for row in data["listwise"][split]:
            reviewer = row["id"].split(":")[0]
            assert split_of[reviewer] == split
            scores = [score[(reviewer, o)] for o in row["options"]]
            assert len(row["options"]) == 2 and scores[row["gold"]] > scores[1 - row["gold"]]
            assert row["preference"].count("[The Start of Plot") == 2
            for option in row["options"]:
                assert " ".join(option.split()[:12]) not in row["prompt"]
        n_pairs += len(data["pairs"][split])
        assert len(data["pairs"][split]) == len(data["listwise"][split])
    assert n_pairs > 100


def test_reference_pairs_put_the_users_own_text_first_against_every_generator(sample, tmp_path):
    _, reference = sample
    out = tmp_path / "out"
    prepare_preference(out, reference=[reference], profile_items=2)
    examples = {e.id: e for e in read_reference(reference / "test.jsonl")}
    data = _load(out)
    assert len(data["listwise"]["train"]) and len(data["listwise"]["validation"])
    for split in ("train", "validation"):
        for row in data["pairs"][split]:
            ex = examples[row["group_id"]]
            assert row["chosen"] == ex.reference
            assert row["rejected"] in [t for name, t in ex.outputs.items() if name != "gold"]
            assert ex.profile[-1].split()[0] in row["prompt"] and row["prompt"].startswith("User profile: ")
        assert len(data["pairs"][split]) == sum(len(o) - 1 for o in data["listwise"][split]["options"])
    users = {split: {examples[i].user_id for i in data["listwise"][split]["id"]} for split in ("train", "validation")}
    assert not users["train"] & users["validation"]


# --------------------------------------------------------------------------------------------- errors
def _topic(tmp_path: Path, name: str, edit) -> Path:
    items = json.loads((DATA / "dev" / "mcq_options" / "lifestyle_dietary.json").read_text())[:4]
    edit(items[2])
    folder = tmp_path / name
    folder.mkdir()
    (folder / "lifestyle_dietary.json").write_text(json.dumps(items))
    return folder


def _error(**sources) -> InputError:
    with pytest.raises(InputError) as err:
        prepare_preference(**sources)
    assert "\n" not in str(err.value)
    return err.value


def test_bad_input_is_one_line_naming_file_record_field_and_writes_nothing(sample, tmp_path):
    out = tmp_path / "out"
    prepare_preference(out, prefeval=[DATA / "dev"])
    before = _files(out)

    one = _topic(tmp_path, "one", lambda item: item.update(classification_task_options=["only one"]))
    same = _topic(tmp_path, "same", lambda item: item.update(classification_task_options=["same text"] * 4))
    # The PrefEval reader refuses them, for `prepare preference` and for `evaluate` (`read_split`) alike.
    for folder, problem in ((one, "has 1 option; a question needs at least 2"), (same, "option 1 is the same text as")):
        for err in (_error(out=out, prefeval=[folder]), pytest.raises(InputError, read_split, folder).value):
            where = (err.path, err.record, err.field)
            assert where == (str(folder / "lifestyle_dietary.json"), 2, "classification_task_options")
            assert problem in str(err)

    err = _error(out=out, prefeval=PREFEVAL, holdout_topics=["lifestyle_dietary", "no_such_topic"])
    assert err.field == "holdout_topics" and "no_such_topic" in str(err) and "shop_fashion" in str(err)

    perse, _ = sample
    source = load_from_disk(str(perse))
    plots = {r["query_plot_id"]: r["query_plot"] for s in source for r in source[s]}
    reviews = [
        mpst.Review(plot_id=r["query_plot_id"], reviewer_id=r["reviewer_id"], text=r["review"], score=7)
        for s in source
        for r in source[s]
    ]
    flat = save_dataset(build_per_mpst(plots, reviews), tmp_path / "flat")
    err = _error(out=out, perse=[flat])
    assert (err.path, err.field) == (str(flat), "score") and "no preference pairs" in str(err)

    err = _error(out=out, perse=[perse.parent / "per_doc"])
    assert err.field == "task" and "'pairwise' dataset" in str(err)
    assert _files(out) == before


def test_cli_writes_the_three_datasets_and_reports_bad_input_in_one_line(tmp_path):
    runner = CliRunner()
    out = tmp_path / "out"
    args = [
        "-q",
        "prepare",
        "preference",
        "--out",
        str(out),
        "--prefeval",
        str(PREFEVAL[0]),
        "--prefeval",
        str(PREFEVAL[1]),
    ]
    result = runner.invoke(app, args + ["--holdout-topics", "travel_restaurant, shop_fashion"])
    assert result.exit_code == 0, result.output
    info = json.loads((out / "listwise" / "build_info.json").read_text())
    assert info["splits"] == {"train": 391 - 56 - 54, "validation": 56 + 54}
    result = runner.invoke(app, args + ["--holdout-topics", "nope"])
    assert result.exit_code == 2 and "error:" in result.output and "unknown holdout topic(s) nope" in result.output
