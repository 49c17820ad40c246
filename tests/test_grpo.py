"""GRPO (``persetrain grpo``): the shared-prompt trainer's paths against TRL's, a PerSE-judge reward run, a killed
run's resume, and the recipe errors a user can hit, on a tiny LLaMA (the embedded model where a random one cannot
show a fault).

A PARL run's wiring (TRL calls the reward with the dataset's columns, the reward parts reach ``reward_parts.jsonl``
and the metrics) is checked where every shipped recipe runs, ``tests/test_recipes.py``; the reward math and the
batched judge are ``test_parl_reward.py``'s, the whole training path against TRL's ``test_trl_overrides.py``'s.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict, load_from_disk
from numerics import DTYPE, close, tensor_tolerance
from trl import GRPOTrainer

from data_prep.parl.prepare import prepare_parl
from data_prep.synthetic.parl import write_parl_sample
from persetrain.engine.hf import length_chunks
from persetrain.models import DEFAULT_MODEL
from persetrain.train.grpo import REWARD_PARTS_FILE, build_grpo_trainer, build_reward_funcs, make_parser, run_grpo
from persetrain.train.recipe import RecipeError
from persetrain.train.runner import METRICS_FILE

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def parl_news(tmp_path_factory) -> Path:
    """The sample data's news task as `persetrain prepare parl` writes it (headlines: the shortest texts)."""
    root = tmp_path_factory.mktemp("parl")
    write_parl_sample(root / "raw", seed=0)
    prepare_parl(root / "raw", root / "data", tasks=("news",))
    return root / "data" / "parl_news"


def _argv(model_dir: Path, data_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path",
        str(model_dir),
        "--reward_judge_model",
        str(model_dir),
        "--dataset_path",
        str(data_dir),
        "--output_dir",
        str(out),
        "--report_to",
        "none",
        "--logging_steps",
        "1",
        "--disable_tqdm",
        "true",
        "--activation_checkpointing",
        "false",
        "--save_strategy",
        "no",
        "--max_steps",
        "2",
        "--num_generations",
        "2",
        "--per_device_train_batch_size",
        "2",
        "--max_completion_length",
        "12",
        "--beta",
        "0.001",
        *extra,
    ]


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]


def test_precision_follows_the_hardware_not_trls_bf16_default():
    """TRL's GRPOConfig defaults to bf16, >10x slower than fp32 on a CPU without bf16 units; persetrain's follows
    the device. (A PARL run's reward parts and metrics are checked where every shipped recipe runs,
    ``tests/test_recipes.py``.)"""
    _, training, _, _ = make_parser().parse_args_and_config(["--output_dir", "unused"])
    assert training.bf16 is (torch.bfloat16 == DTYPE)


def test_each_prompt_computed_once_matches_trl_in_values_and_gradients(tiny_llama_dir, parl_news, tmp_path):
    """The shared-prompt log-prob pass against TRL's own pass over whole rows: two prompts of different lengths,
    left-padded to one width, five rollouts each (right-padded, interleaved, of 6, 4 and 2 tokens, so that each
    runs in its own length chunk from the same prompt states, then a copy of the 2-token one with other tokens in its
    padding and a copy of the 6-token one, which run once with their originals), log-probs, entropies and the
    gradient of every weight; the embedding's gradient reaches the prompt tokens only through the expanded states."""
    trainer = build_grpo_trainer(
        *make_parser().parse_args_and_config(
            _argv(tiny_llama_dir, parl_news, tmp_path / "run", "--reward_funcs", "parl-a")
        )
    )
    model, pad = trainer.model, trainer.processing_class.pad_token_id
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 200, (n,), generator=generator) for n in (9, 14)]
    width, n_completion = 14, 6
    ids, masks, completions = [], [], {}
    for rollout in range(5):
        for p, prompt in enumerate(prompts):
            length = (6, 4, 2, 2, 6)[rollout]
            completion = torch.randint(5, 200, (n_completion,), generator=generator)
            if rollout == 3:  # rollout 2's tokens, other padding
                completion[:length] = completions[p, 2][:length]
            if rollout == 4:
                completion = completions[p, 0]
            completions[p, rollout] = completion
            ids.append(torch.cat([torch.full((width - len(prompt),), pad), prompt, completion]))
            masks.append(
                torch.cat(
                    [
                        torch.zeros(width - len(prompt)),
                        torch.ones(len(prompt) + length),
                        torch.zeros(n_completion - length),
                    ]
                ).long()
            )
    input_ids, attention_mask = torch.stack(ids).to(model.device), torch.stack(masks).to(model.device)
    scored = attention_mask[:, -n_completion:].bool()

    def run(method):
        model.zero_grad()
        logps, entropies, _ = method(model, input_ids, attention_mask, n_completion, compute_entropy=True)
        (logps * scored).sum().backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return logps.detach(), entropies.detach(), grads

    rows_run = []
    shared_prompt_logps = trainer._shared_prompt_logps
    trainer._shared_prompt_logps = lambda *a: rows_run.append(a[3].size(0)) or shared_prompt_logps(*a)
    ours = run(trainer._get_per_token_logps_and_entropies)
    theirs = run(lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k))
    assert rows_run == [1, 1, 1, 1, 1, 1]  # 3 distinct completions a prompt, each in its own length chunk
    assert torch.allclose(ours[0][scored], theirs[0][scored], **tensor_tolerance(1e-5))
    assert torch.allclose(ours[1][scored], theirs[1][scored], **tensor_tolerance(1e-5))
    assert ours[2].keys() == theirs[2].keys() and len(ours[2]) > 0
    for name, grad in theirs[2].items():
        assert torch.allclose(ours[2][name], grad, **tensor_tolerance(1e-5, 1e-4)), name


