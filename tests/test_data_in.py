"""A user's own data, in the layouts TRL users hold, straight into the trainers and `evaluate`.

The fixtures in ``tests/data/`` are hand-written rows in public layouts: conversational preference rows shaped like
UltraFeedback-binarized (a ``prompt`` string, ``chosen`` / ``rejected`` conversations that repeat the user turn),
implicit-prompt rows shaped like HH-RLHF (``\\n\\nHuman: ...\\n\\nAssistant: ...`` strings), and persona rows
(explicit ``prompt``, a ``persona`` column) split into ``train.jsonl`` / ``test.jsonl``. Each goes through
``persetrain rm``, ``sft`` and ``grpo`` on the tiny random model, and through ``evaluate`` / ``meta-eval`` as a
pairwise task; one reward model on the embedded model, trained a few steps on the persona pairs, beats its untrained
self on the held-out pairs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.data import read_split
from persetrain.io import InputError
from persetrain.rows import load_rows, preference_pairs
from persetrain.schema import PreferencePairExample
from persetrain.train.grpo import run_grpo
from persetrain.train.rm import run_rm
from persetrain.train.sft import run_sft

DATA = Path(__file__).resolve().parent / "data"
ULTRAFEEDBACK = DATA / "ultrafeedback_binarized.jsonl"
HH_RLHF = DATA / "hh_rlhf.jsonl"
PERSONAS = DATA / "personas"
QUIET = ["--report_to", "none", "--save_strategy", "no", "--disable_tqdm", "true", "--logging_steps", "1"]


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------ reading
def test_public_layouts_read_as_plain_text_pairs():
    """TRL's layouts: the implicit prompt taken out of conversations (UltraFeedback) and of strings (HH-RLHF)."""
    uf = preference_pairs(load_rows(ULTRAFEEDBACK, "train"), "train", None)
    assert uf[0].prompt == "How do I boil an egg?" and uf[0].chosen.startswith("Place the egg")
    assert uf[0].rejected == "Eggs are laid by hens." and uf[0].person is None
    hh = preference_pairs(load_rows(HH_RLHF, "train"), "train", None)
    assert hh[0].prompt == "Human: What should I pack for a beach day?\n\nAssistant:"
    assert hh[0].chosen == "Sunscreen, water, a towel and a hat." and hh[0].id == "hh_rlhf.jsonl:1"
    personas = preference_pairs(load_rows(PERSONAS, "test"), "test", "persona")
    assert (personas[0].person, personas[0].person_label) == ("I am vegetarian.", "User preference")


def test_parquet_csv_and_saved_folders_read_the_same_rows(tmp_path):
    rows = load_rows(PERSONAS, "train").data
    rows.to_parquet(str(tmp_path / "pairs.parquet"))
    rows.to_csv(str(tmp_path / "pairs.csv"), index=False)
    DatasetDict(train=rows).save_to_disk(str(tmp_path / "saved"))
    expected = preference_pairs(load_rows(PERSONAS, "train"), "train", "persona")
    for source in ("pairs.parquet", "pairs.csv", "saved"):
        got = preference_pairs(load_rows(tmp_path / source, "train"), "train", "persona")
        assert [(p.person, p.prompt, p.chosen, p.rejected) for p in got] == [
            (p.person, p.prompt, p.chosen, p.rejected) for p in expected
        ], source


def test_a_profile_column_renders_through_the_person_template(tmp_path):
    (tmp_path / "train.jsonl").write_text(
        json.dumps({"prompt": "Pick a film.", "chosen": "Alien", "rejected": "Cars", "person": ["Loved The Thing."]})
        + "\n"
    )
    pair = preference_pairs(load_rows(tmp_path / "train.jsonl", "train"), "train", None)[0]
    assert (pair.person_label, pair.person) == ("User profile", "Example 1: Loved The Thing.")


