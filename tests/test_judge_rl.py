"""GRPO of a judge on its own verdicts (``recipes/verdict/``): the prompt the policy trains after is the prompt
``mcq-letter`` reads after, the judge rewards reach TRL's logs, a killed run resumes with each step logged once, and
the trained judge is read by ``persetrain evaluate`` as any model is (the embedded model end to end)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from datasets import load_from_disk
from safetensors.torch import load_file
from trl.trainer.utils import nanstd

from data_prep.preference.prepare import prepare_preference
from data_prep.verdict.prepare import prepare_verdict
from persetrain.console import console
from persetrain.engine import load_engine
from persetrain.engine.choices import split_choices
from persetrain.evaluation import EvaluationConfig, evaluate
from persetrain.evaluators.registry import SystemSpec
from persetrain.io import InputError, write_json
from persetrain.models import DEFAULT_MODEL, load_tokenizer
from persetrain.prompts.mcq_letter import letter_request
from persetrain.prompts.verdict import prompt_messages, request_of
from persetrain.train.grpo import build_grpo_trainer, make_parser, run_grpo
from persetrain.train.grpo_rows import render_prefixed_prompts
from persetrain.train.item_advantages import item_advantages
from persetrain.train.recipe import RecipeError
from persetrain.train.runner import METRICS_FILE

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "verdict" / "cpu_smollm2_prefeval.yaml"
YES_NO_RECIPE = REPO / "recipes" / "verdict" / "cpu_smollm2_prefeval_yes_no.yaml"
PREFEVAL_DEV = REPO / "data" / "prefeval" / "dev"


@pytest.fixture(scope="module")
def judge_data(tmp_path_factory) -> Path:
    """PrefEval's dev topics as verdict prompts, one topic held out (``persetrain prepare verdict``)."""
    out = tmp_path_factory.mktemp("judge") / "prefeval"
    prepare_verdict(out, prefeval=[PREFEVAL_DEV], holdout_topics=["travel_restaurant"], seed=0)
    return out


@pytest.fixture(scope="module")
def yes_no_data(tmp_path_factory) -> Path:
    """The same questions as yes / no checks of one candidate (the verifier view), balanced."""
    root = tmp_path_factory.mktemp("judge-yes-no")
    views = prepare_preference(root / "pref", prefeval=[PREFEVAL_DEV], holdout_topics=["travel_restaurant"])
    prepare_verdict(root / "judge", verifier=[views["verifier"]], balance_yes_no=True, seed=0)
    return root / "judge"


def _argv(model: Path | str, data: Path, out: Path, *extra: str, recipe: Path = RECIPE) -> list[str]:
    return [
        "--config",
        str(recipe),
        "--model_name_or_path",
        str(model),
        "--dataset_path",
        str(data),
        "--output_dir",
        str(out),
        "--disable_tqdm",
        "true",
        "--save_strategy",
        "no",
        "--max_steps",
        "2",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "4",
        "--gradient_accumulation_steps",
        "1",
        *extra,
    ]


def _logged(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]
    return [r for r in rows if r.get("event") == "log" and "loss" in r]


@pytest.mark.slow
def test_a_prefixed_prompt_trains_on_the_tokens_mcq_letter_reads(judge_data):
    """TRL renders a conversational prompt with a fresh generation prompt; the judge's verdict prompts end with
    mcq-letter's assistant prefix, so they are rendered by the engine's function instead. TRL's tokens of the
    rendered text equal the context mcq-letter reads its letters after (``split_choices``: ``Answer: A`` ends in
    the token `` A``, so the prefix's space is not context), and each letter mcq-letter reads is one token the
    policy can sample there."""
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    train = load_from_disk(str(judge_data))["train"].select(range(4))
    rendered = render_prefixed_prompts(train, tokenizer)
    backend = load_engine(DEFAULT_MODEL).backend
    for row, text in zip(train, rendered["prompt"], strict=True):
        assert isinstance(text, str) and text.endswith("Answer:")
        request = letter_request(row["preference"], row["question"], row["options"])
        assert row["prompt"] == prompt_messages(request)
        asked = backend.render(request)
        letters = row["verdicts"]
        common, per_letter = split_choices(
            backend.encode(asked), [backend.encode(asked + letter) for letter in letters], letters
        )
        assert tokenizer(text=text)["input_ids"] == backend.encode(asked)[:common]
        assert [len(tokens) for tokens in per_letter] == [1] * len(letters)
    # prompts that end with the user's turn are left to TRL's own chat template
    plain = train.map(lambda r: {"prompt": r["prompt"][:-1]})
    assert render_prefixed_prompts(plain, tokenizer)["prompt"] == plain["prompt"]


