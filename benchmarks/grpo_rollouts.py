"""GRPO rollouts of several users in one step: one batched decode against one decode per user and TRL's own.

A GRPO step of ``--users`` PARL prompts (the sample data's news users, each prompt cut to ``--prompt-tokens``
tokens) with ``--rollouts`` rollouts each, generated three ways by the same trainer (the embedded model,
greedy, so that every path decodes the same tokens and the times compare like for like):

* ``batched``: ``SharedPromptGRPOTrainer._generate_single_turn`` as it trains, every prompt prefilled once and
  all prompts' rollouts decoded as one left-padded batch;
* ``per_user``: the same method called once per user, which is how the rollouts were decoded before, one
  prompt after another (on an H200 a step of 8 users took 66-82 s, where one batched ``generate`` of
  32 x 192 tokens took 4.7 s);
* ``trl``: TRL's ``GRPOTrainer._generate_single_turn``, every rollout a left-padded copy of its prompt.

Each is the best of ``--repeats`` runs, all in one process on one machine; the last line is one JSON object.

    python benchmarks/grpo_rollouts.py [--users 8] [--rollouts 4] [--max-tokens 48] [--prompt-tokens 400]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from common import best_of, emit  # beside this script
from datasets import load_from_disk
from trl import GRPOTrainer

from data_prep.parl.prepare import prepare_parl
from data_prep.synthetic.parl import write_parl_sample
from persetrain.models import DEFAULT_MODEL
from persetrain.train.grpo import build_grpo_trainer
from persetrain.train.grpo import make_parser as grpo_parser


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prompt-tokens", type=int, default=400, help="Each prompt cut to this many tokens.")
    parser.add_argument("--repeats", type=int, default=2)
    return parser


def main() -> None:
    args = make_parser().parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_parl_sample(root / "raw", seed=0)
        prepare_parl(root / "raw", root / "data", tasks=("news",))
        data = root / "data" / "parl_news"
        argv = ["--model_name_or_path", args.model, "--reward_judge_model", args.model, "--dataset_path", str(data)]
        argv += ["--output_dir", str(root / "run"), "--report_to", "none", "--save_strategy", "no"]
        argv += ["--num_generations", str(args.rollouts), "--per_device_train_batch_size", str(args.rollouts)]
        argv += ["--max_completion_length", str(args.max_tokens), "--activation_checkpointing", "false"]
        trainer = build_grpo_trainer(*grpo_parser().parse_args_and_config(argv))
        trainer.generation_config.do_sample = False
        tokenizer = trainer.processing_class
        rows = load_from_disk(str(data))["train"].select(range(args.users))
        prompts = [tokenizer(row["prompt"][-1]["content"])["input_ids"][: args.prompt_tokens] for row in rows]
        prompt_ids = [prompt for prompt in prompts for _ in range(args.rollouts)]

        def batched() -> list:
            return trainer._generate_single_turn(prompt_ids, None, {}, args.rollouts)[0]

        def per_user() -> list:
            return [
                c
                for p in prompts
                for c in trainer._generate_single_turn([p] * args.rollouts, None, {}, args.rollouts)[0]
            ]

        def trl() -> list:
            return GRPOTrainer._generate_single_turn(trainer, prompt_ids, None, {}, args.rollouts)[0]

        trainer._generate_single_turn(prompt_ids[: args.rollouts], None, {}, args.rollouts)  # warm-up
        batched_s, ours = best_of(batched, args.repeats)
        per_user_s, one_by_one = best_of(per_user, args.repeats)
        trl_s, theirs = best_of(trl, args.repeats)
    tokens = sum(len(c) for c in ours)
    print(f"{args.users} users x {args.rollouts} rollouts, {tokens} tokens generated")
    print(f"batched {batched_s:.2f} s, per user {per_user_s:.2f} s, TRL {trl_s:.2f} s")
    result = {
        "device": str(trainer.accelerator.device),
        "threads": torch.get_num_threads(),
        "users": args.users,
        "rollouts": args.rollouts,
        "tokens_generated": tokens,
        "same_rollouts": ours == one_by_one == theirs,
        "batched_s": round(batched_s, 3),
        "per_user_s": round(per_user_s, 3),
        "trl_s": round(trl_s, 3),
        "speedup_vs_per_user": round(per_user_s / batched_s, 2),
        "speedup_vs_trl": round(trl_s / batched_s, 2),
    }
    emit(result)


if __name__ == "__main__":
    main()