# ------------------------------------------------------------------------------------------ training
@pytest.mark.slow
def test_rm_trains_on_each_layout(tiny_llama_dir, tmp_path, capsys):
    for name, source, extra in (
        ("uf", ULTRAFEEDBACK, []),
        ("hh", HH_RLHF, []),
        ("personas", PERSONAS, ["--person_column", "persona"]),
    ):
        out = tmp_path / name
        argv = ["--model_name_or_path", str(tiny_llama_dir), "--dataset_path", str(source), "--output_dir", str(out)]
        result = run_rm([*argv, "--max_steps", "1", "--per_device_train_batch_size", "2", *QUIET, *extra])
        assert result.global_step == 1, name
        resolved = json.loads((out / "resolved_config.json").read_text())
        assert resolved["script"]["dataset_path"] == str(source)
    said = " ".join(capsys.readouterr().err.split())  # the console writes to stderr, wrapped to its width
    assert said.count("no person column") == 2 and "ultrafeedback_binarized.jsonl: no person column" in said


@pytest.mark.slow
def test_sft_trains_the_verifier_on_preference_rows_and_prompt_completion_rows(tiny_llama_dir, tmp_path):
    out = tmp_path / "verifier"
    argv = ["--model_name_or_path", str(tiny_llama_dir), "--dataset_path", str(PERSONAS), "--output_dir", str(out)]
    result = run_sft([*argv, "--person_column", "persona", "--max_steps", "1", "--per_device_train_batch_size", "2"])
    assert result.global_step == 1
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        "".join(
            json.dumps({"prompt": f"Say hi {i}.", "completion": " hi", "person": "I am terse."}) + "\n"
            for i in range(4)
        )
    )
    argv = ["--model_name_or_path", str(tiny_llama_dir), "--dataset_path", str(completions)]
    result = run_sft([*argv, "--output_dir", str(tmp_path / "pc"), "--max_steps", "1", *QUIET])
    assert result.global_step == 1


@pytest.mark.slow
def test_grpo_trains_the_judge_on_preference_rows(tiny_llama_dir, tmp_path):
    out = tmp_path / "judge"
    argv = ["--model_name_or_path", str(tiny_llama_dir), "--dataset_path", str(ULTRAFEEDBACK), "--output_dir", str(out)]
    judge = ["--reward_funcs", "verdict-correct", "verdict-consistent", "--shuffle_dataset", "false"]
    sizes = ["--num_generations", "2", "--per_device_train_batch_size", "4", "--max_completion_length", "4"]
    result = run_grpo([*argv, *judge, *sizes, "--max_steps", "1", "--beta", "0.001", *QUIET])
    assert result.global_step == 1
    steps = [r for r in _log(out) if r["event"] == "log" and "loss" in r]
    assert steps and "rewards/verdict_correct/mean" in steps[0]


# ------------------------------------------------------------------------------------------ evaluating
def test_a_pairs_file_is_a_pairwise_task_with_a_seeded_order():
    task, examples = read_split(PERSONAS / "test.jsonl", task="pairwise", person_column="persona")
    assert task.name == "pairwise" and all(isinstance(ex, PreferencePairExample) for ex in examples)
    assert {ex.preferred for ex in examples} == {"A", "B"}  # chosen is not always shown first
    assert examples[0].chosen.startswith("A halloumi") and examples[0].person == "I am vegetarian."
    _, again = read_split(PERSONAS / "test.jsonl", task="pairwise", person_column="persona")
    assert [ex.preferred for ex in again] == [ex.preferred for ex in examples]


def test_a_card_declares_the_pairwise_kind_of_preference_rows(tmp_path):
    shutil.copy(PERSONAS / "test.jsonl", tmp_path / "test.jsonl")
    (tmp_path / "dataset.json").write_text(json.dumps({"task": "pairwise", "person_column": "persona"}))
    task, examples = read_split(tmp_path)
    assert task.name == "pairwise" and examples[1].person == "I am gluten intolerant."
    with pytest.raises(InputError, match=r"declares the task kind 'pairwise', not 'mcq' \(--task\)"):
        read_split(tmp_path, task="mcq")


