"""Reward-model training speed: the listwise one-forward-per-question path against TRL's RewardTrainer.

Both train the same model (full fine-tuning, fp32, no activation checkpointing) on the same questions with
the same Bradley-Terry loss: TRL's trainer as it comes on the (gold, distractor) pairs, three pairs of a
question per step, against ``ListwiseRewardTrainer`` on the question's listwise row (its context computed
once, its options attending to it). Each step's wall time is recorded by a callback; the first steps warm
up, the median of the rest is kept. The ceiling is the machine's fp32 matmul rate at the model's shapes
(``benchmarks/common.py``), measured in the same run; utilization counts 6 x params FLOPs per computed token.

``python benchmarks/learned_judges.py`` runs this as one of its parts; alone:

    python benchmarks/rm_speed.py --data runs/learned-judges/data/listwise [--questions 24] [--per-step 4]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile

import torch
from common import StepTimer, emit, matmul_rate, step_shapes  # beside this script
from datasets import Dataset, load_from_disk
from transformers import AutoConfig
from trl import RewardTrainer

from persetrain.models import DEFAULT_MODEL, load_tokenizer, local_weights_dir
from persetrain.reward_model.batches import ListwiseCollator, option_rewards
from persetrain.reward_model.inputs import encode
from persetrain.train.rm import ListwiseRewardTrainer, RMConfig
from persetrain.train.rm_listwise import ranking_loss


class ComputedTokensTimer(StepTimer):
    """The step timer, counting each step's computed tokens from the trainer itself: the listwise trainer and TRL's
    ``RewardTrainer`` log no ``num_tokens`` of their own."""

    def __init__(self) -> None:
        super().__init__()
        self.trainer = None
        self._before = 0

    def on_step_begin(self, args, state, control, **kwargs):
        self._before = self.trainer._total_train_tokens
        super().on_step_begin(args, state, control, **kwargs)

    def on_step_end(self, args, state, control, **kwargs):
        super().on_step_end(args, state, control, **kwargs)
        self.tokens.append(self.trainer._total_train_tokens - self._before)

    def on_log(self, args, state, control, logs=None, **kwargs):
        pass  # the tokens come from the trainer, above


def pairs_of(listwise: Dataset) -> Dataset:
    """TRL's standard preference rows: every (gold, distractor) pair of each question, in question order."""
    rows = [
        {"prompt": q["prompt"], "chosen": q["options"][q["gold"]], "rejected": option}
        for q in listwise
        for j, option in enumerate(q["options"])
        if j != q["gold"]
    ]
    return Dataset.from_list(rows)


def _timed_run(trainer_class, model: str, train: Dataset, batch: int, steps: int) -> ComputedTokensTimer:
    timer = ComputedTokensTimer()
    with tempfile.TemporaryDirectory() as out:
        args = RMConfig(
            output_dir=out,
            max_steps=steps,
            per_device_train_batch_size=batch,
            loss="bradley_terry",
            learning_rate=1e-6,
            logging_steps=steps,
            save_strategy="no",
            report_to=[],
            disable_tqdm=True,
            activation_checkpointing=False,
            max_length=None,
            seed=0,
            dataloader_drop_last=True,
        )
        trainer = trainer_class(
            model=str(local_weights_dir(model)),
            args=args,
            train_dataset=train,
            processing_class=load_tokenizer(model),
            callbacks=[timer],
        )
        timer.trainer = trainer
        trainer.train()
    return timer


def loss_difference(model: str, listwise: Dataset, questions: int = 4) -> float:
    """|listwise path's Bradley-Terry loss - TRL's pair loss| on the first questions, same weights."""
    from transformers import AutoModelForSequenceClassification
    from trl.trainer.reward_trainer import DataCollatorForPreference

    tokenizer = load_tokenizer(model)
    torch.manual_seed(0)
    net = AutoModelForSequenceClassification.from_pretrained(local_weights_dir(model), num_labels=1).eval()
    net.config.pad_token_id = tokenizer.pad_token_id
    rows = list(listwise.select(range(questions)))
    encoded = [encode(tokenizer, q["prompt"], list(q["options"])) for q in rows]
    batch = ListwiseCollator(tokenizer)(
        [
            {"context_ids": e.context, "option_ids": e.candidates, "gold": q["gold"]}
            for e, q in zip(encoded, rows, strict=True)
        ]
    )
    pairs = [
        {"chosen_ids": e.row(q["gold"]), "rejected_ids": e.row(j)}
        for e, q in zip(encoded, rows, strict=True)
        for j in range(len(q["options"]))
        if j != q["gold"]
    ]
    with torch.no_grad():
        ours = ranking_loss(option_rewards(net, batch), batch["gold"], batch["option_mask"], "bradley_terry")
        both = net(**DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id)(pairs), use_cache=False)
        chosen, rejected = torch.chunk(both.logits.squeeze(-1), chunks=2)
        trl_loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    return abs(ours.item() - trl_loss.item())


def measure(
    listwise: Dataset, model: str = DEFAULT_MODEL, questions: int = 24, per_step: int = 4, warmup: int = 2
) -> dict:
    """Seconds per question of both paths, their ratio, the loss difference and the listwise path's FLOP use."""
    listwise = listwise.select(range(min(questions, len(listwise))))
    steps = len(listwise) // per_step
    pairs_per_question = sum(len(q["options"]) - 1 for q in listwise) / len(listwise)
    ours = _timed_run(
        ListwiseRewardTrainer, model, listwise.select_columns(["prompt", "options", "gold"]), per_step, steps
    )
    trl = _timed_run(RewardTrainer, model, pairs_of(listwise), round(per_step * pairs_per_question), steps)
    ours_step, trl_step = statistics.median(ours.seconds[warmup:]), statistics.median(trl.seconds[warmup:])
    config = AutoConfig.from_pretrained(local_weights_dir(model))
    matmul = matmul_rate(step_shapes(config, 256), repeats=7)
    params = sum(p.numel() for p in _params(model))
    tokens_per_second = statistics.median(
        t / s for t, s in zip(ours.tokens[warmup:], ours.seconds[warmup:], strict=True)
    )
    return {
        "listwise_seconds_per_question": ours_step / per_step,
        "trl_seconds_per_question": trl_step / per_step,
        "listwise_speedup_vs_trl": trl_step / ours_step,
        "listwise_loss_abs_diff": loss_difference(model, listwise),
        "rm_train_tokens_per_second": tokens_per_second,
        "matmul_gflops": matmul / 1e9,
        "rm_flop_utilization": tokens_per_second * 6 * params / matmul,
        "speed_questions": len(listwise),
    }


def _params(model: str):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(local_weights_dir(model), num_labels=1).parameters()


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="A listwise dataset (persetrain prepare preference).")
    parser.add_argument("--split", default="train")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--per-step", type=int, default=4, help="Questions per optimizer step (both paths).")
    return parser


def main() -> None:
    args = make_parser().parse_args()
    listwise = load_from_disk(args.data)[args.split]
    emit(measure(listwise, args.model, args.questions, args.per_step))


if __name__ == "__main__":
    main()
