"""The evaluation runner over the evaluator registry: same results as before it, clear errors, YAML configs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data_prep.perse.prepare import prepare_perse
from data_prep.synthetic.perse import write_sample_data
from persetrain.cli import app
from persetrain.evaluation import EvaluationConfig, evaluate, random_sample
from persetrain.evaluators.registry import SystemSpec

GOLDEN = Path(__file__).parent / "data" / "evaluation_golden"
PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"
runner = CliRunner()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """The golden files' data: see tests/data/evaluation_golden/README.md."""
    root = tmp_path_factory.mktemp("golden-data")
    write_sample_data(
        root / "raw", seed=1, n_plots=40, n_reviewers=30, reviews_per_reviewer=(7, 8), n_sparse_reviewers=1
    )
    return prepare_perse(root / "raw", root / "data", engine=None, ks=(3,), profile_words=12).datasets


def _without_seconds(metrics: dict) -> dict:
    for system in metrics["systems"].values():
        system["cost"].pop("seconds")
    return metrics


def _assert_close(written, golden, where: str = "metrics") -> None:
    """Equal structure and values, floats within 1e-4 relative or 1e-5 absolute: scoring in differently
    shaped batches moves probabilities by ~1e-6, and a small p-value by as much (0.0159795 vs 0.0159775
    once the engine batched its prefix heads)."""
    if isinstance(golden, dict):
        assert isinstance(written, dict) and written.keys() == golden.keys(), where
        for key, value in golden.items():
            _assert_close(written[key], value, f"{where}.{key}")
    elif isinstance(golden, list):
        assert isinstance(written, list) and len(written) == len(golden), where
        for k, value in enumerate(golden):
            _assert_close(written[k], value, f"{where}[{k}]")
    elif isinstance(golden, float):
        assert written == pytest.approx(golden, rel=1e-4, abs=1e-5), where
    else:
        assert written == golden, where


def _without_bertscore(metrics: dict) -> dict:
    """BERTScore moved from a hand-written implementation to the bert-score package after the golden
    files were written (the two agree to about 0.01 here); it is checked in test_metrics, not here."""
    for system in metrics["systems"].values():
        for key in ("bertscore_precision", "bertscore_recall", "bertscore_f1"):
            value = system.get("explanation", {}).pop(key, None)
            assert value is None or 0.0 <= value <= 1.0
    return metrics


@pytest.mark.parametrize(
    ("golden", "dataset", "baselines", "options"),
    [
        ("scalar", "per_mpst_k3", ["reviewer-avg", "mf"], {}),
        ("pairwise", "per_doc", ["reviewer-avg"], {}),
        ("amazon", "amazon_books", ["reviewer-avg"], {"calibration": "quantile"}),
    ],
)
@pytest.mark.usefixtures("fp32_compute")
def test_perse_and_baselines_give_the_metrics_of_the_runner_before_the_interface(
    prepared, tiny_llama_dir, tmp_path, golden, dataset, baselines, options
):
    systems = [SystemSpec("tiny", "perse", str(tiny_llama_dir), {"max_new_tokens": 8, "temperature": 0.8, **options})]
    systems += [SystemSpec.parse(b) for b in baselines]
    metrics = evaluate(
        EvaluationConfig(data=str(prepared[dataset]), out=str(tmp_path / "run"), systems=systems, max_per_reviewer=1)
    )
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    golden_metrics = json.loads((GOLDEN / f"{golden}.json").read_text())
    _assert_close(_without_bertscore(_without_seconds(written)), _without_bertscore(golden_metrics))
    assert all(m["cost"]["seconds"] >= 0 for m in metrics["systems"].values())
    assert (tmp_path / "run" / "judgments" / "tiny.jsonl").is_file()