@pytest.mark.slow
def test_a_yes_no_prompt_trains_on_the_tokens_the_verifier_reads(yes_no_data):
    """A yes / no row ends with the user's turn, so TRL renders it with the chat template's generation prompt: the
    same text the ``verifier`` evaluator asks its ``choice_probs`` after, and every spelling it reads as yes or no is
    one token the policy can sample there (the verdict reward reads any case, the evaluator "yes", "Yes", "no",
    "No")."""
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    train = load_from_disk(str(yes_no_data))["train"].select(range(4))
    rendered = render_prefixed_prompts(train, tokenizer)
    backend = load_engine(DEFAULT_MODEL).backend
    for row, messages in zip(train, rendered["prompt"], strict=True):
        assert messages == row["prompt"] and row["prompt"][-1]["role"] == "user"
        trl_text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        asked = backend.render(request_of(row["prompt"]))
        assert trl_text == asked
        spellings = ["yes", "Yes", "no", "No"]
        common, per_spelling = split_choices(
            backend.encode(asked), [backend.encode(asked + s) for s in spellings], spellings
        )
        assert common == len(backend.encode(asked)) and [len(t) for t in per_spelling] == [1] * 4


def test_a_yes_no_step_holds_both_candidates_of_its_questions(tiny_llama_dir, yes_no_data, tmp_path):
    """Unshuffled, the yes / no recipe's generation batch (here 4 prompts) is whole questions (here 2) x their "yes" and
    "no" candidate, what verdict-consistent and the item baseline compare."""
    argv = _argv(tiny_llama_dir, yes_no_data, tmp_path, recipe=YES_NO_RECIPE)
    argv[argv.index("--gradient_accumulation_steps") + 1] = "2"
    trainer = build_grpo_trainer(*make_parser().parse_args_and_config(argv))
    batch = next(iter(trainer.get_train_dataloader()))
    prompts = {row["id"]: row for row in batch}
    assert len(batch) == 4 * 2 and len(prompts) == 4 and len({row["item_id"] for row in batch}) == 2
    for item in {row["item_id"] for row in batch}:
        assert sorted(r["gold"] for r in prompts.values() if r["item_id"] == item) == ["no", "yes"]


@pytest.mark.slow
def test_grpo_on_a_judges_verdicts_logs_each_reward(tiny_llama_dir, judge_data, tmp_path):
    out = tmp_path / "run"
    result = run_grpo(
        _argv(
            tiny_llama_dir,
            judge_data,
            out,
            "--reward_funcs",
            "verdict-correct",
            "verdict-consistent",
            "verdict-format",
            "verdict-correct-balanced",
            "--reward_weights",
            "1",
            "1",
            "0.1",
            "0",
        )
    )
    assert result.global_step == 2 and result.exit_code == 0
    steps = _logged(out)
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        for name in ("verdict_correct", "verdict_consistent", "verdict_format"):
            assert 0.0 <= record[f"rewards/{name}/mean"] <= 1.0
        # right in both orders is never more common than right
        assert record["rewards/verdict_consistent/mean"] <= record["rewards/verdict_correct/mean"]
        # an item's orders share one gold, so the balanced reward is the plain one; both log the share of right
        # verdicts that benchmarks/judge_rl.py reads as the reward curve
        right = record["rewards/verdict_correct/mean"]
        assert record["rewards/verdict_correct_balanced/mean"] == pytest.approx(right)
        assert record["verdict/accuracy"] == pytest.approx(right)
    resolved = json.loads((out / "resolved_config.json").read_text())
    assert resolved["training"]["shuffle_dataset"] is False


def test_a_step_holds_every_order_of_its_questions(tiny_llama_dir, judge_data, tmp_path):
    """Unshuffled, a generation batch of 4 prompts is 2 questions x their 2 orders, what verdict-consistent needs."""
    argv = _argv(tiny_llama_dir, judge_data, tmp_path)
    argv[argv.index("--gradient_accumulation_steps") + 1] = "2"
    trainer = build_grpo_trainer(*make_parser().parse_args_and_config(argv))
    batch = next(iter(trainer.get_train_dataloader()))
    items = [row["item_id"] for row in batch]
    assert len(items) == 4 * 2  # 4 prompts a generation batch of 8 rollouts, each prompt twice
    assert len(set(items)) == 2 and all(items.count(i) == 4 for i in set(items))