@pytest.mark.slow
def test_evaluate_and_meta_eval_judge_a_pairs_file(tiny_llama_dir, tmp_path):
    """The verifier (p(yes) of a causal LM) judges the pairs; meta-eval runs the flip, blind and swap probes."""
    runner = CliRunner()
    data = ["--data", str(PERSONAS / "test.jsonl"), "--task", "pairwise", "--person-column", "persona"]
    system = ["--system", f"v=verifier:{tiny_llama_dir}"]
    result = runner.invoke(app, ["--quiet", "evaluate", *data, "--out", str(tmp_path / "eval"), *system])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())["systems"]["v"]
    assert metrics["n"] == 8 and 0.0 <= metrics["accuracy"] <= 1.0 and "n_ties" in metrics
    assert "Preference accuracy" in (tmp_path / "eval" / "report.md").read_text()
    args = ["--quiet", "meta-eval", *data, "--out", str(tmp_path / "meta"), *system, "--probe", "flip"]
    result = runner.invoke(app, [*args, "--probe", "blind", "--probe", "swap"])
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "meta" / "metrics.json").read_text())["systems"]["v"]
    assert 0.0 <= meta["flip_rate"] <= 1.0 and "accuracy" in meta["blind"] and "accuracy" in meta["swap"]


@pytest.mark.slow
def test_llm_judge_pref_and_aupel_judge_pairs(tiny_llama_dir, tmp_path):
    """llm-judge and PREF judge a pair as a two-option question, AuPEL as a test case of two systems."""
    data = ["--data", str(PERSONAS / "test.jsonl"), "--task", "pairwise", "--person-column", "persona"]
    systems = [f"j=llm-judge:{tiny_llama_dir}", f"a=aupel:{tiny_llama_dir}", f"p=pref:{tiny_llama_dir}"]
    args = ["--quiet", "evaluate", *data, "--out", str(tmp_path / "run"), "--max-examples", "2"]
    result = CliRunner().invoke(app, [*args, *(flag for s in systems for flag in ("--system", s))])
    assert result.exit_code == 0, result.output
    for name, m in json.loads((tmp_path / "run" / "metrics.json").read_text())["systems"].items():
        assert m["n"] == 2 and m["n_correct"] + m["n_ties"] + m["n_unparsed"] <= 2, name


# ------------------------------------------------------------------------------------------ bad input
def test_bad_input_is_one_line_naming_file_record_and_field(tmp_path):
    no_chosen = tmp_path / "pairs.jsonl"
    no_chosen.write_text('{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": "a", "rejected": "c"}\n')
    with pytest.raises(InputError, match=r"pairs.jsonl:2: field 'chosen': missing"):
        read_split(no_chosen, task="pairwise")
    with pytest.raises(InputError, match=r"test.jsonl: field 'persona_text': no such column \(person_column\)"):
        read_split(PERSONAS / "test.jsonl", task="pairwise", person_column="persona_text")
    fake = tmp_path / "pairs.parquet"
    fake.write_text("prompt,chosen\n")
    with pytest.raises(InputError, match=r"pairs.parquet: not a Parquet file"):
        load_rows(fake, "train")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match=r"empty.jsonl: no records"):
        load_rows(empty, "train")
    with pytest.raises(InputError, match=r"no split 'test' \(has: train\); a single file is the split 'train'"):
        run_rm(["--dataset_path", str(HH_RLHF), "--output_dir", str(tmp_path / "o"), "--eval_strategy", "steps"])


