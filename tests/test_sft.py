"""SFT: recipes, the completion-only loss, the JSONL log, resumption and LoRA, on a tiny LLaMA.

The real embedded model is trained end to end by the demo; here every run takes seconds.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset, DatasetDict
from numerics import close
from transformers import TrainerCallback
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.hub.checkpoint import checkpoint_kind
from persetrain.io import InputError
from persetrain.models import ModelSpecError, load_model, resolve
from persetrain.train.recipe import RecipeError
from persetrain.train.runner import MERGED_DIR, METRICS_FILE, RESOLVED_CONFIG_FILE
from persetrain.train.sft import CompletionOnlySFTTrainer, build_sft_trainer, main, make_parser, run_sft

PLOTS = [
    "a war story in a frozen city",
    "a love story on a ship",
    "a ghost story in an old house",
    "a comedy about two rival bakers",
    "a heist in a desert town",
    "a mystery at a mountain inn",
]


def _row(i: int) -> dict:
    plot = PLOTS[i % len(PLOTS)]
    score = 2 + (i * 3) % 8
    return {
        "prompt": [
            {"role": "system", "content": "You are a personalized story judge."},
            {"role": "user", "content": f"Profile: the reviewer liked war films. Query plot {i}: {plot}."},
        ],
        "completion": [{"role": "assistant", "content": f"[Review] It is {plot.split()[1]}. [Score] {score}"}],
        "score": score,  # builders keep typed fields next to the chat columns; SFT must ignore them
    }


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sft-data") / "per-mpst-k3"
    DatasetDict(
        train=Dataset.from_list([_row(i) for i in range(12)]), test=Dataset.from_list([_row(i) for i in range(12, 16)])
    ).save_to_disk(str(path))
    return path


def _argv(model_dir: Path, data_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path",
        str(model_dir),
        "--dataset_path",
        str(data_dir),
        "--output_dir",
        str(out),
        "--report_to",
        "none",
        "--activation_checkpointing",
        "false",
        "--logging_steps",
        "1",
        "--per_device_train_batch_size",
        "4",
        "--max_length",
        "256",
        "--disable_tqdm",
        "true",
        "--save_strategy",
        "no",
        *extra,
    ]


def _log(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / METRICS_FILE).read_text().splitlines()]


# ---------------------------------------------------------------------------------------------- recipes


def test_recipe_values_and_command_line_override(tmp_path, monkeypatch):
    monkeypatch.delenv("PERSETRAIN_TEST_ENV", raising=False)
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "model_name_or_path: embedded:smollm2-135m-instruct\n"
        "dataset_path: runs/demo/data/per_mpst_k3\n"
        "learning_rate: 1.0e-4\n"
        "num_train_epochs: 3\n"
        "use_peft: true\n"
        "lora_r: 8\n"
        "lora_target_modules: [q_proj, v_proj]\n"
        "packing: true\n"
        "output_dir: runs/x\n"
        "env:\n  PERSETRAIN_TEST_ENV: from-recipe\n"
    )
    script, training, model = make_parser().parse_args_and_config(
        ["--config", str(recipe), "--learning_rate", "2e-5", "--lora_r", "4"]
    )
    assert training.learning_rate == 2e-5  # the command line wins over the recipe
    assert model.lora_r == 4
    assert training.num_train_epochs == 3  # the recipe wins over the defaults
    assert model.use_peft and model.lora_target_modules == ["q_proj", "v_proj"]
    assert training.packing is True
    assert model.model_name_or_path == "embedded:smollm2-135m-instruct"
    assert script.dataset_path == "runs/demo/data/per_mpst_k3"
    assert os.environ["PERSETRAIN_TEST_ENV"] == "from-recipe"
    # Precision follows the hardware, not TRL's bf16=True default (this suite runs on a CPU).
    if not torch.cuda.is_available():
        assert training.bf16 is False and training.fp16 is False and model.dtype == "auto"


def test_defaults_are_persetrain_not_trl(tmp_path):
    script, training, model = make_parser().parse_args_and_config(["--output_dir", str(tmp_path)])
    assert model.lora_target_modules == "all-linear"  # TRL's ModelConfig turns a one-item list into the item
    assert model.attn_implementation == "sdpa" and training.auto_resume and training.completion_logits_only
    assert training.dataloader_pin_memory is torch.cuda.is_available()


def test_unknown_recipe_key_names_file_and_key(tmp_path):
    recipe = tmp_path / "typo.yaml"
    recipe.write_text("learning_rate: 1.0e-4\nlearnig_rate: 2.0e-4\n")
    with pytest.raises(RecipeError) as err:
        make_parser().parse_args_and_config(["--config", str(recipe)])
    message = str(err.value)
    assert str(recipe) in message and "'learnig_rate'" in message and "learning_rate" in message


def test_unknown_command_line_flag_is_an_error(tmp_path):
    with pytest.raises(RecipeError, match="--no_such_flag"):
        make_parser().parse_args_and_config(["--output_dir", str(tmp_path), "--no_such_flag", "1"])


# -------------------------------------------------------------------------------------- loss and labels


def _trainer(model_dir: Path, data_dir: Path, out: Path, *extra: str) -> CompletionOnlySFTTrainer:
    return build_sft_trainer(*make_parser().parse_args_and_config(_argv(model_dir, data_dir, out, *extra)))


def test_only_completion_tokens_carry_loss(tiny_llama_dir, dataset_dir, tmp_path, embedded_tokenizer):
    trainer = _trainer(tiny_llama_dir, dataset_dir, tmp_path / "out")  # padded batches
    batch = next(iter(trainer.get_train_dataloader()))
    for i in range(batch["input_ids"].size(0)):
        ids, labels = batch["input_ids"][i], batch["labels"][i]
        labelled = labels != -100
        assert torch.equal(labels[labelled], ids[labelled])
        # The labelled tokens are one contiguous tail: the assistant's answer and its end-of-turn.
        positions = labelled.nonzero().flatten()
        assert torch.equal(positions, torch.arange(int(positions[0]), int(positions[-1]) + 1, device=positions.device))
        text = embedded_tokenizer.decode(ids[labelled])
        assert text.startswith("[Review] It is") and "[Score]" in text and text.rstrip().endswith("<|im_end|>")
        prompt = embedded_tokenizer.decode(ids[: int(positions[0])])
        assert "Profile:" in prompt and "[Review]" not in prompt and prompt.endswith("assistant\n")


@pytest.mark.parametrize("packing", [False, True], ids=["padded", "packed"])
def test_sliced_loss_equals_full_logits_loss(tiny_llama_dir, dataset_dir, tmp_path, packing):
    trainer = _trainer(tiny_llama_dir, dataset_dir, tmp_path / "out", "--packing", str(packing).lower())
    model = trainer.model
    model.train(False)  # no dropout; the loss code is the same in both modes
    inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    n_items = (inputs["labels"][:, 1:] != -100).sum()

    fast = trainer.compute_loss(model, dict(inputs), num_items_in_batch=n_items)
    logits = model(**{k: v for k, v in inputs.items() if k != "labels"}, use_cache=False).logits
    reference = (
        F.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(), inputs["labels"][:, 1:].flatten(), ignore_index=-100, reduction="sum"
        )
        / n_items
    )
    trainer.completion_logits_only = False
    trl_loss = trainer.compute_loss(model, dict(inputs), num_items_in_batch=n_items)
    assert fast.item() == close(reference.item(), abs=1e-5)
    assert fast.item() == close(trl_loss.item(), abs=1e-5)
    if packing:
        assert "position_ids" in inputs and inputs["input_ids"].size(0) == 1


# ---------------------------------------------------------------------------------------- whole runs


@pytest.mark.slow
def test_sft_learns_logs_and_saves_a_loadable_model(tiny_llama_dir, dataset_dir, tmp_path):
    out = tmp_path / "run"
    result = run_sft(
        _argv(
            tiny_llama_dir,
            dataset_dir,
            out,
            "--max_steps",
            "8",
            "--learning_rate",
            "1e-2",
            "--packing",
            "true",
            "--attn_implementation",
            "sdpa",
        )
    )
    assert result.global_step == 8 and result.model_dir == out
    losses = [r["loss"] for r in _log(out) if r["event"] == "log" and "loss" in r]
    assert len(losses) == 8
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 1.0  # nats
    records = _log(out)
    assert records[0]["event"] == "train_begin" and records[0]["step"] == 0
    assert all("num_tokens" in r and "mean_token_accuracy" in r for r in records if "loss" in r)

    config = json.loads((out / RESOLVED_CONFIG_FILE).read_text())
    assert config["training"]["learning_rate"] == 1e-2 and config["model"]["attn_implementation"] == "sdpa"
    assert config["environment"]["model_dtype"] in {"float32", "bfloat16"}
    model, tokenizer = load_model(str(out), device="cpu")
    assert model.config.num_hidden_layers == 2 and tokenizer.eos_token == "<|im_end|>"


@pytest.mark.slow
def test_interrupted_run_resumes_from_latest_checkpoint(tiny_llama_dir, dataset_dir, tmp_path):
    out = tmp_path / "run"
    common = ["--save_strategy", "steps", "--save_steps", "2", "--learning_rate", "1e-3"]
    first = run_sft(_argv(tiny_llama_dir, dataset_dir, out, *common, "--max_steps", "2"))
    assert first.resumed_from is None and (out / "checkpoint-2").is_dir()

    # The same command with a longer schedule, as after a preemption: it picks up checkpoint-2.
    second = run_sft(_argv(tiny_llama_dir, dataset_dir, out, *common, "--max_steps", "4"))
    assert second.resumed_from is not None and Path(second.resumed_from).name == "checkpoint-2"
    assert second.global_step == 4
    begins = [r for r in _log(out) if r["event"] == "train_begin"]
    assert [b["step"] for b in begins] == [0, 2]
    steps_logged = [r["step"] for r in _log(out) if r["event"] == "log" and "loss" in r]
    assert steps_logged == [1, 2, 3, 4]  # appended, not overwritten, and nothing retrained


@pytest.mark.slow
def test_a_run_directory_is_a_model_only_once_its_final_save_is_done(tiny_llama_dir, dataset_dir, tmp_path):
    """The final save writes the model into the run directory in place. A rerun (to resume or extend the run) makes
    the directory unfinished until its own final save is done: a run stopped before it is refused by name, by
    every command that would load or push it, while its checkpoints still load."""
    out = tmp_path / "run"
    argv = ["--save_strategy", "steps", "--save_steps", "2", "--learning_rate", "1e-3"]
    run_sft(_argv(tiny_llama_dir, dataset_dir, out, *argv, "--max_steps", "2"))
    assert resolve(str(out)).kind == "local" and checkpoint_kind(out) == "full"

    class Stopped(Exception):
        pass

    class StopBeforeTheFinalSave(TrainerCallback):
        def on_train_end(self, args, state, control, **kwargs):
            raise Stopped

    longer = _argv(tiny_llama_dir, dataset_dir, out, *argv, "--max_steps", "4")
    with pytest.raises(Stopped):
        main(*make_parser().parse_args_and_config(longer), callbacks=[StopBeforeTheFinalSave()])
    unfinished = "a training run that has not finished (no complete trainer_state.json, which its final save writes"
    with pytest.raises(ModelSpecError, match=f"^{re.escape(f'{out}: {unfinished}')}"):
        resolve(str(out))
    with pytest.raises(InputError, match=f"^{re.escape(f'{out}: {unfinished}')}"):
        checkpoint_kind(out)
    requests = tmp_path / "in.jsonl"
    requests.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    result = CliRunner().invoke(
        app, ["-q", "generate", "-i", str(requests), "-o", str(tmp_path / "o.jsonl"), "--model", str(out)]
    )
    assert result.exit_code == 2 and result.output.strip().startswith(f"error: {out}: {unfinished}"), result.output
    assert resolve(str(out / "checkpoint-4")).kind == "local"

    assert run_sft(longer).resumed_from == str(out / "checkpoint-4")  # the same command finishes it
    assert resolve(str(out)).kind == "local" and checkpoint_kind(out) == "full"


@pytest.mark.slow
def test_lora_saves_an_adapter_and_a_merged_model(tiny_llama_dir, dataset_dir, tmp_path):
    out = tmp_path / "lora"
    result = run_sft(
        _argv(
            tiny_llama_dir,
            dataset_dir,
            out,
            "--max_steps",
            "2",
            "--use_peft",
            "true",
            "--lora_r",
            "4",
            "--lora_alpha",
            "8",
            "--learning_rate",
            "1e-3",
        )
    )
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
    assert result.model_dir == out / MERGED_DIR
    model, _ = load_model(str(result.model_dir), device="cpu")
    assert not any("lora" in name for name, _ in model.named_parameters())