def test_bad_input_is_refused_in_one_line_naming_the_file_and_the_field(tiny_llama_dir, judge_data, tmp_path):
    """An unknown reward (the recipe and the key), a dataset without gold verdicts and a verdict format the parser
    does not know (the dataset, the row and the field), each before anything trains."""
    with pytest.raises(RecipeError, match=rf"{re.escape(str(RECIPE))} \+ command line: reward_funcs: unknown reward"):
        run_grpo(_argv(tiny_llama_dir, judge_data, tmp_path / "a", "--reward_funcs", "verdict-corrects"))
    splits = load_from_disk(str(judge_data))
    no_gold = tmp_path / "no-gold"
    splits.remove_columns("gold").save_to_disk(str(no_gold))
    with pytest.raises(InputError, match=rf"^{re.escape(str(no_gold))}: field 'gold': the verdict-correct reward"):
        run_grpo(_argv(tiny_llama_dir, no_gold, tmp_path / "b", "--reward_funcs", "verdict-correct"))
    odd = tmp_path / "odd-mode"
    first = splits["train"][0]["id"]
    splits.map(lambda r: {"mode": "essay" if r["id"] == first else r["mode"]}).save_to_disk(str(odd))
    where = re.escape(f"{odd}:{first}: field 'mode': verdict format 'essay' is not one the parser knows")
    with pytest.raises(InputError, match=rf"^{where}"):
        run_grpo(_argv(tiny_llama_dir, odd, tmp_path / "c", "--reward_funcs", "verdict-format"))
    assert not any((tmp_path / name).exists() for name in ("a", "b", "c"))


def test_a_layout_that_splits_an_items_orders_is_refused_before_training(tiny_llama_dir, judge_data, tmp_path):
    """verdict-consistent compares an item's orders within one process's batch: a batch of 2 completions (one order of
    one question, 2 rollouts), a shuffled sampler and rows stored apart are each refused before the model loads."""
    consistent = ("--reward_funcs", "verdict-correct", "verdict-consistent")
    argv = _argv(tiny_llama_dir, judge_data, tmp_path / "a", *consistent)
    argv[argv.index("--per_device_train_batch_size") + 1] = "2"
    whole = (
        "each process scores per_device_train_batch_size 2 x steps_per_generation 1 = 2 completions at a time, which "
        "must be a multiple of an item's 2 variants x num_generations 2 = 4"
    )
    with pytest.raises(RecipeError, match=re.escape(whole)):
        run_grpo(argv)
    with pytest.raises(RecipeError, match="set shuffle_dataset: false"):
        run_grpo(_argv(tiny_llama_dir, judge_data, tmp_path / "b", *consistent, "--shuffle_dataset", "true"))
    scattered = tmp_path / "scattered"
    load_from_disk(str(judge_data)).shuffle(seed=0).save_to_disk(str(scattered))
    apart = rf"^{re.escape(str(scattered))}:.*field 'item_id': the rows of item .* are not adjacent"
    with pytest.raises(InputError, match=apart):
        run_grpo(_argv(tiny_llama_dir, scattered, tmp_path / "c", *consistent))
    assert not any((tmp_path / name).exists() for name in ("a", "b", "c"))


def test_a_row_limit_takes_whole_questions(tiny_llama_dir, judge_data, tmp_path):
    """max_train_samples 9 of questions in 2 orders: the 8 rows of 4 whole questions, each one's orders adjacent."""
    argv = _argv(tiny_llama_dir, judge_data, tmp_path, "--max_train_samples", "9")
    rows = build_grpo_trainer(*make_parser().parse_args_and_config(argv)).train_dataset
    items = rows["item_id"]
    assert len(items) == 8 and len(set(items)) == 4
    assert all(items[k] == items[k + 1] and rows["order"][k] != rows["order"][k + 1] for k in range(0, 8, 2))


