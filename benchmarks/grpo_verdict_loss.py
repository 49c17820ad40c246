"""The loss pass of a verdict judge's GRPO step: TRL's, the shared-prompt pass in two micro-batches, and in one.

A step of the judge recipe (``recipes/verdict/cpu_smollm2_prefeval.yaml``) is one PrefEval question in ``--orders``
orders of its options, ``--rollouts`` sampled verdicts each (two tokens a rollout, after a ~160-token prompt). The
rollouts are sampled once by the trainer; then the log-probs of those same rows and their backward are timed
three ways, on the same trainer and weights:

* ``trl``: TRL's ``GRPOTrainer._get_per_token_logps_and_entropies``, every row whole, the rows in
  ``--micro-batches`` shuffled micro-batches as TRL splits a generation batch over its accumulation steps;
* ``shared_split``: ``SharedPromptGRPOTrainer``'s pass over the same micro-batches: each micro-batch computes each
  of its prompts once, and each distinct completion of it once, so a prompt is computed once per micro-batch;
* ``shared_one``: the same pass over all rows in one micro-batch, as the recipe trains
  (``gradient_accumulation_steps: 1``).

Each is the best of ``--repeats`` runs, all in one process on one machine; the last line is one JSON object.

    python benchmarks/grpo_verdict_loss.py [--prefeval data/prefeval/train] [--orders 4] [--rollouts 16]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from common import best_of, emit  # beside this script
from trl import GRPOTrainer

from data_prep.verdict.prepare import prepare_verdict
from persetrain.train.grpo import build_grpo_trainer
from persetrain.train.grpo import make_parser as grpo_parser

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "verdict" / "cpu_smollm2_prefeval.yaml"


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefeval", type=Path, default=REPO / "data" / "prefeval" / "train")
    parser.add_argument("--orders", type=int, default=4)
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--micro-batches", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    return parser


def rows_of_one_step(trainer, orders: int, rollouts: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The first question's ``orders`` prompts with ``rollouts`` sampled verdicts each, as TRL lays out a
    generation batch: prompts left-padded, completions right-padded; and the completions' width."""
    tokenizer = trainer.processing_class
    texts = trainer.train_dataset.select(range(orders))["prompt"]
    prompts = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    prompt_ids = [prompt for prompt in prompts for _ in range(rollouts)]
    completions = trainer._generate_single_turn(prompt_ids, None, {}, rollouts)[0]
    width, length = max(map(len, prompts)), max(map(len, completions))
    pad = tokenizer.pad_token_id
    ids, mask = [], []
    for prompt, completion in zip(prompt_ids, completions, strict=True):
        left, right = width - len(prompt), length - len(completion)
        ids.append([pad] * left + prompt + completion + [pad] * right)
        mask.append([0] * left + [1] * (len(prompt) + len(completion)) + [0] * right)
    return torch.tensor(ids), torch.tensor(mask), length


def main() -> None:
    args = make_parser().parse_args()
    torch.manual_seed(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "judge"
        prepare_verdict(data, prefeval=[args.prefeval], seed=args.seed, orders=args.orders)
        argv = ["--config", str(RECIPE), "--dataset_path", str(data), "--output_dir", str(Path(tmp) / "run")]
        argv += ["--num_generations", str(args.rollouts), "--report_to", "none", "--save_strategy", "no"]
        trainer = build_grpo_trainer(*grpo_parser().parse_args_and_config(argv))
        model = trainer.model
        model.train()
        input_ids, attention_mask, logits_to_keep = rows_of_one_step(trainer, args.orders, args.rollouts)
        scored = attention_mask[:, -logits_to_keep:].bool()
        split = torch.randperm(input_ids.size(0)).chunk(args.micro_batches)

        def loss_pass(method, micro_batches) -> torch.Tensor:
            """Log-probs of every row, and the backward of their sum, micro-batch by micro-batch."""
            model.zero_grad()
            logps = torch.zeros(scored.shape)
            for rows in micro_batches:
                found = method(model, input_ids[rows], attention_mask[rows], logits_to_keep, compute_entropy=True)[0]
                (found * scored[rows]).sum().backward()
                logps[rows] = found.detach()
            return logps

        def trl(*a, **k):
            return GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k)

        ours = trainer._get_per_token_logps_and_entropies
        every_row = [torch.arange(input_ids.size(0))]
        loss_pass(ours, every_row)  # warm-up
        trl_s, theirs = best_of(lambda: loss_pass(trl, split), args.repeats)
        split_s, ours_split = best_of(lambda: loss_pass(ours, split), args.repeats)
        one_s, ours_one = best_of(lambda: loss_pass(ours, every_row), args.repeats)
    completions = {(tuple(row[:-logits_to_keep].tolist()), tuple(row[-logits_to_keep:].tolist())) for row in input_ids}
    same = all(torch.allclose(x[scored], theirs[scored], atol=1e-4) for x in (ours_split, ours_one))
    print(f"{args.orders} prompts x {args.rollouts} rollouts, {len(completions)} distinct (prompt, completion) rows")
    print(f"TRL {trl_s:.2f} s, shared prompt in {args.micro_batches} micro-batches {split_s:.2f} s, in 1 {one_s:.2f} s")
    result = {
        "device": str(trainer.accelerator.device),
        "threads": torch.get_num_threads(),
        "prompts": args.orders,
        "rollouts": args.rollouts,
        "prompt_tokens": int(attention_mask[:, :-logits_to_keep].sum(-1).float().mean()),
        "distinct_rows": len(completions),
        "same_logps": same,
        "trl_s": round(trl_s, 3),
        "shared_split_s": round(split_s, 3),
        "shared_one_s": round(one_s, 3),
        "speedup_vs_trl": round(trl_s / one_s, 2),
        "speedup_vs_split": round(split_s / one_s, 2),
    }
    emit(result)


if __name__ == "__main__":
    main()