def test_errors_name_what_is_wrong_and_what_would_work(prepared, tmp_path):
    per_doc = str(prepared["per_doc"])
    with pytest.raises(ValueError, match="evaluator 'mf' cannot judge pairwise tasks; evaluators that can: .*perse"):
        evaluate(EvaluationConfig(data=per_doc, out=str(tmp_path / "a"), systems=[SystemSpec.parse("mf")]))
    with pytest.raises(ValueError, match="system names must be unique"):
        evaluate(
            EvaluationConfig(data=per_doc, out=str(tmp_path / "b"), systems=[SystemSpec.parse("reviewer-avg")] * 2)
        )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # refused before writing anything

    undeclared = tmp_path / "records"
    undeclared.mkdir()
    (undeclared / "test.jsonl").write_text("{}\n")
    result = runner.invoke(
        app, ["evaluate", "--data", str(undeclared), "--out", str(tmp_path / "c"), "--baseline", "reviewer-avg"]
    )
    assert result.exit_code == 2 and "not a dataset persetrain can read" in result.output
    assert "Traceback" not in result.output

    result = runner.invoke(
        app,
        [
            "evaluate",
            "--data",
            per_doc,
            "--out",
            str(tmp_path / "d"),
            "--baseline",
            "reviewer-avg",
            "--set",
            "n_factors=3",
        ],
    )
    assert result.exit_code == 2 and "no system's evaluator has an option 'n_factors'" in result.output


def _records(folder: Path, task: str, records: list[dict]) -> Path:
    """A dataset as a user writes one: JSONL records and a dataset.json card naming their task kind."""
    folder.mkdir(parents=True)
    (folder / "dataset.json").write_text(json.dumps({"task": task}))
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _reviews(folder: Path, second_reference: str) -> Path:
    """Two reference-task records; BLEU refuses the second when its reference is empty, while it judges."""
    return _records(
        folder,
        "reference",
        [
            {"id": f"r{i}", "user_id": "u", "input": "write a review", "reference": ref, "profile": ["I liked it"]}
            | {"outputs": {"rag": "good book", "non": "bad book"}}
            for i, ref in enumerate(["great book, loved it", second_reference])
        ],
    )


def _run(data: Path, out: Path, *args: str):
    return runner.invoke(app, ["-q", "evaluate", "--data", str(data), "--out", str(out), *args])


def test_a_run_that_fails_leaves_the_folder_as_the_previous_run_left_it(tmp_path):
    good, bad = _reviews(tmp_path / "good", "fine"), _reviews(tmp_path / "bad", "")
    failed = _run(bad, tmp_path / "fresh", "--baseline", "bleu")
    assert failed.exit_code == 2 and ":r1: field 'reference': " in failed.output
    assert not (tmp_path / "fresh").exists()  # not a config.json of a run that never judged

    out = tmp_path / "run"
    assert _run(good, out, "--system", "first=bleu").exit_code == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    failed = _run(bad, out, "--system", "first=bleu", "--overwrite")
    assert failed.exit_code == 2 and ":r1: field 'reference': " in failed.output
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # config names the data judged

    assert _run(good, out, "--system", "second=bleu", "--overwrite").exit_code == 0
    assert [p.name for p in (out / "judgments").iterdir()] == ["second.jsonl"]  # no system of the earlier run


def test_an_out_that_is_a_file_is_one_error_line(tmp_path):
    data = _reviews(tmp_path / "good", "fine")
    (tmp_path / "afile").write_text("")
    for out, message in [
        (tmp_path / "afile", f"error: {tmp_path / 'afile'}: is a file, not a run directory"),
        (tmp_path / "afile" / "sub", f"{tmp_path / 'afile'} is a file, not a folder"),
    ]:
        result = _run(data, out, "--baseline", "bleu")
        assert result.exit_code == 2 and message in result.output and len(result.output.splitlines()) == 1