def test_rollouts_run_in_chunks_of_similar_length():
    """Three 45-token rollouts and one that ran to the 192-token limit: two chunks, not one padded to 192."""
    assert length_chunks([0, 1, 2, 3], [45, 192, 44, 46], 4) == [[2, 0, 3], [1]]
    assert length_chunks([0, 1, 2, 3], [45, 192, 44, 46], 2) == [[2, 0], [3], [1]]
    assert length_chunks([0, 1], [40, 44], 4) == [[0, 1]]  # 8 padding tokens of 84: within 10%


def test_each_prompt_prefilled_once_generates_trl_greedy_rollouts(tiny_llama_dir, parl_news, tmp_path):
    """Rollouts continued from one prefill per prompt against TRL's rollouts over left-padded copies, greedy:
    two prompts of different lengths, three rollouts each, interleaved, cut after the end-of-sequence token."""
    trainer = build_grpo_trainer(
        *make_parser().parse_args_and_config(
            _argv(tiny_llama_dir, parl_news, tmp_path / "run", "--reward_funcs", "parl-a")
        )
    )
    trainer.generation_config.do_sample = False
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 200, (n,), generator=generator).tolist() for n in (9, 14)]
    prompt_ids = [prompts[k % 2] for k in range(6)]
    ours, _ = trainer._generate_single_turn(prompt_ids, None, {}, 3)
    theirs, _ = GRPOTrainer._generate_single_turn(trainer, prompt_ids, None, {}, 3)
    assert ours == theirs
    assert len({tuple(c) for c in ours}) == 2 and all(ours)  # greedy: one rollout per prompt, and they differ


@pytest.mark.slow
@pytest.mark.usefixtures("fp32_compute")
def test_rollouts_of_several_users_decode_as_one_batch_as_trl_does(parl_news, tmp_path):
    """The embedded model, greedy: four users' PARL prompts cut to different lengths (so that the batch holds
    caches left-padded by up to 150 positions), two rollouts each, against TRL's rollouts. A row read at the
    wrong position or through another row's padding changes the real model's next token."""
    trainer = build_grpo_trainer(
        *make_parser().parse_args_and_config(
            _argv(DEFAULT_MODEL, parl_news, tmp_path / "run", "--reward_funcs", "parl-a")
        )
    )
    trainer.generation_config.do_sample = False
    tokenizer = trainer.processing_class
    texts = [row["prompt"][-1]["content"] for row in load_from_disk(str(parl_news))["train"].select(range(4))]
    prompts = [tokenizer(text)["input_ids"][:n] for text, n in zip(texts, (40, 190, 90, 140), strict=True)]
    prompt_ids = [prompts[k % 4] for k in range(8)]
    ours, _ = trainer._generate_single_turn(prompt_ids, None, {}, 2)
    theirs, _ = GRPOTrainer._generate_single_turn(trainer, prompt_ids, None, {}, 2)
    assert ours == theirs
    assert len({tuple(c) for c in ours}) == 4  # one greedy rollout per user, and the users' differ