def test_an_overlong_candidate_takes_its_whole_question_with_it(tiny_llama_dir, yes_no_data, tmp_path):
    """The yes / no candidates of a question differ in length: cut between them, max_prompt_length drops the
    question, not one candidate, so every item left is whole and the next items stay on the batch edges."""
    train = load_from_disk(str(yes_no_data))["train"]
    tokenizer = load_tokenizer(str(tiny_llama_dir))
    lengths = [
        len(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
        for p in train["prompt"]
    ]
    by_item: dict[str, list[int]] = {}
    for item, n in zip(train["item_id"], lengths, strict=True):
        by_item.setdefault(item, []).append(n)
    limit = sorted(lengths)[len(lengths) // 2]
    straddling = {item for item, ns in by_item.items() if min(ns) <= limit < max(ns)}
    assert straddling  # some question has one candidate under the limit and one over it
    argv = _argv(tiny_llama_dir, yes_no_data, tmp_path, "--max_prompt_length", str(limit), recipe=YES_NO_RECIPE)
    kept = build_grpo_trainer(*make_parser().parse_args_and_config(argv)).train_dataset
    kept_items = set(kept["item_id"])
    assert kept_items == {item for item, ns in by_item.items() if max(ns) <= limit}
    assert all(kept["item_id"].count(item) == 2 for item in kept_items)


@pytest.mark.slow
def test_a_killed_judge_run_resumes_with_every_step_logged_once(tiny_llama_dir, judge_data, tmp_path):
    out = tmp_path / "killed"
    argv = _argv(tiny_llama_dir, judge_data, out, "--save_strategy", "steps", "--save_steps", "2")
    argv[argv.index("--max_steps") + 1] = "5"
    command = [sys.executable, "-m", "persetrain.train.grpo", *argv]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while proc.poll() is None and not (
        (out / "checkpoint-2" / "trainer_state.json").is_file() and any(r["step"] >= 3 for r in _logged(out))
    ):
        assert time.monotonic() < deadline, "no step 3 in 300 s"
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert subprocess.run(command, env=env, capture_output=True).returncode == 0
    steps = _logged(out)
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert all("rewards/verdict_correct/mean" in r for r in steps)


@pytest.mark.slow
def test_the_embedded_judge_trains_and_mcq_letter_reads_it(judge_data, tmp_path):
    """End to end on the embedded model: two GRPO steps of the CPU recipe, then ``persetrain evaluate`` with
    ``mcq-letter`` on the merged judge, on the held-out topic's questions."""
    out = tmp_path / "rl"
    argv = _argv(DEFAULT_MODEL, judge_data, out)
    argv[argv.index("--num_generations") + 1] = "4"
    argv[argv.index("--per_device_train_batch_size") + 1] = "8"
    result = run_grpo(argv)
    assert result.global_step == 2 and (out / "merged" / "config.json").is_file()
    holdout = load_from_disk(str(judge_data))["validation"]
    assert set(holdout["topic"]) == {"travel_restaurant"} and set(holdout["mode"]) == {"verdict"}
    metrics = evaluate(
        EvaluationConfig(
            data=str(PREFEVAL_DEV),
            out=str(tmp_path / "eval"),
            systems=[SystemSpec("rl", "mcq-letter", str(out / "merged"))],
            max_examples=6,
            seed=0,
        )
    )
    rl = metrics["systems"]["rl"]
    assert rl["n"] == 6 and rl["n_unparsed"] == 0  # mcq-letter read a letter for every question from the judge
    assert abs(rl["accuracy"] * 6 - round(rl["accuracy"] * 6)) < 1e-9, rl  # the share of the 6 it got right


def spread_then_equal(completions, trainer_state, **_) -> list[float]:
    """A reward that collapses on purpose: 0 / 1 within every group (rollouts of a prompt are consecutive, 2 of
    each) for the first 3 steps, then 0 everywhere, so that every group's rewards are equal from step 4 on."""
    if trainer_state.global_step < 3:
        return [float(k % 2) for k in range(len(completions))]
    return [0.0] * len(completions)


def _events(out: Path, event: str) -> list[dict]:
    return [r for r in map(json.loads, (out / METRICS_FILE).read_text().splitlines()) if r.get("event") == event]


def _weights(folder: Path) -> dict:
    """The trained weights a run or checkpoint saved: its LoRA adapter, or the whole model when trained whole."""
    adapter = folder / "adapter_model.safetensors"
    return load_file(str(adapter if adapter.is_file() else folder / "model.safetensors"))


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)


COLLAPSING = ("--reward_funcs", "verdict-correct", "test_judge_rl.spread_then_equal", "--reward_weights", "0", "1")
COLLAPSE_WATCH = ("--save_strategy", "steps", "--save_steps", "1", "--collapse_window", "2", "--logging_steps", "1")


@pytest.mark.slow
@pytest.mark.parametrize("use_peft", ["true", "false"], ids=["lora", "whole"])
def test_a_collapse_is_written_once_and_the_run_rolls_back_to_the_last_good_checkpoint(
    use_peft, tiny_llama_dir, yes_no_data, tmp_path
):
    """Every group's rewards equal from step 4: the window of steps 4-5 is a collapse, written once to metrics.jsonl
    and the console; rollback stops the run there and its final model is checkpoint-3, saved before the window (kept
    on disk while the window was watched), whether the run trains a LoRA adapter or every weight (the recipe). Each
    step logs the equal groups' share and the verdicts' entropy."""
    out = tmp_path / "rollback"
    argv = _argv(tiny_llama_dir, yes_no_data, out, *COLLAPSING, *COLLAPSE_WATCH, recipe=YES_NO_RECIPE)
    argv[argv.index("--max_steps") + 1] = "8"
    argv += ["--use_peft", use_peft, "--collapse_action", "rollback", "--validation_evaluator", ""]
    with console.capture() as captured:
        result = run_grpo(argv)
    assert result.global_step == 5 and result.exit_code == 0
    steps = _logged(out)
    assert [r["frac_reward_zero_std"] for r in steps] == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert all(r["verdict/entropy"] >= 0 for r in steps)
    [collapse] = _events(out, "collapse")
    assert (collapse["step"], collapse["onset"], collapse["ends_with_step"], collapse["action"]) == (
        5,
        4,
        3,
        "rollback",
    )
    assert captured.get().count("collapse at step 5") == 1
    assert result.metrics["chosen_step"] == 3
    assert _same_weights(_weights(out), _weights(out / "checkpoint-3"))
    assert not _same_weights(_weights(out), _weights(out / "checkpoint-5"))
    # the checkpoints that could no longer be chosen were deleted as the run went: the newest and the chosen one stay
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-5"]


@pytest.mark.slow
def test_a_collapse_before_the_first_save_rolls_back_to_the_untrained_start(tiny_llama_dir, yes_no_data, tmp_path):
    """A collapse found at step 5, long before the first of every 10 steps' checkpoints: the run ends with
    checkpoint-1, the first step's, which under the recipe's warm-up (rate 0 at the first step) holds exactly the
    untrained weights, not with the collapsed last step."""
    out = tmp_path / "early"
    watch = ("--save_strategy", "steps", "--save_steps", "10", "--collapse_window", "2", "--logging_steps", "1")
    argv = _argv(tiny_llama_dir, yes_no_data, out, *COLLAPSING, *watch, recipe=YES_NO_RECIPE)
    argv[argv.index("--max_steps") + 1] = "8"
    argv += ["--use_peft", "false", "--collapse_action", "rollback", "--validation_evaluator", ""]
    result = run_grpo(argv)
    assert result.global_step == 5 and result.metrics["chosen_step"] == 1
    [collapse] = _events(out, "collapse")
    assert (collapse["onset"], collapse["ends_with_step"]) == (4, 1)
    assert _same_weights(_weights(out), load_file(str(tiny_llama_dir / "model.safetensors")))
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]