def test_sample_options_are_refused_by_name(tmp_path):
    mcq = [{"id": f"q{i}", "preference": "p", "question": "q", "options": ["a", "b", "c"], "gold": 0} for i in range(3)]
    data = _records(tmp_path / "mcq", "mcq", mcq)
    for value in ("0", "-1"):
        result = _run(data, tmp_path / "out", "--baseline", "odd-one-out", "--max-examples", value)
        said = " ".join(result.output.replace("│", " ").split())  # typer's usage panel wraps at the terminal width
        assert result.exit_code == 2
        assert "Invalid value for '--max-examples': Input should be greater than or equal to 1" in said
    result = _run(data, tmp_path / "out", "--baseline", "odd-one-out", "--max-per-reviewer", "1")
    assert result.exit_code == 2 and "(--max-per-reviewer): McqExample records no reviewer" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("max_examples: abc", ": field 'max_examples': Input should be a valid integer"),
        ("max_examples: 0", ": field 'max_examples': Input should be greater than or equal to 1"),
        ("seed: [1]", ": field 'seed': Input should be a valid integer"),
        ("data: [x]", ": field 'data': Input should be a valid string"),
        ("systems: 5", ": field 'systems': must be a list"),
        ("systems: [{evaluator: [odd-one-out]}]", ": field 'systems.0.evaluator': Input should be a valid string"),
        ("systems: [{evaluator: odd-one-out, name: [a]}]", ": field 'systems.0.name': Input should be a valid string"),
        ("bad: : [", ":2: not valid YAML: mapping values are not allowed here (column 6)"),
    ],
)
def test_a_wrong_value_in_the_yaml_config_is_one_line_naming_the_field(tmp_path, line, error):
    config = tmp_path / "eval.yaml"
    config.write_text(line + "\n" if line.startswith("data:") else f"data: {tmp_path}\n{line}\n")
    result = runner.invoke(app, ["-q", "evaluate", "--config", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and result.output.startswith(f"error: {config}{error}"), result.output
    assert len(result.output.splitlines()) == 1


def test_a_config_that_is_not_utf8_is_named(tmp_path):
    config = tmp_path / "eval.yaml"
    config.write_bytes(b"data: \xff\n")
    result = runner.invoke(app, ["-q", "evaluate", "--config", str(config), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and result.output.startswith(f"error: {config}: not a readable YAML evaluation config")


def test_yaml_config_and_command_line_give_the_same_run(prepared, tmp_path):
    data = prepared["per_mpst_k3"]
    config = tmp_path / "eval.yaml"
    config.write_text(
        f"data: {data}\nmax_per_reviewer: 1\nsystems:\n"
        "  - {name: avg, evaluator: reviewer-avg}\n  - {evaluator: mf, n_factors: 2}\n"
    )
    from_yaml = runner.invoke(app, ["-q", "evaluate", "--config", str(config), "--out", str(tmp_path / "yaml")])
    assert from_yaml.exit_code == 0, from_yaml.output
    from_flags = runner.invoke(
        app,
        [
            "-q",
            "evaluate",
            "--data",
            str(data),
            "--out",
            str(tmp_path / "flags"),
            "--max-per-reviewer",
            "1",
            "--system",
            "avg=reviewer-avg",
            "--baseline",
            "mf",
            "--set",
            "n_factors=2",
        ],
    )
    assert from_flags.exit_code == 0, from_flags.output
    yaml_run, flag_run = (
        _without_seconds(json.loads((tmp_path / d / "metrics.json").read_text())) for d in ("yaml", "flags")
    )
    assert yaml_run == flag_run and set(yaml_run["systems"]) == {"avg", "mf"}
    assert json.loads((tmp_path / "yaml" / "config.json").read_text())["systems"][1]["options"] == {"n_factors": 2}


def test_random_sample_is_seeded_spread_and_ordered():
    items = list(range(100))
    first = random_sample(items, 10, seed=3)
    assert first == sorted(first) and len(set(first)) == 10 and max(first) > 10  # not the first ten
    assert random_sample(items, 10, seed=3) == first and random_sample(items, 10, seed=4) != first
    assert random_sample(items, 500, seed=3) == items


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed command line in its own process, as a user runs it (stderr is what they read)."""
    return subprocess.run(
        [sys.executable, "-m", "persetrain.cli", "-q", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _one_error(result: subprocess.CompletedProcess) -> str:
    """The error a refused command printed: a non-zero exit and at most 3 lines on stderr, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and 1 <= len(lines) <= 3 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


@pytest.mark.slow
def test_data_needs_of_every_system_are_checked_before_any_judges(prepared_root, tiny_llama_dir, tmp_path):
    """MF fits on the train split and BLEU reads the reference: a dataset without them is refused, naming the
    system, before the LLM system listed first has loaded its model (no run folder, so no engine cache either)."""
    amazon = prepared_root / "data" / "perse" / "amazon_books"  # a zero-shot test split only
    out = tmp_path / "run"
    judge = f"judge=perse:{tiny_llama_dir}"
    error = _one_error(
        _cli(tmp_path, "evaluate", "--data", str(amazon), "--out", str(out), "--system", judge, "--baseline", "mf")
    )
    assert f"{amazon}: has no split 'train'" in error and "system 'mf' (mf)" in error
    assert not out.exists()

    reviews = _reviews(tmp_path / "reviews", "")
    error = _one_error(
        _cli(
            tmp_path,
            "evaluate",
            "--data",
            str(reviews),
            "--out",
            str(out),
            "--system",
            f"judge=g-eval:{tiny_llama_dir}",
            "--baseline",
            "bleu",
        )
    )
    assert f"{reviews}:r1: field 'reference': system 'bleu' (bleu) compares outputs with the user's own text" in error
    assert not out.exists()


@pytest.mark.slow
def test_a_checkpoint_of_the_wrong_kind_for_its_evaluator_is_refused_before_it_loads(tiny_llama_dir, tmp_path):
    """A reward model read as a causal LM would get a fresh random LM head (accuracy 0.333 on four options); a
    causal LM given to the reward-model evaluator has no scalar head. Both are one line from config.json."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    reward_model = tmp_path / "rm"
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_labels=1
    )
    LlamaForSequenceClassification(config).save_pretrained(reward_model)
    out = tmp_path / "run"
    args = ("evaluate", "--data", str(PREFEVAL), "--out", str(out), "--max-examples", "2")
    error = _one_error(_cli(tmp_path, *args, "--evaluator", "mcq-letter", "--model", str(reward_model)))
    assert f"{reward_model / 'config.json'}: field 'architectures': LlamaForSequenceClassification" in error
    assert "system" in error and "(mcq-letter) reads a causal LM" in error and "rm evaluator" in error
    error = _one_error(_cli(tmp_path, *args, "--evaluator", "rm", "--model", str(tiny_llama_dir)))
    assert f"{tiny_llama_dir / 'config.json'}: field 'architectures': ['LlamaForCausalLM']: not a reward model" in error
    assert not out.exists()


@pytest.mark.slow
def test_an_out_that_holds_another_run_is_refused_unless_overwritten(prepared_root, tmp_path):
    """The same config resumes into its folder; another run is refused in one line (the file, the keys that differ
    and --overwrite) before its data loads, and with --overwrite replaces the earlier run whole."""
    perse = prepared_root / "data" / "perse"
    out = tmp_path / "run"
    first = ("evaluate", "--data", str(perse / "per_mpst_k3"), "--out", str(out), "--baseline", "reviewer-avg")
    assert runner.invoke(app, ["-q", *first]).exit_code == 0
    assert (out / "scatter.png").is_file()
    assert runner.invoke(app, ["-q", *first]).exit_code == 0  # the same run: resumed, not refused
    recorded = json.loads((out / "config.json").read_text())
    older = {k: v for k, v in recorded.items() if k != "person_column"}  # written before the field existed
    (out / "config.json").write_text(json.dumps(older))
    assert runner.invoke(app, ["-q", *first]).exit_code == 0  # still the same run
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    other = ("evaluate", "--data", str(perse / "per_doc"), "--out", str(out), "--baseline", "reviewer-avg")
    error = _one_error(_cli(tmp_path, *other))
    assert f"{out / 'config.json'}: holds another run (it differs in data)" in error and "--overwrite" in error
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before

    assert runner.invoke(app, ["-q", *other, "--overwrite"]).exit_code == 0
    assert json.loads((out / "config.json").read_text())["data"] == str(perse / "per_doc")
    assert not (out / "scatter.png").exists()  # the scalar run's plot went with it: per_doc is pairwise