def test_a_per_doc_method_refuses_preference_rows_in_one_line(tmp_path):
    args = ["--quiet", "evaluate", "--data", str(HH_RLHF), "--task", "pairwise", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(app, [*args, "--baseline", "reviewer-avg"])
    assert result.exit_code != 0 and "reviewer-avg reads an annotator's earlier Per-DOC choices" in result.output


def _cache_as_hub_id(hf_home: Path, repo: str, rows_file: Path) -> None:
    """Put ``rows_file`` into ``datasets``' cache as the Hub dataset ``repo`` (what loading it online once leaves):
    the cache of a local build, laid out and named as ``datasets`` lays out a Hub id's."""
    build = subprocess.run(
        [sys.executable, "-c", f"import datasets; datasets.load_dataset('json', data_files={str(rows_file)!r})"],
        env={**os.environ, "HF_HOME": str(hf_home)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr
    built = next((hf_home / "datasets" / "json").glob("*/0.0.0/*[!k]"))  # the build's folder, not its lock files
    namespace, name = repo.split("/")
    target = hf_home / "datasets" / f"{namespace}___{name}" / "default" / "0.0.0" / built.name
    shutil.copytree(built, target)
    for arrow in target.glob("json-*.arrow"):
        arrow.rename(target / arrow.name.replace("json-", f"{name}-", 1))


@pytest.mark.slow
def test_a_cached_hub_id_loads_offline(tmp_path):
    _cache_as_hub_id(tmp_path / "hf", "someone/hh_pairs", HH_RLHF)
    code = (
        "from persetrain.train.configs import ScriptArguments; from persetrain.train.rm import load_reward_splits; "
        "train, _ = load_reward_splits(ScriptArguments(dataset_name='someone/hh_pairs'), want_eval=False, seed=0); "
        "print(len(train), repr(train[0]['chosen']))"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "6 'Sunscreen, water, a towel and a hat.'"


@pytest.mark.slow
def test_a_hub_id_offline_fails_at_once_in_one_line(tmp_path):
    """A Hub id not in the cache, with the Hub offline: one line from the command, no traceback."""
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin"}
    command = [sys.executable, "-m", "persetrain.train.rm", "--dataset_name", "nobody/no-such-pairs"]
    done = subprocess.run(
        [*command, "--output_dir", str(tmp_path / "o")], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("error: nobody/no-such-pairs: field 'dataset_name': cannot load this Hub dataset")
    assert "HF_HUB_OFFLINE" in lines[-1] and "Traceback" not in done.stderr


# ------------------------------------------------------------------------------------------ the embedded model
@pytest.mark.slow
def test_a_reward_model_trained_on_its_pairs_beats_the_untrained_one(tmp_path):
    """Embedded SmolLM2 as a reward model: a few steps on the persona pairs, judged on the held-out ones."""
    out = tmp_path / "rm"
    argv = ["--dataset_path", str(PERSONAS), "--person_column", "persona", "--output_dir", str(out)]
    training = ["--max_steps", "6", "--per_device_train_batch_size", "4", "--learning_rate", "1e-4", "--seed", "0"]
    result = run_rm([*argv, *training, *QUIET])
    untrained = tmp_path / "untrained"
    # The same backbone and seeded head, a step with a learning rate of 0: initialised, not trained.
    run_rm([*argv[:-1], str(untrained), "--max_steps", "1", "--learning_rate", "0", "--seed", "0", *QUIET])

    def accuracy(model: Path, run: str) -> float:
        data = ["--data", str(PERSONAS / "test.jsonl"), "--task", "pairwise", "--person-column", "persona"]
        args = ["--quiet", "evaluate", *data, "--out", str(tmp_path / run), "--system", f"rm=rm:{model}"]
        done = CliRunner().invoke(app, args)
        assert done.exit_code == 0, done.output
        return json.loads((tmp_path / run / "metrics.json").read_text())["systems"]["rm"]["accuracy"]

    before, after = accuracy(untrained, "before"), accuracy(result.model_dir, "after")
    assert after > before, (before, after)


def test_data_prepared_by_persetrain_prepare_is_read_as_before(tmp_path):
    """A prepared folder (build_info.json) skips the conversion: its prompt is already the trainer's."""
    rows = [{"id": "q:1", "prompt": "Question: x\nAnswer:\n", "chosen": "a", "rejected": "b", "prompt_blind": "p"}]
    folder = tmp_path / "pairs"
    DatasetDict(train=Dataset.from_list(rows)).save_to_disk(str(folder))
    (folder / "build_info.json").write_text(json.dumps({"task": "pairs"}))
    from persetrain.train.configs import ScriptArguments
    from persetrain.train.rm import load_reward_splits

    train, _ = load_reward_splits(ScriptArguments(dataset_path=str(folder)), want_eval=False, seed=0)
    assert train[0]["prompt"] == "Question: x\nAnswer:\n"


# ------------------------------------------------------------------------------------------ raw dumps
def _prepare(raw: Path, out: Path, *extra: str):
    args = ["--quiet", "prepare", "perse", "--raw", str(raw), "--out", str(out), "--no-llm", "--no-probe", *extra]
    return CliRunner().invoke(app, args)


def test_prepare_reads_amazons_2018_and_2023_dumps_alike(tmp_path):
    """The same reviews in each dump's own layout (2018 as .jsonl, 2023 as .jsonl.gz) make the same examples (the
    profile drawn for each differs: the draw is seeded by the customer's id, which the dumps spell differently)."""
    built = {}
    for year in ("2018", "2023"):
        result = _prepare(DATA / f"amazon_{year}", tmp_path / year, "--k-core", "2")
        assert result.exit_code == 0, result.output
        _, examples = read_split(tmp_path / year / "amazon_books", split="test")
        built[year] = sorted((ex.query_plot, ex.score, ex.review, ex.score_max) for ex in examples)
    assert built["2018"] == built["2023"] and len(built["2018"]) == 9  # the fourth customer is outside the 2-core


def test_prepare_maps_columns_and_says_what_emptied_a_file(tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(DATA / "amazon_2018", raw)
    books = raw / "amazon" / "Books.jsonl"
    rows = [json.loads(line) for line in books.read_text().splitlines()]
    books.write_text(
        "".join(json.dumps({"body" if k == "reviewText" else k: v for k, v in r.items()}) + "\n" for r in rows)
    )
    result = _prepare(raw, tmp_path / "o1", "--k-core", "2")
    assert (
        result.exit_code != 0
        and "Books.jsonl:1: field 'reviewText': missing column (holds our 'text')" in result.output
    )
    result = _prepare(raw, tmp_path / "o2", "--k-core", "2", "--columns", "amazon_reviews.text=body")
    assert result.exit_code == 0, result.output
    result = _prepare(raw, tmp_path / "o3", "--columns", "amazon_reviews.text=body")  # the default 5-core
    assert "Books.jsonl: every record was removed by the filter: reviews outside the 5-core" in result.output
    result = _prepare(raw, tmp_path / "o4", "--columns", "amazon_reviews.words=body")
    assert result.exit_code != 0 and "no field 'words'" in result.output
    books.write_text("")
    result = _prepare(raw, tmp_path / "o5")
    assert result.exit_code != 0 and "Books.jsonl: no records" in result.output


def test_prepare_parl_maps_columns(parl_sample, tmp_path):
    """PARL's layouts take --columns too: LongLaMP rows whose user column is called 'author'."""
    raw = tmp_path / "raw"
    shutil.copytree(parl_sample.root / "reddit", raw / "reddit")
    rows_file = raw / "reddit" / "topic_writing.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()]
    rows_file.write_text(
        "".join(json.dumps({"author" if k == "name" else k: v for k, v in r.items()}) + "\n" for r in rows)
    )
    args = ["--quiet", "prepare", "parl", "--raw", str(raw), "--task", "reddit"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o1")])
    assert result.exit_code != 0 and "topic_writing.jsonl:1: field 'name': missing or empty" in result.output
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o2"), "--columns", "reddit.name=author"])
    assert result.exit_code == 0, result.output