@pytest.mark.slow
def test_a_collapse_can_stop_the_run_or_only_be_written(tiny_llama_dir, yes_no_data, tmp_path):
    """stop: the run ends at the collapse with its last weights; warn: the collapse is written and training goes on."""
    for action, last in (("stop", 5), ("warn", 6)):
        out = tmp_path / action
        argv = _argv(tiny_llama_dir, yes_no_data, out, *COLLAPSING, *COLLAPSE_WATCH, recipe=YES_NO_RECIPE)
        argv[argv.index("--max_steps") + 1] = "6"
        result = run_grpo([*argv, "--collapse_action", action, "--validation_evaluator", ""])
        assert result.global_step == last and "chosen_step" not in result.metrics
        assert [r["step"] for r in _events(out, "collapse")] == [5]
        assert _same_weights(_weights(out), _weights(out / f"checkpoint-{last}"))


@pytest.mark.slow
def test_each_checkpoint_is_judged_on_held_out_topics_and_the_run_ends_with_the_best(
    tiny_llama_dir, yes_no_data, tmp_path
):
    """The yes / no recipe judges each saved checkpoint with the verifier on the held-out topic's questions that
    `prepare verdict` wrote, writes validation/accuracy to metrics.jsonl, and ends with the best one (the earliest of
    equal ones): with LoRA, the final adapter is that checkpoint's, merged once, and the run's metrics name it."""
    out = tmp_path / "validated"
    argv = _argv(tiny_llama_dir, yes_no_data, out, recipe=YES_NO_RECIPE)
    argv[argv.index("--save_strategy") + 1] = "steps"
    argv[argv.index("--max_steps") + 1] = "3"
    argv += ["--save_steps", "1", "--validation_max_examples", "6", "--learning_rate", "0.05", "--use_peft", "true"]
    result = run_grpo(argv)
    validated = _events(out, "validation")
    assert [r["step"] for r in validated] == [1, 2, 3]
    scores = {r["step"]: r["validation/accuracy"] for r in validated}
    assert all(0.0 <= score <= 1.0 for score in scores.values())
    best = max(scores, key=lambda step: (scores[step], -step))
    assert result.metrics["chosen_step"] == best and result.metrics["chosen_metric"] == scores[best]
    assert validated[-1]["validation/best_step"] == best
    assert _same_weights(_weights(out), _weights(out / f"checkpoint-{best}"))
    assert (out / "merged" / "config.json").is_file()
    assert {p.name for p in out.glob("checkpoint-*")} <= {f"checkpoint-{best}", "checkpoint-3"}
    judged = json.loads((out / "validation" / "checkpoint-1" / "metrics.json").read_text())
    assert judged["n_examples"] == 6
    assert {q["topic"] for q in load_from_disk(str(yes_no_data / "questions"))["validation"]} == {"travel_restaurant"}


