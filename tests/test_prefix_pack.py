"""The shared-prefix packer: the prefix trie, the packed loss and gradients equal to per-row SFT's, and a sliding
window applied by position wherever a packed row's mask replaces the model's own (the SFT trie, a reward model's
shared context; the engine's packed tails are checked in ``tests/test_engine.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from datasets import Dataset, DatasetDict
from numerics import close, tensor_tolerance

from persetrain.prefix_pack import PrefixGroupedSampler, attention_mask, prefix_trie
from persetrain.reward_model.batches import ListwiseCollator, option_rewards
from persetrain.train.sft import build_sft_trainer, make_parser

TEXTS = ["Wow: Brentaville unveils engine!", "did marton open a clinic?", "Zorenford school opens gym (4)"]
RULES = ["The headline ends with '!'.", "A colon appears in the headline.", "The headline contains a digit."]


def _row(text: str, rule: str) -> dict:
    satisfied = (
        ("!" in rule and text.endswith("!"))
        or ("colon" in rule and ":" in text)
        or ("digit" in rule and any(c.isdigit() for c in text))
    )
    return {
        "prompt": [
            {"role": "system", "content": "Judge whether the headline satisfies the rule. Answer yes or no."},
            {"role": "user", "content": f"<Headline>\n{text}\n</Headline>\n<Rule>\n{rule}\n</Rule>"},
        ],
        "completion": [{"role": "assistant", "content": "yes" if satisfied else "no"}],
    }


@pytest.fixture(scope="module")
def checks_dir(tmp_path_factory) -> Path:
    rows = [_row(text, rule) for text in TEXTS for rule in RULES]
    path = tmp_path_factory.mktemp("checks") / "verifier"
    DatasetDict(train=Dataset.from_list(rows), validation=Dataset.from_list(rows[:3])).save_to_disk(str(path))
    return path


def _trainer(model_dir: Path, data_dir: Path, out: Path, *extra: str):
    argv = [
        *("--model_name_or_path", str(model_dir), "--dataset_path", str(data_dir), "--output_dir", str(out)),
        *("--report_to", "none", "--per_device_train_batch_size", "9", "--max_length", "256"),
        *("--disable_tqdm", "true", "--save_strategy", "no", "--logging_steps", "1", *extra),
    ]
    return build_sft_trainer(*make_parser().parse_args_and_config(argv))


def test_trie_holds_each_shared_token_once_and_labels_every_row():
    no = [-100] * 4
    rows = [([1, 2, 3, 7, 8], [*no, 8]), ([1, 2, 3, 9, 8], [*no, 8]), ([1, 2, 3, 7, 8], [*no, 8])]
    batch = prefix_trie(rows)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 7, 8, 9, 8]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4, 3, 4]]
    # Three rows, one completion token each: the repeated row is predicted again from the same position.
    assert batch["label_positions"].tolist() == [3, 5, 3] and batch["labels"].tolist() == [[8, 8, 8]]
    mask = batch["tree_mask"][0, 0]
    assert mask[6].tolist() == [True, True, True, False, False, True, True]  # 9's branch never sees 7
    assert mask[4].tolist() == [True, True, True, True, True, False, False]


def test_sampler_batches_rows_that_share_a_head():
    ids = [[5, 1, 2], [3, 1], [5, 1, 9], [3, 2], [6, 0]]
    sampler = PrefixGroupedSampler(ids, batch_size=2, seed=0)
    assert sorted(map(sorted, sampler.batches)) == [[0, 2], [1, 3], [4]]
    assert sorted(sampler) == list(range(5)) and len(sampler) == 5
    orders = set()
    for epoch in range(8):
        sampler.set_epoch(epoch)
        orders.add(tuple(sampler))
    assert len(orders) > 1  # the batches' order changes from epoch to epoch


def test_packed_loss_and_gradients_equal_per_row_sft(tiny_llama_dir, checks_dir, tmp_path):
    packed = _trainer(tiny_llama_dir, checks_dir, tmp_path / "packed", "--shared_prefix_packing", "true")
    padded = _trainer(tiny_llama_dir, checks_dir, tmp_path / "padded")
    rows = [packed.train_dataset[i] for i in range(len(packed.train_dataset))]
    results = []
    for trainer in (packed, padded):
        model = trainer.model
        model.train(False)
        model.zero_grad()
        inputs = trainer._prepare_inputs(trainer.data_collator(rows))
        n_items = trainer._get_num_items_in_batch([inputs], inputs["input_ids"].device)
        loss = trainer.compute_loss(model, dict(inputs), num_items_in_batch=n_items)
        loss.backward()
        grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        results.append((inputs, int(n_items), loss.item(), grads))
    (
        (packed_inputs, packed_items, packed_loss, packed_grads),
        (padded_inputs, padded_items, padded_loss, padded_grads),
    ) = results
    assert packed_items == padded_items == 9 * 3  # "yes"/"no", "<|im_end|>" and its newline, per row
    # The shared system prompt and each headline are computed once, not once per rule.
    assert packed_inputs["input_ids"].size(1) < 0.5 * padded_inputs["attention_mask"].sum()
    assert packed_loss == close(padded_loss, abs=1e-5)
    assert packed_grads.keys() == padded_grads.keys() and packed_grads
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, padded_grads[name], **tensor_tolerance(1e-5, 1e-4), msg=name)


@pytest.mark.slow
def test_packed_run_learns_and_logs(tiny_llama_dir, checks_dir, tmp_path):
    trainer = _trainer(
        tiny_llama_dir,
        checks_dir,
        tmp_path / "run",
        "--shared_prefix_packing",
        "true",
        "--per_device_train_batch_size",
        "3",
        "--max_steps",
        "12",
        "--learning_rate",
        "3e-3",
    )
    trainer.train()
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3])
    assert all("mean_token_accuracy" in r for r in trainer.state.log_history if "loss" in r)


def test_shared_prefix_packing_refuses_sequence_packing(tmp_path):
    with pytest.raises(ValueError, match="shared_prefix_packing packs the batch itself"):
        make_parser().parse_args_and_config(
            ["--output_dir", str(tmp_path), "--shared_prefix_packing", "true", "--packing", "true"]
        )


def _windowed(family: str, vocab: int, head: str = "lm"):
    """A random 2-layer model with an 8-position window on every layer (Mistral) or on its second (Qwen2)."""
    from transformers import (
        MistralConfig,
        MistralForCausalLM,
        MistralForSequenceClassification,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen2ForSequenceClassification,
    )

    shape = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=8,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    if family == "mistral":
        config, classes = MistralConfig(**shape), (MistralForCausalLM, MistralForSequenceClassification)
    else:
        config = Qwen2Config(**shape, use_sliding_window=True, max_window_layers=1)
        classes = (Qwen2ForCausalLM, Qwen2ForSequenceClassification)
        assert config.layer_types == ["full_attention", "sliding_attention"]
    if head == "score":
        config.num_labels = 1
    model = classes[head == "score"](config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


@pytest.mark.parametrize("family", ["mistral", "qwen2"])
def test_a_trie_row_sees_what_each_row_sees_alone_under_a_sliding_window(family):
    """Rows 20-30 tokens long under an 8-token window: the packed trie's logits at every row's tokens equal the row's
    own forward, which they do only when the window is applied by depth (the trie's positions)."""
    model = _windowed(family, vocab=64)
    generator = torch.Generator().manual_seed(0)
    head = torch.randint(1, 64, (14,), generator=generator).tolist()
    rows = [head + torch.randint(1, 64, (n,), generator=generator).tolist() for n in (6, 12, 16)]
    batch = prefix_trie([(row, [-100] * len(row)) for row in rows])
    positions = batch["position_ids"]
    mask = attention_mask(batch["tree_mask"], positions, positions, model.config, model.dtype)
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=positions, attention_mask=mask).logits[0]
        for row in rows:
            alone = model(input_ids=torch.tensor([row])).logits[0]
            node, nodes = -1, []
            for token in row:  # the trie's node of each of the row's tokens: parents come before children
                node = next(
                    i
                    for i in range(node + 1, len(positions[0]))
                    if batch["input_ids"][0, i] == token
                    and positions[0, i] == len(nodes)
                    and (node < 0 or batch["tree_mask"][0, 0, i, node])
                )
                nodes.append(node)
            torch.testing.assert_close(packed[nodes], alone, **tensor_tolerance(1e-5, 1e-4))


@pytest.mark.parametrize("family", ["mistral", "qwen2"])
def test_a_shared_context_scores_as_whole_rows_under_a_sliding_window(family, embedded_tokenizer):
    """A reward model's options after contexts of different lengths (the shorter right-padded) and longer than the
    window: the shared-context rewards equal one whole row per option."""
    model = _windowed(family, vocab=len(embedded_tokenizer), head="score")
    model.config.pad_token_id = embedded_tokenizer.pad_token_id
    generator = torch.Generator().manual_seed(1)

    def ids(n: int) -> list[int]:
        return torch.randint(1, 1000, (n,), generator=generator).tolist()

    rows = [
        {"context_ids": ids(20), "option_ids": [ids(5), ids(9), ids(3)], "gold": 0},
        {"context_ids": ids(11), "option_ids": [ids(12), ids(4)], "gold": 1},
    ]
    with torch.no_grad():
        shared = option_rewards(model, ListwiseCollator(embedded_tokenizer)(rows))
        whole = option_rewards(model, ListwiseCollator(embedded_tokenizer, share_context=False)(rows))
    valid = torch.tensor([[True, True, True], [True, True, False]])
    torch.testing.assert_close(shared[valid], whole[valid], **tensor_tolerance(1e-5, 1e-4))
