"""Reward-model training: the listwise packed forward equals the per-pair path, and `persetrain rm` runs.

The reference path is TRL's: each (gold, distractor) pair as two whole sequences, context + option,
collated by TRL's ``DataCollatorForPreference`` and pooled by the model itself. The fast path computes a
question's context once and its options against the cached states. Rewards, both losses and every
parameter's gradient must agree.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset, DatasetDict
from trl.trainer.reward_trainer import DataCollatorForPreference

from persetrain.io import InputError
from persetrain.models import load_tokenizer
from persetrain.prompts.preference import rm_context
from persetrain.reward_model.batches import ListwiseCollator, option_rewards
from persetrain.reward_model.inputs import encode
from persetrain.train.recipe import RecipeError
from persetrain.train.rm import run_rm
from persetrain.train.rm_listwise import ranking_loss

QUESTIONS = [
    {
        "prompt": rm_context("I am vegan.", "Where should I eat in Rome?"),
        "options": [
            "A vegan trattoria near the Pantheon.",
            "A steakhouse.",
            "Try the cheese shop on Via Roma.",
            "Any pizzeria with mozzarella.",
        ],
        "gold": 0,
    },
    {
        "prompt": rm_context("I hate crowds and prefer quiet mornings.", "When should I visit the museum?"),
        "options": ["Saturday at noon, the busiest time.", "Early on a weekday, right at opening."],
        "gold": 1,
    },
    {
        "prompt": rm_context("I love long hikes.", "What should I do this weekend?"),
        "options": ["Binge a TV series.", "A 20 km ridge trail.", "Shopping downtown."],
        "gold": 1,
    },
]


@pytest.fixture(scope="module")
def tiny_rm(tiny_llama_dir):
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_llama_dir, num_labels=1, dtype=torch.float32)
    with torch.no_grad():
        model.score.weight.normal_(0, 0.5)
    return model


def _listwise_batch(tokenizer):
    rows = []
    for q in QUESTIONS:
        encoded = encode(tokenizer, q["prompt"], q["options"])
        rows.append({"context_ids": encoded.context, "option_ids": encoded.candidates, "gold": q["gold"]})
    return ListwiseCollator(tokenizer)(rows)


def _pairs_batch(tokenizer):
    """TRL's path: every (gold, distractor) pair tokenized from the joined text, as RewardTrainer does."""
    examples = []
    for q in QUESTIONS:
        gold = q["options"][q["gold"]]
        for j, option in enumerate(q["options"]):
            if j != q["gold"]:
                examples.append(
                    {
                        "chosen_ids": tokenizer(q["prompt"] + gold + tokenizer.eos_token)["input_ids"],
                        "rejected_ids": tokenizer(q["prompt"] + option + tokenizer.eos_token)["input_ids"],
                    }
                )
    return DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id)(examples)


def _grads(model) -> dict[str, torch.Tensor]:
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def test_joined_and_separate_tokenization_agree(embedded_tokenizer):
    """The packed path's ids (context ids + option ids) are the ids TRL gets from the joined text."""
    for q in QUESTIONS:
        encoded = encode(embedded_tokenizer, q["prompt"], q["options"])
        for i, option in enumerate(q["options"]):
            joined = embedded_tokenizer(q["prompt"] + option + embedded_tokenizer.eos_token)["input_ids"]
            assert encoded.row(i) == joined


def test_packed_rewards_equal_one_sequence_each(tiny_rm, embedded_tokenizer):
    batch = _listwise_batch(embedded_tokenizer)
    with torch.no_grad():
        packed = option_rewards(tiny_rm, batch)
        for q, question in enumerate(QUESTIONS):
            encoded = encode(embedded_tokenizer, question["prompt"], question["options"])
            for i in range(len(question["options"])):
                alone = tiny_rm(input_ids=torch.tensor([encoded.row(i)])).logits.item()
                assert packed[q, i].item() == pytest.approx(alone, abs=1e-5)
    assert batch["option_mask"].tolist() == [[True] * 4, [True, True, False, False], [True, True, True, False]]


def test_bradley_terry_loss_and_gradients_equal_trl_pairs(tiny_rm, embedded_tokenizer):
    batch = _listwise_batch(embedded_tokenizer)
    loss = ranking_loss(option_rewards(tiny_rm, batch), batch["gold"], batch["option_mask"], "bradley_terry")
    loss.backward()
    packed_grads = _grads(tiny_rm)

    pairs = _pairs_batch(embedded_tokenizer)
    chosen, rejected = torch.chunk(tiny_rm(**pairs, use_cache=False).logits.squeeze(-1), chunks=2)
    reference = -F.logsigmoid(chosen - rejected).mean()  # RewardTrainer.compute_loss
    reference.backward()
    reference_grads = _grads(tiny_rm)

    assert loss.item() == pytest.approx(reference.item(), abs=1e-6)
    assert packed_grads.keys() == reference_grads.keys()
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, reference_grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_listwise_loss_is_softmax_over_each_questions_options(tiny_rm, embedded_tokenizer):
    batch = _listwise_batch(embedded_tokenizer)
    rewards = option_rewards(tiny_rm, batch).detach()
    expected = sum(
        -torch.log_softmax(rewards[q, : len(question["options"])], 0)[question["gold"]]
        for q, question in enumerate(QUESTIONS)
    ) / len(QUESTIONS)
    assert ranking_loss(rewards, batch["gold"], batch["option_mask"], "listwise").item() == pytest.approx(
        expected.item(), abs=1e-6
    )