def test_verdict_entropy_is_per_prompt():
    from persetrain.rewards.verdict import verdict_entropy

    # two prompts of 4 rollouts: one split 2 / 2 (1 bit), one unanimous (0 bits)
    parsed = ["yes", "no", "yes", "no", "no", "no", "no", "no"]
    assert verdict_entropy(parsed, ["a"] * 4 + ["b"] * 4) == pytest.approx(0.5)
    assert verdict_entropy([None, "A", "B", "C"], ["q"] * 4) == pytest.approx(2.0)


def test_a_resumed_run_chooses_among_the_checkpoints_and_scores_the_stopped_run_left(tmp_path):
    """A run resumed at step 30 reads back its checkpoints on disk and their validation scores and collapse from
    metrics.jsonl: the best checkpoint saved before the collapse's onset is still the choice, and one saved after the
    resumed step (a torn save) is not counted."""
    from transformers import TrainerState, TrainingArguments

    from persetrain.train.callbacks import CheckpointChoice

    for step in (10, 20, 30, 40):
        (tmp_path / f"checkpoint-{step}").mkdir()
    records = [
        {"event": "validation", "step": 10, "validation/accuracy": 0.5},
        {"event": "validation", "step": 20, "validation/accuracy": 0.7},
        {"event": "validation", "step": 30, "validation/accuracy": 0.9},
        {"event": "collapse", "step": 30, "onset": 25},
    ]
    (tmp_path / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none")
    choice = CheckpointChoice(validating=True)
    choice.resume(args, TrainerState(global_step=30))
    assert choice.saved == [10, 20, 30] and choice.collapse_onset == 25
    assert choice.chosen(args, final=True) == 20


def test_item_advantages_are_trls_when_each_item_is_one_prompt_and_pay_a_one_verdict_judge_otherwise():
    """With one prompt an item, the baseline is TRL's own (its formula, for each scale_rewards); over a question's two
    candidates, a judge that says "yes" to both (right on one, wrong on the other: every prompt's rewards equal, so
    TRL's advantages are all 0) is pushed towards each candidate's gold."""
    torch.manual_seed(0)
    rewards = torch.rand(12)
    rewards[5] = torch.nan  # no reward function scored it: out of the mean, advantage 0
    grouped = rewards.view(-1, 4)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(4)
    for scale, divisor in (
        ("group", nanstd(grouped, dim=1).repeat_interleave(4) + 1e-4),
        ("batch", nanstd(rewards) + 1e-4),
        ("none", torch.ones(12)),
    ):
        trl_advantages = torch.nan_to_num((rewards - mean) / divisor, nan=0.0)
        ours = item_advantages(rewards, [i // 4 for i in range(12)], scale)
        assert torch.allclose(ours, trl_advantages), scale
    one_verdict = torch.tensor([1.0] * 4 + [0.0] * 4)  # question q: its "yes" candidate's 4 rollouts, its "no"'s 4
    assert item_advantages(one_verdict, [0] * 4 + [1] * 4, "group").abs().max() == 0  # per prompt: nothing
    paid = item_advantages(one_verdict, ["q"] * 8, "group")
    assert torch.allclose(paid, torch.tensor([0.5] * 4 + [-0.5] * 4) / (nanstd(one_verdict) + 1e-4))
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        item_advantages(one_verdict, ["q"] * 8, "item")


@pytest.mark.slow
def test_item_advantages_replace_trls_in_a_training_step(tiny_llama_dir, yes_no_data, tmp_path):
    """advantage_group: item on the yes / no recipe: the advantages of a generation batch are the item baseline of
    the rewards TRL computed (over each question's two candidates), not TRL's per-prompt one; the run trains. A
    dataset without item_id, and a reward aggregation the baseline cannot follow, are refused."""
    # the embedded model, whose sampled verdicts are right on some rollouts (the tiny one never says yes or no)
    argv = _argv(DEFAULT_MODEL, yes_no_data, tmp_path / "a", "--advantage_group", "item", recipe=YES_NO_RECIPE)
    argv[argv.index("--num_generations") + 1] = "4"
    argv[argv.index("--per_device_train_batch_size") + 1] = "16"
    trainer = build_grpo_trainer(*make_parser().parse_args_and_config(argv))
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()
    advantages = trainer._generate_and_score_completions(batch)["advantages"]
    items, prompts = [row["item_id"] for row in batch], [row["id"] for row in batch]
    assert len(set(items)) == 2 and len(set(prompts)) == 4
    rewards = (trainer._batch_rewards * trainer.reward_weights.unsqueeze(0)).nansum(dim=1)
    assert rewards.std() > 0
    assert torch.allclose(advantages, item_advantages(rewards, items, trainer.scale_rewards))
    assert not torch.allclose(advantages, item_advantages(rewards, prompts, trainer.scale_rewards))  # TRL's
    tiny = _argv(tiny_llama_dir, yes_no_data, tmp_path / "t", "--advantage_group", "item", recipe=YES_NO_RECIPE)
    assert run_grpo(tiny).global_step == 2
    no_items = tmp_path / "no-items"
    load_from_disk(str(yes_no_data)).remove_columns("item_id").save_to_disk(str(no_items))
    with pytest.raises(InputError, match=rf"^{re.escape(str(no_items))}: field 'item_id': advantage_group: item"):
        alone = ("--advantage_group", "item", "--reward_funcs", "verdict-correct", "--reward_weights", "1.0")
        run_grpo(_argv(tiny_llama_dir, no_items, tmp_path / "b", *alone, recipe=YES_NO_RECIPE))
    aggregated = ("--advantage_group", "item", "--multi_objective_aggregation", "normalize_then_sum")
    with pytest.raises(ValueError, match="advantage_group: item takes the baseline of the summed rewards"):
        run_grpo(_argv(tiny_llama_dir, yes_no_data, tmp_path / "c", *aggregated, recipe=YES_NO_RECIPE))
    assert not any((tmp_path / name).exists() for name in ("b", "c"))


def test_the_cross_validation_counts_a_gain_of_exactly_the_target_as_met(monkeypatch):
    """benchmarks/judge_rl.py's summary: 36 of 60 right against a start of 27 of 60 is a gain of 0.15, which float
    subtraction puts a hair below 0.15; one question fewer is not met, and a collapsed saved model fails its target."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from judge_rl import cv_summary

    def run(fold: int, right: int, start: int, collapsed: bool = False) -> dict:
        return {
            "fold": fold,
            "rl_accuracy": right / 60,
            "start_accuracy": start / 60,
            "rl_gain": right / 60 - start / 60,
            "saved_model_collapsed": collapsed,
            "collapse_step": 40 if collapsed else None,
        }

    rm = {0: {"rm_accuracy": 0.6, "rm_blind_accuracy": 0.5}}
    met = cv_summary({"fold0-seed0": run(0, 36, 27), "fold0-seed1": run(0, 40, 27)}, rm)["targets"]
    assert met == {"no_collapse_in_saved_model": True, "gain_at_least_0.15_everywhere": True, "mean_at_least_rm": True}
    missed = cv_summary({"fold0-seed0": run(0, 35, 27), "fold0-seed1": run(0, 40, 27, collapsed=True)}, rm)["targets"]
    assert missed == {
        "no_collapse_in_saved_model": False,
        "gain_at_least_0.15_everywhere": False,
        "mean_at_least_rm": True,
    }


def test_the_cross_validation_keeps_a_judge_trained_whole_without_its_checkpoints(
    monkeypatch, tiny_llama_dir, yes_no_data, tmp_path
):
    """benchmarks/judge_rl.py copies a judge trained whole (its run folder) to its own folder without the run's
    checkpoints, and deletes those once the fold x seed's result is on disk: the same weights, none of the optimizer
    state that filled a disk when eight 135M runs each kept two copies of theirs."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from judge_rl import drop_checkpoints, train_judge

    from persetrain.train import grpo

    run, judge = tmp_path / "rl-run", tmp_path / "rl"
    argv = _argv(tiny_llama_dir, yes_no_data, run, "--use_peft", "false", "--validation_evaluator", "")
    argv += ["--save_strategy", "steps", "--save_steps", "1"]
    assert train_judge(grpo, argv, judge) > 0
    assert (run / "checkpoint-2" / "model.safetensors").is_file()
    assert not list(judge.glob("checkpoint-*"))
    assert _same_weights(_weights(judge), _weights(run))
    assert train_judge(grpo, argv, judge) == 0  # the judge on disk is read, not trained again
    drop_checkpoints(run)
    assert not list(run.glob("checkpoint-*")) and (run / METRICS_FILE).is_file()


def test_the_cross_validation_refuses_figures_judged_on_another_sample(monkeypatch, tmp_path):
    """benchmarks/judge_rl.py --folds reads a fold's start, reward model and RL judges from disk rather than judging
    them again, and compares them: judged on 60 questions, they sum up without training anything; a rerun asking
    for 300 is refused in one line naming the file, before it sets a 60-question accuracy beside a 300-question one,
    and so is a rerun of the same setting from another start (``{fold}`` read as the fold's number), before it sets
    gains over two starts side by side."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    from judge_rl import cross_validate, make_parser

    argv = ["--view", "yes-no", "--train", str(PREFEVAL_DEV), "--folds", "3", "--fold-ids", "0", "--seeds", "0"]
    args = make_parser().parse_args([*argv, "--name", "kept", "--max-eval", "60", "--out", str(tmp_path)])
    fold = tmp_path / "cv-fold0-of3"
    start = {"start_accuracy": 0.4, "start_blind_accuracy": 0.4, "max_eval": 60, "start": args.start}
    write_json(fold / "kept" / "start.json", start)
    write_json(fold / "rm.json", {"rm_accuracy": 0.7, "rm_blind_accuracy": 0.6, "max_eval": 60})
    kept = {"fold": 0, "rl_accuracy": 0.6, "start_accuracy": 0.4, "rl_gain": 0.2, "max_eval": 60, "start": args.start}
    kept.update(saved_model_collapsed=False, collapse_step=None)
    write_json(tmp_path / "cv" / "kept" / "fold0-seed0.json", kept)
    summary = cross_validate(args)
    assert summary["rm_accuracy"]["mean"] == 0.7 and summary["targets"]["mean_at_least_rm"] is False
    assert [path.name for path in (fold / "kept").iterdir()] == ["start.json"]  # nothing trained or judged
    (fold / "rm.json").unlink()  # --rl-only trains no reward model: the summary has none to compare with
    summary = cross_validate(
        make_parser().parse_args([*argv, "--name", "kept", "--max-eval", "60", "--rl-only", "--out", str(tmp_path)])
    )
    assert summary["rm_folds"] == [] and summary["targets"]["mean_at_least_rm"] is None
    assert sorted(path.name for path in fold.iterdir()) == ["data", "kept"]
    write_json(fold / "rm.json", {"rm_accuracy": 0.7, "rm_blind_accuracy": 0.6, "max_eval": 60})
    args.start = str(tmp_path / "verifier-fold{fold}")  # each fold its own start, under the same --name
    refused = f"{fold / 'kept' / 'start.json'} was trained or judged from --start {start['start']}, and this run asks "
    refused += f"for --start {tmp_path / 'verifier-fold0'}: pass the same --start, or another --name"
    with pytest.raises(SystemExit, match=re.escape(refused)):
        cross_validate(args)
    args.start, args.max_eval = start["start"], 300
    refused = f"{fold / 'kept' / 'start.json'} was judged with --max-eval 60, and this run asks for --max-eval 300"
    with pytest.raises(SystemExit, match=re.escape(refused)):
        cross_validate(args)