@pytest.mark.slow
def test_rollouts_leave_the_batch_at_their_end_and_continue_from_their_own_states(parl_news, tmp_path):
    """Sampled rollouts of one prompt (the embedded model, top-k 2) where some end mid-way, so that the batch
    shrinks after the rollouts have diverged. The end-of-sequence token is one that a first run (same seed, no
    reachable end) drew at step k >= 2 and no rollout drew before: the second run draws the same tokens up to
    step k, then some rollouts end there while the others go on. Each rollout ends at its first
    end-of-sequence token or at the limit, and each of its tokens is one of the two that a plain forward pass
    of the prompt and that rollout's own earlier tokens ranks highest: a rollout continued from another row's
    states would leave that set (the tiny random model ranks nearly the same two tokens after any history, so
    it would not show that; the embedded model does)."""
    trainer = build_grpo_trainer(
        *make_parser().parse_args_and_config(
            _argv(
                DEFAULT_MODEL,
                parl_news,
                tmp_path / "run",
                "--reward_funcs",
                "parl-a",
                "--top_k",
                "2",
                "--temperature",
                "1.0",
                "--top_p",
                "1.0",
            )
        )
    )
    model = trainer.accelerator.unwrap_model(trainer.model)
    prompt = torch.randint(5, 200, (11,), generator=torch.Generator().manual_seed(0)).tolist()

    def sample() -> list[list[int]]:
        torch.manual_seed(3)
        return trainer._generate_single_turn([prompt] * 6, None, {}, 6)[0]

    trainer.eos_token_ids = [len(trainer.processing_class) - 1]  # a token the rollouts do not draw
    free = sample()
    step, end = next(
        (k, r[k]) for k in range(2, len(free[0])) for r in free if all(r[k] not in other[:k] for other in free)
    )
    trainer.eos_token_ids = [end]
    rollouts = sample()
    limit = trainer.generation_config.max_new_tokens
    assert [r[:step] for r in rollouts] == [r[:step] for r in free]  # same draws until the first end
    assert sum(len(r) == step + 1 for r in rollouts) in range(1, 6)  # some end at step k, others go on
    assert len({tuple(r[:step]) for r in rollouts}) > 1  # ...after the rollouts diverged
    for rollout in rollouts:
        ends = [k for k, token in enumerate(rollout) if token == end]
        assert ends == [len(rollout) - 1] or (not ends and len(rollout) == limit)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + rollout], device=model.device)).logits[
                0, len(prompt) - 1 : -1
            ]
        allowed = logits.topk(2).indices
        assert all(token in allowed[k].tolist() for k, token in enumerate(rollout))


@pytest.mark.slow
def test_grpo_with_perse_judge_reward(tiny_llama_dir, tmp_path):
    """A generator trained against a PerSE judge: the reward is the judge's expected 1-10 score."""
    profile = [
        {
            "plot_id": f"p{j}",
            "plot": f"A quiet story number {j} about a lighthouse keeper.",
            "review": "Slow but moving.",
            "score": 3 + j,
        }
        for j in range(2)
    ]
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Write a short plot the reviewer r{i} would love."}],
            "id": f"q{i}",
            "reviewer_id": f"r{i}",
            "profile": profile,
            "score_max": 10,
        }
        for i in range(4)
    ]
    data = tmp_path / "perse"
    DatasetDict(train=Dataset.from_list(rows)).save_to_disk(str(data))
    out = tmp_path / "run"
    result = run_grpo(_argv(tiny_llama_dir, data, out, "--reward_funcs", "perse"))
    assert result.global_step == 2
    steps = [r for r in _log(out) if r["event"] == "log" and "loss" in r]
    assert all(1.0 <= r["rewards/perse_expected_score/mean"] <= 10.0 for r in steps)


def test_rewards_build_from_the_registry_and_the_reward_judge_only_when_one_scores_with_it(tmp_path):
    """A verdict reward and a dotted path build without the reward judge (here an openai one with no server URL, which
    cannot be built); a PARL reward needs it, and a dotted path that does not import is one line."""
    from test_trl_overrides import alternating_reward

    from persetrain.rewards.verdict import VERDICT_REWARDS

    def rewards(*names: str):
        argv = ["--output_dir", str(tmp_path), "--reward_judge_backend", "openai", "--reward_funcs", *names]
        _, training, _, reward_args = make_parser().parse_args_and_config(argv)
        return build_reward_funcs(reward_args, training)

    assert rewards("verdict-correct", "test_trl_overrides.alternating_reward") == [
        VERDICT_REWARDS["verdict-correct"],
        alternating_reward,
    ]
    with pytest.raises(RecipeError, match="^reward_judge_base_url is required with reward_judge_backend: openai$"):
        rewards("verdict-correct", "parl-b")
    with pytest.raises(RecipeError, match=r"^reward_funcs: cannot import 'nowhere\.reward' \(No module named"):
        rewards("nowhere.reward")


