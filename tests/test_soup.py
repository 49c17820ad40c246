"""``persetrain models soup``: judges trained from one start averaged into one judge that every reader loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.models import DEFAULT_MODEL, local_weights_dir
from persetrain.soup import SOUP_CARD, make_soup, read_weights

runner = CliRunner()


def test_a_soup_is_the_mean_of_its_judges_with_the_first_ones_config_and_tokenizer(
    tiny_llama_dir, moved_judge, tmp_path
):
    """Every tensor is the mean of the judges' in their dtype; the folder loads as a model and a tokenizer, names
    its judges, and holds no training state of theirs; a rerun replaces it whole."""
    (moved_judge / "trainer_state.json").write_text("{}")
    out = tmp_path / "soup"
    for _ in range(2):
        result = runner.invoke(
            app, ["--quiet", "models", "soup", str(moved_judge), str(tiny_llama_dir), "--out", str(out)]
        )
        assert result.exit_code == 0, result.output
    start, judge, soup = read_weights(tiny_llama_dir), read_weights(moved_judge), read_weights(out)
    assert soup.keys() == judge.keys()
    assert all(torch.allclose(soup[k], (start[k] + judge[k]) / 2) and soup[k].dtype == judge[k].dtype for k in judge)
    assert any(not torch.equal(soup[k], judge[k]) for k in judge)
    assert json.loads((out / SOUP_CARD).read_text())["judges"] == [str(moved_judge), str(tiny_llama_dir)]
    assert not (out / "trainer_state.json").exists() and not list(tmp_path.glob(".soup.*"))
    model = AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(model.state_dict()["model.embed_tokens.weight"], soup["model.embed_tokens.weight"])
    assert AutoTokenizer.from_pretrained(out).chat_template == AutoTokenizer.from_pretrained(moved_judge).chat_template


def test_the_embedded_model_souped_with_itself_is_itself(tmp_path, embedded_tokenizer):
    """On the real embedded model: the mean of a judge with itself gives its weights and its logits exactly."""
    weights_dir = Path(local_weights_dir(DEFAULT_MODEL))
    out = make_soup([weights_dir, weights_dir], tmp_path / "soup")
    original, souped = read_weights(weights_dir), read_weights(out)
    assert souped.keys() == original.keys() and all(torch.equal(souped[k], original[k]) for k in original)
    prompt = embedded_tokenizer.apply_chat_template(
        [{"role": "user", "content": "Would this user like a quiet hotel? Answer yes or no."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        logits = [AutoModelForCausalLM.from_pretrained(m)(**prompt).logits for m in (weights_dir, out)]
    assert torch.equal(logits[0], logits[1])


def _other_shapes(tmp_path: Path, tiny_llama_dir: Path) -> Path:
    """The tiny model's architecture at half its width: the same tensor names, other shapes."""
    config = LlamaConfig.from_pretrained(tiny_llama_dir)
    config.hidden_size, config.intermediate_size = 32, 64
    folder = tmp_path / "narrow"
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_judges_that_cannot_be_averaged_are_refused_in_one_line(tiny_llama_dir, moved_judge, tmp_path):
    """A lone judge, an --out that is a judge, an adapter, a folder with no weights, an unfinished run, a judge of
    other shapes or other tensors: exit 2, one line naming the folder, and no soup written."""
    out = tmp_path / "soup"
    fewer = tmp_path / "fewer"
    shutil.copytree(moved_judge, fewer)
    weights = read_weights(moved_judge)
    save_file(dict(list(weights.items())[1:]), str(fewer / "model.safetensors"), metadata={"format": "pt"})
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    empty = tmp_path / "empty"
    empty.mkdir()
    unfinished = tmp_path / "unfinished"  # a run killed in its final save: its trainer state is written last
    shutil.copytree(moved_judge, unfinished)
    (unfinished / "resolved_config.json").write_text("{}")
    first_name = sorted(weights)[0]
    cases = [
        ([moved_judge], f"{moved_judge}: a soup needs at least two judges to average"),
        ([moved_judge, tiny_llama_dir, "--out", moved_judge], f"{moved_judge}: the soup would replace {moved_judge}"),
        ([moved_judge, adapter], f"{adapter}: a PEFT adapter, whose start is not beside it"),
        ([moved_judge, empty], f"{empty}: no .safetensors weights"),
        ([moved_judge, unfinished], f"{unfinished}: a training run that has not finished"),
        ([moved_judge, tmp_path / "nowhere"], f"{tmp_path / 'nowhere'}: no such model folder"),
        ([moved_judge, fewer], f"{fewer}: its tensors are not {moved_judge}'s: 1 in one only, the first {first_name}"),
        (
            [moved_judge, _other_shapes(tmp_path, tiny_llama_dir)],
            f"{tmp_path / 'narrow'}: tensor model.embed_tokens.weight has shape ",
        ),
    ]
    for args, message in cases:
        argv = [str(a) for a in args] + ([] if "--out" in args else ["--out", str(out)])
        result = runner.invoke(app, ["--quiet", "models", "soup", *argv])
        assert result.exit_code == 2, result.output
        assert result.output.startswith(f"error: {message}") and result.output.count("\n") == 1, result.output
        assert not out.exists()
    assert read_weights(moved_judge).keys() == weights.keys()  # the judge --out named is untouched


def test_bf16_judges_are_averaged_in_float32_and_stay_bf16(tmp_path, tiny_llama_dir):
    """A mean of three summed in bf16 would round at each step; the soup is the float32 mean, rounded once."""
    torch.manual_seed(0)
    judges, saved = [], []
    for i in range(3):
        folder = tmp_path / f"j{i}"
        shutil.copytree(tiny_llama_dir, folder)
        weights = {k: torch.randn_like(v).to(torch.bfloat16) for k, v in read_weights(tiny_llama_dir).items()}
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
        judges.append(folder)
        saved.append(weights)
    soup = read_weights(make_soup(judges, tmp_path / "soup"))
    for name, tensor in soup.items():
        expected = (sum(judge[name].float() for judge in saved) / 3).to(torch.bfloat16)
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, expected)
    name = "model.embed_tokens.weight"
    assert not torch.equal(soup[name], sum(judge[name] for judge in saved) / 3)  # what bf16 arithmetic would give
