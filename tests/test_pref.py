"""PrefEval reader, multiple-choice metrics, PREF's parsers and refusals, and PREF end to end."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data_prep.readers.prefeval import is_prefeval, read_prefeval, shuffle_options
from persetrain.cli import app
from persetrain.data import read_split
from persetrain.engine import load_engine
from persetrain.evaluators.base import JudgeContext
from persetrain.evaluators.mcq_letter import McqLetter
from persetrain.evaluators.pref import PREF, PREFConfig
from persetrain.evaluators.pref_parsing import parse_factors, parse_scores, parse_weights
from persetrain.evaluators.pref_stages import rotate
from persetrain.io import InputError
from persetrain.metrics.mcq import is_correct, mcq_metrics, ndcg, squared_error, strict_argmax
from persetrain.schema import McqExample

PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"
MODEL = "embedded:smollm2-135m-instruct"


# --- metrics --------------------------------------------------------------------------------------


def test_accuracy_needs_the_gold_option_strictly_highest():
    assert is_correct([9, 2, 3], 0) and not is_correct([9, 9, 3], 0) and not is_correct(None, 0)
    assert strict_argmax([1, 7, 3]) == 1 and strict_argmax([7, 7, 3]) is None


def test_mse_maps_gold_to_ten_and_distractors_to_zero():
    assert squared_error([10, 0, 0, 0], 0) == 0
    assert squared_error([8, 2, 0, 4], 0) == pytest.approx((4 + 4 + 0 + 16) / 4)


def test_ndcg_by_rank_and_with_ties():
    assert ndcg([9, 1, 1, 1], 0) == 1.0
    assert ndcg([1, 9, 0, 0], 0) == pytest.approx(1 / math.log2(3))  # second of four
    # tied with two others below the top: the mean over positions 2, 3 and 4
    assert ndcg([1, 9, 1, 1], 0) == pytest.approx(sum(1 / math.log2(1 + p) for p in (2, 3, 4)) / 3)
    # gold tied with one other at the top: the mean over positions 1 and 2
    assert ndcg([5, 5, 1, 1], 0) == pytest.approx((1 + 1 / math.log2(3)) / 2)
    # unparsed: a random ranking of four options
    assert ndcg(None, 0, 4) == pytest.approx(sum(1 / math.log2(1 + p) for p in range(1, 5)) / 4)


def test_mcq_metrics_count_unparsed_questions():
    m = mcq_metrics([[10, 0, 0, 0], [0, 10, 0, 0], None], [0, 0, 1], [4, 4, 4])
    assert m["accuracy"] == pytest.approx(1 / 3)
    assert m["mse"] == pytest.approx((0 + 200 / 4) / 2)  # the unparsed question has no scores to compare
    assert m["n"] == 3 and m["n_unparsed"] == 1
    with pytest.raises(ValueError, match="gold index 5"):
        mcq_metrics([[1, 2]], [5])


# --- reader ---------------------------------------------------------------------------------------


def test_reader_keeps_every_question_and_moves_the_gold_option():
    task, examples = read_prefeval(PREFEVAL)
    assert task == "mcq" and len(examples) == 144
    raw = json.loads((PREFEVAL / "mcq_options" / "travel_restaurant.json").read_text())
    first = next(ex for ex in examples if ex.id == "travel_restaurant-0")
    assert first.options[first.gold] == raw[0]["classification_task_options"][0]
    assert sorted(first.options) == sorted(raw[0]["classification_task_options"])
    assert len({ex.gold for ex in examples}) == 4  # the gold option is not always in one place
    assert read_prefeval(PREFEVAL)[1] == examples  # fixed per question: the same on every read
    assert shuffle_options(["a", "b", "c", "d"], "k") == shuffle_options(["a", "b", "c", "d"], "k")
    assert is_prefeval(PREFEVAL) and is_prefeval(PREFEVAL / "mcq_options") and not is_prefeval(Path(__file__).parent)
    task_kind, loaded = read_split(PREFEVAL / "mcq_options" / "travel_restaurant.json")
    assert task_kind.name == "mcq" and len(loaded) == len(raw)


@pytest.mark.parametrize(
    ("content", "where"),
    [
        (
            '[{"preference": "p", "question": "q", "classification_task_options": ["a", "b"]}, {"preference": "p"}]',
            ":1: field 'question'",
        ),
        (
            '[{"preference": "p", "question": "q", "classification_task_options": ["a", " "]}]',
            ":0: field 'classification_task_options': option 1 is empty",
        ),
        (
            '[{"preference": "p", "question": "q", "classification_task_options": ["a", "b"]}, 3]',
            ":1: expected a JSON object",
        ),
        (
            '[{"preference": "p", "question": "q", "classification_task_options": ["a"]}]',
            ":0: field 'classification_task_options': has 1 option; a question needs at least 2",
        ),
        ('[{"preference": "p", "question": "q", "classification_task_options": ["a",', "not valid JSON"),
    ],
)
def test_reader_errors_name_the_file_and_the_item(tmp_path, content, where):
    bad = tmp_path / "mcq_options" / "topic.json"
    bad.parent.mkdir()
    bad.write_text(content)
    with pytest.raises(InputError) as err:
        read_prefeval(tmp_path)
    assert str(bad) in str(err.value) and where in str(err.value)


# --- PREF parts -----------------------------------------------------------------------------------


def test_stage_parsers():
    assert parse_factors('{"Safety": "No allergens", "Fun": "Enjoyable"}') == {
        "Safety": "No allergens",
        "Fun": "Enjoyable",
    }
    assert parse_factors('{"Safety": 3}') is None and parse_factors('{"Safety": "x"') is None
    weigh = parse_weights(["Safety", "Fun"])
    assert weigh('{"Safety": 9, "Fun": 0, "preh_no_gluten": 10}') == {"Safety": 9, "Fun": 0, "preh_no_gluten": 10}
    assert weigh('{"Safety": 9}') is None  # every coverage factor must be weighed
    assert weigh('{"Safety": 9, "Fun": 0, "extra": 3}') is None  # additions need the preh_ prefix
    assert weigh('{"Safety": 11, "Fun": 0}') is None
    assert parse_scores(3)("[1, 10, 0]") == [1.0, 10.0, 0.0] and parse_scores(3)("[1, 2]") is None


def test_one_candidate_answer_is_refused(tiny_llama_dir):
    single = McqExample(id="one", preference="p", question="q", options=["only answer"], gold=0)
    context = JudgeContext(data=Path("."), split="test", system="pref", out=Path("."))
    engine = load_engine(str(tiny_llama_dir))
    for evaluator in (PREF(), McqLetter()):
        with pytest.raises(ValueError, match=r":one: field 'options': .* this example has 1; give at least two"):
            evaluator.judge([single], engine, context)


def test_variants_and_sampled_scores_on_the_tiny_model(tiny_llama_dir, tmp_path):
    """Every variant and both scoring paths return one judgment per question, unreadable output kept."""
    _, examples = read_prefeval(PREFEVAL)
    examples = examples[:2]
    engine = load_engine(str(tiny_llama_dir), cache_path=tmp_path / "cache.sqlite")
    context = JudgeContext(data=PREFEVAL, split="test", system="pref", out=tmp_path)
    for config in (
        PREFConfig(variant="base"),
        PREFConfig(variant="w/S1", max_new_tokens=24, max_retries=1),
        PREFConfig(max_new_tokens=24, max_retries=1),
        PREFConfig(variant="base", scoring="text"),
    ):
        judgments = PREF(config).judge(examples, engine, context)
        assert [j.example_id for j in judgments] == [ex.id for ex in examples]
        for j in judgments:
            assert j.details["variant"] == config.variant and j.cost.calls > 0
            if j.parsed:
                assert len(j.details["scores"]) == 4 and all(0 <= s <= 10 for s in j.details["scores"])
    # a random model rarely closes a JSON object in 24 tokens: stage 1 is retried, then noted, never dropped
    full = PREF(PREFConfig(max_new_tokens=24, max_retries=1)).judge(examples, engine, context)
    assert all(j.details["factors"] is not None or j.details["notes"] for j in full)


def test_balanced_scores_do_not_depend_on_where_the_list_starts(tiny_llama_dir, tmp_path):
    """Balanced positions score each candidate once in every position: a question whose candidates come
    rotated gets the same scores, candidate for candidate; the paper's single order does not."""
    _, examples = read_prefeval(PREFEVAL)
    ex = examples[0]
    turned = ex.model_copy(
        update={"id": "turned", "options": rotate(ex.options, 1), "gold": (ex.gold - 1) % len(ex.options)}
    )
    engine = load_engine(str(tiny_llama_dir))
    context = JudgeContext(data=PREFEVAL, split="test", system="pref", out=tmp_path)
    balanced = PREF(PREFConfig(variant="base")).judge([ex, turned], engine, context)
    a, b = (j.details["scores"] for j in balanced)
    assert rotate(a, 1) == pytest.approx(b, abs=1e-4)
    by_order = balanced[0].details["scores_by_order"]
    assert len(by_order) == 4 and a == pytest.approx([sum(col) / 4 for col in zip(*by_order, strict=True)])
    single = PREF(PREFConfig(variant="base", balance_positions=False)).judge([ex, turned], engine, context)
    a, b = (j.details["scores"] for j in single)
    assert rotate(a, 1) != pytest.approx(b, abs=1e-4)
    assert balanced[0].cost.calls == 4 * single[0].cost.calls


@pytest.mark.slow
def test_evaluate_pref_on_the_embedded_model(tmp_path):
    """The issue's exact command, on one PrefEval question with the real model."""
    run = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "-q",
            "evaluate",
            "--data",
            str(PREFEVAL),
            "--out",
            str(run),
            "--evaluator",
            "pref",
            "--model",
            MODEL,
            "--max-examples",
            "1",
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((run / "metrics.json").read_text())
    system = metrics["systems"][MODEL]
    assert metrics["kind"] == "mcq" and system["n"] == 1
    assert {"accuracy", "mse", "ndcg"} <= set(system) and system["n_unparsed"] == 0
    written = run / "judgments" / "embedded-smollm2-135m-instruct.jsonl"  # the system's name, slugged
    [judgment] = [json.loads(line) for line in written.read_text().splitlines()]
    assert judgment["details"]["factors"] and judgment["details"]["weights"] is not None
    assert judgment["cost"]["calls"] >= 1 + 1 + 4  # stage 1, stage 2, one scoring pass per option