def test_num_generations_must_divide_the_generation_batch(tmp_path):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("num_generations: 3\nper_device_train_batch_size: 4\noutput_dir: runs/x\n")
    with pytest.raises(RecipeError) as err:
        make_parser().parse_args_and_config(["--config", str(recipe)])
    message = str(err.value)
    assert str(recipe) in message and "num_generations (3)" in message and "per_device_train_batch_size 4" in message


def test_structured_output_during_rollouts_is_refused():
    with pytest.raises(RecipeError, match="vllm_structured_outputs_regex"):
        make_parser().parse_args_and_config(["--vllm_structured_outputs_regex", r"\[.*\]", "--output_dir", "x"])


@pytest.mark.parametrize("recipe", sorted((REPO / "recipes" / "parl").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_recipes_parse(recipe):
    """Every recipe's keys are known and its batch holds whole groups (on the 8 processes it names)."""
    parser = make_parser()
    _, _, model, rewards = parser.parse_args_and_config(
        ["--config", str(recipe), "--bf16", "false", "--use_vllm", "false"]
    )
    assert parser.accelerate_config and (REPO / parser.accelerate_config).is_file()
    assert rewards.reward_funcs and model.model_name_or_path


@pytest.mark.slow
def test_a_killed_run_resumes_with_every_step_logged_once(tiny_llama_dir, parl_news, tmp_path):
    """SIGKILL after checkpoint-2, in step 3 or later; the same command again resumes and trims both logs.

    The resumed steps also compute what an uninterrupted run computes: the checkpoint restores the weights,
    optimizer and RNG states, so the reward parts and losses of every step match a run never killed.
    """
    import os
    import signal
    import subprocess
    import sys
    import time

    def argv(out: Path) -> list[str]:
        args = _argv(tiny_llama_dir, parl_news, out, "--reward_funcs", "parl-a", "--max_train_samples", "4")
        args[args.index("--save_strategy") + 1] = "steps"
        args[args.index("--max_steps") + 1] = "6"
        return [sys.executable, "-m", "persetrain.train.grpo", *args, "--save_steps", "2", "--seed", "3"]

    def parts(out: Path) -> list[dict]:
        return [json.loads(line) for line in (out / REWARD_PARTS_FILE).read_text().splitlines() if line.strip()]

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    killed = tmp_path / "killed"
    proc = subprocess.Popen(argv(killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if (
            (killed / "checkpoint-2" / "trainer_state.json").is_file()
            and (killed / REWARD_PARTS_FILE).is_file()
            and any(p["step"] >= 3 for p in parts(killed))
        ):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert subprocess.run(argv(killed), env=env, capture_output=True).returncode == 0
    whole = tmp_path / "whole"
    assert subprocess.run(argv(whole), env=env, capture_output=True).returncode == 0

    rows = parts(killed)
    assert [(p["step"], p["rollout"]) for p in rows] == [(s, r) for s in range(1, 7) for r in range(2)]
    assert [{k: v for k, v in p.items() if k != "seconds"} for p in rows] == [
        {k: v for k, v in p.items() if k != "seconds"} for p in parts(whole)
    ]
    logged = [r for r in _log(killed) if r["event"] == "log" and "loss" in r]
    assert [r["step"] for r in logged] == [1, 2, 3, 4, 5, 6]
    expected = [r["loss"] for r in _log(whole) if r["event"] == "log" and "loss" in r]
    assert [r["loss"] for r in logged] == close(expected, abs=1e-6)


def test_a_trl_whose_private_methods_changed_trains_with_the_stock_trainer():
    """The signature guard: the installed TRL passes; a TRL-like class with another shape falls back, warned."""
    from persetrain.train.grpo_trainer import GRPO_TRAINER, SharedPromptGRPOTrainer
    from persetrain.train.trl_compat import pick_trainer, signature_mismatches

    assert signature_mismatches(GRPOTrainer) == [] and GRPO_TRAINER is SharedPromptGRPOTrainer

    class OtherTRL(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, images, num_generations):  # an older shape
            raise AssertionError("never called")

    with pytest.warns(UserWarning) as warned:
        chosen = pick_trainer(SharedPromptGRPOTrainer, OtherTRL, "9.9")
    assert chosen is OtherTRL and len(warned) == 1
    message = str(warned[0].message)
    assert "\n" not in message and message.startswith("TRL 9.9: OtherTRL._generate_single_turn: expected (self, ")
    assert "found (self, prompt_ids, images, num_generations)" in message