def test_encoder_rows_are_its_sentence_pairs():
    """An encoder reads [CLS] context [SEP] option [SEP]: the tokenizer's own pair encoding."""
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = load_tokenizer("embedded:all-minilm-l6-v2")
    torch.manual_seed(0)
    model = BertForSequenceClassification(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            num_labels=1,
        )
    )
    batch = _listwise_batch(tokenizer)
    assert batch["pair_ids"].size(0) == sum(len(q["options"]) for q in QUESTIONS)  # no rows for missing options
    with torch.no_grad():
        packed = option_rewards(model.eval(), batch)
        for q, question in enumerate(QUESTIONS):
            for i, option in enumerate(question["options"]):
                pair = tokenizer(question["prompt"], option, return_tensors="pt")
                assert packed[q, i].item() == pytest.approx(model(**pair).logits.item(), abs=1e-5)


def _write_listwise(path, rows):
    DatasetDict({"train": Dataset.from_list(rows), "test": Dataset.from_list(rows[:1])}).save_to_disk(str(path))
    return path


@pytest.mark.slow
def test_rm_trains_the_embedded_model_end_to_end(tmp_path):
    """`persetrain rm` on the real embedded model, with LoRA and the person contrast over two other persons: a
    run directory that loads as a reward model."""
    rows = [{**q, "prompt_blind": "Question: " + q["prompt"].split("Question: ")[1]} for q in QUESTIONS]
    data = _write_listwise(tmp_path / "listwise", rows * 2)
    out = tmp_path / "rm"
    result = run_rm(
        [
            "--dataset_path",
            str(data),
            "--output_dir",
            str(out),
            "--use_peft",
            "true",
            "--lora_r",
            "8",
            "--lora_alpha",
            "16",
            "--max_steps",
            "2",
            "--per_device_train_batch_size",
            "2",
            "--learning_rate",
            "1e-3",
            "--person_contrast",
            "1.0",
            "--contrast_persons",
            "2",
            "--logging_steps",
            "1",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
        ]
    )
    assert result.global_step == 2 and result.model_dir == out / "merged"
    logs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in logs if r.get("event") == "log" and "loss" in r]
    assert len(steps) == 2 and all(0.0 <= r["accuracy"] <= 1.0 and "person_margin" in r for r in steps)
    config = json.loads((out / "merged" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"] and len(config["id2label"]) == 1


def test_rm_refuses_bad_input(tmp_path):
    pairs_less = tmp_path / "sft"
    DatasetDict({"train": Dataset.from_list([{"prompt": "p", "completion": "c"}])}).save_to_disk(str(pairs_less))
    with pytest.raises(InputError, match="lacks the columns of listwise.*or pairs"):
        run_rm(["--dataset_path", str(pairs_less), "--output_dir", str(tmp_path / "o1")])
    one_option = _write_listwise(tmp_path / "one", [{"prompt": "p", "options": ["only"], "gold": 0}])
    with pytest.raises(InputError, match=r"row 0: field 'options' needs at least 2 options"):
        run_rm(["--dataset_path", str(one_option), "--output_dir", str(tmp_path / "o2")])
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    recipe = tmp_path / "hinge.yaml"
    recipe.write_text(f"dataset_path: {one_option}\nloss: hinge\n")
    with pytest.raises(RecipeError, match="key 'loss': expected one of listwise, bradley_terry, got 'hinge'"):
        run_rm(["--config", str(recipe)])


def test_rm_refuses_a_backbone_without_a_classification_head(tmp_path):
    from transformers import ViTConfig

    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64).save_pretrained(
        tmp_path / "vit"
    )
    data = _write_listwise(tmp_path / "listwise", QUESTIONS)
    with pytest.raises(InputError, match="model_name_or_path: a 'vit' model has no sequence-classification head"):
        run_rm(
            [
                "--dataset_path",
                str(data),
                "--model_name_or_path",
                str(tmp_path / "vit"),
                "--output_dir",
                str(tmp_path / "o"),
            ]
        )


def test_swapped_prompts_keep_the_request_and_change_the_person():
    from persetrain.train.rm_listwise import swapped_prompts

    rows = [
        {
            **q,
            "prompt_blind": rm_context(None, q["prompt"].split("Question: ")[1].removesuffix("\nAnswer:\n")),
            "topic": f"t{i % 2}",
        }
        for i, q in enumerate(QUESTIONS)
    ]
    swaps = swapped_prompts(Dataset.from_list(rows), seed=0)
    for i, (row, [swap]) in enumerate(zip(rows, swaps, strict=True)):
        assert swap.endswith(row["prompt_blind"]) and swap != row["prompt"]
        donor = next(r for r in rows if swap.startswith(r["prompt"].removesuffix(r["prompt_blind"])))
        # Questions 0 and 2 share topic t0 and swap persons; question 1 is alone in t1 and takes another's.
        assert (donor["topic"] == row["topic"]) == (i != 1)
    # Two other persons each: question 0's same-topic person first, then the one person left.
    for row, pair in zip(rows, swapped_prompts(Dataset.from_list(rows), seed=0, persons=2), strict=True):
        persons = {swap.removesuffix(row["prompt_blind"]) for swap in pair}
        assert len(persons) == 2 and row["prompt"].removesuffix(row["prompt_blind"]) not in persons
    with pytest.raises(ValueError, match="needs at least 4 different persons"):
        swapped_prompts(Dataset.from_list(rows), seed=0, persons=3)
    with pytest.raises(ValueError, match="'prompt_blind' column"):
        swapped_prompts(Dataset.from_list(QUESTIONS), seed=0)


def test_person_contrast_with_one_other_person_is_the_pairwise_logistic_loss():
    """The softmax over persons reduces to ``-log sigmoid(own - other)`` with one other person."""
    from persetrain.train.rm_listwise import person_contrast_loss

    own, other = torch.tensor([0.3, -1.2, 2.0]), torch.tensor([[0.5], [-2.0], [1.0]])
    expected = -F.logsigmoid(own - other[:, 0]).mean()
    assert person_contrast_loss(own, other).item() == pytest.approx(expected.item(), abs=1e-6)


def test_person_contrast_scores_the_gold_option_under_the_swapped_person(tiny_rm, embedded_tokenizer):
    """The collator's swapped rows are scored exactly as the gold option alone under the swapped context."""
    from persetrain.train.rm_listwise import swapped_prompts, tokenize_listwise

    rows = [
        {**q, "prompt_blind": "Question: " + q["prompt"].split("Question: ")[1], "topic": str(i)}
        for i, q in enumerate(QUESTIONS)
    ]
    data = tokenize_listwise(Dataset.from_list(rows), embedded_tokenizer, None, "test", swap_seed=0, persons=2)
    batch = ListwiseCollator(embedded_tokenizer)(list(data))
    assert batch["swapped"].tolist() == [False] * 3 + [True] * 6
    with torch.no_grad():
        rewards = option_rewards(tiny_rm, batch)
        swaps = swapped_prompts(Dataset.from_list(rows), seed=0, persons=2)
        for i, (q, pair) in enumerate(zip(QUESTIONS, swaps, strict=True)):
            for k, swap in enumerate(pair):
                ids = encode(embedded_tokenizer, swap, [q["options"][q["gold"]]]).row(0)
                alone = tiny_rm(input_ids=torch.tensor([ids]))
                assert rewards[3 + 2 * i + k, 0].item() == pytest.approx(alone.logits.item(), abs=1e-5)


@pytest.mark.slow
def test_push_merges_a_reward_model_adapter_and_cards_it(tiny_llama_dir, tmp_path):
    """`persetrain push --merge` of a LoRA reward model: full classifier weights that score as the adapter does."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from persetrain.hub import push

    data = _write_listwise(tmp_path / "listwise", QUESTIONS)
    out = tmp_path / "rm"
    run_rm(
        [
            "--dataset_path",
            str(data),
            "--model_name_or_path",
            str(tiny_llama_dir),
            "--output_dir",
            str(out),
            "--use_peft",
            "true",
            "--lora_r",
            "4",
            "--lora_alpha",
            "8",
            "--max_steps",
            "1",
            "--learning_rate",
            "1e-2",
            "--save_strategy",
            "no",
            "--report_to",
            "none",
            "--merge_adapter",
            "false",
        ]
    )
    folder = push(out, "alice/rm", merge=True, dry_run=True, out=tmp_path / "upload").folder
    card = (folder / "README.md").read_text()
    assert "pipeline_tag: text-classification" in card and "reward-model" in card and "Ouyang" in card

    tokenizer = load_tokenizer(str(tiny_llama_dir))
    base = AutoModelForSequenceClassification.from_pretrained(tiny_llama_dir, num_labels=1)
    adapter = PeftModel.from_pretrained(base, str(out)).eval()
    merged = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    ids = torch.tensor([encode(tokenizer, QUESTIONS[0]["prompt"], QUESTIONS[0]["options"]).row(1)])
    with torch.no_grad():
        assert merged(input_ids=ids).logits.item() == pytest.approx(adapter(input_ids=ids).logits.item(), abs=1e-5)
