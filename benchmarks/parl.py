"""PARL benchmarks, measured as ratios within one run on one machine.

Part ``reward`` — the reward of one GRPO step: a group of 5 rubric sets (10 rules each, drawn from a
pool of plausible rules so that samples of one group share rules, as GRPO samples do) for one user
of the sample data with 10 history items and 5 negatives (the sample's two synthetic negatives and
three other users' texts for the same input). Two paths on the same judge (the embedded model):

* batched — ``persetrain.rewards.parl.score_batch``: every yes/no check of the step in one
  ``choice_probs`` call, identical checks once, each text's prompt head computed once;
* sequential — ``score_sequential``: one judge call per (rule, text), one after another, validating
  first and scoring only valid rules, as the reference code does.

Each path's time is the best of ``--repeats`` runs (the engine's prefix cache is off so that no
repeat reuses another's work). ``reward_ideal_speedup`` is request tokens (what the sequential
path sends) over computed tokens (each distinct check's prompt with the head shared by one text's
checks counted once). Every scored sample's reward parts go to ``runs/bench-parl/reward_parts.jsonl``.

Parts fill one dict; the last line printed is that dict as one JSON object.

    python benchmarks/parl.py [--part reward] [--model SPEC] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from collections.abc import Callable
from pathlib import Path

from common import best_of, emit  # beside this script
from parl_grpo import add_arguments as add_grpo_arguments  # beside this script: the grpo part
from parl_grpo import grpo_run

from data_prep.parl.prepare import attach_baselines
from data_prep.parl.readers import read_task
from data_prep.synthetic.parl import write_parl_sample
from persetrain.console import console, set_quiet
from persetrain.engine import load_engine
from persetrain.models import DEFAULT_MODEL
from persetrain.prompts.parl import judge_request
from persetrain.rewards.parl import RewardConfig, RubricJudge, RubricSample, score_batch, score_sequential

OUT = Path("runs/bench-parl")
GROUP, RULES, HISTORY, NEGATIVES = 5, 10, 10, 5

RULE_POOL = [
    "The review is written entirely in lowercase letters, including the first word of every sentence.",
    "Every sentence of the review ends with an exclamation mark.",
    "The review ends with a short sign-off line that names the writer.",
    "The review includes a rhetorical question addressed to the reader.",
    "The review uses short sentences of at most ten words each.",
    "The review opens with a casual interjection such as 'Okay so,' before the first point.",
    "The review mentions a recurring personal topic such as a pet, a commute or a hobby.",
    "The review states a clear overall verdict in its last sentence.",
    "The review describes at least two concrete features of the item.",
    "The review avoids technical jargon and uses plain everyday words.",
    "The review is written in the first person singular throughout.",
    "The review does not mention the price of the item at all.",
    "The review contains no more than five sentences in total.",
    "The review uses a warm, enthusiastic tone without any sarcasm.",
    "The review refers to how long the writer has used the item.",
    "The review never uses bullet points, lists or headings.",
    "The review addresses the reader directly as 'you' at least once.",
    "The review compares the item with a product the writer owned before.",
    "The review mentions who else in the household uses the item.",
    "The review contains at least one number written as digits.",
    "The review repeats a favourite catchphrase of the writer.",
    "The review starts with the item's strongest feature.",
    "The review ends without any recommendation to other buyers.",
    "The review uses no contractions such as 'don't' or 'it's'.",
    "The review keeps a neutral tone and avoids superlatives.",
    "The review mentions the delivery or the packaging.",
    "The review includes a small complaint even when the rating is high.",
    "The review is a single paragraph without line breaks in the body.",
    "The review uses the word 'honestly' at least once.",
    "The review describes a specific moment when the item was used.",
    "The review avoids exclamation marks entirely.",
    "The review names the item's category rather than its brand.",
]


def _step_samples(seed: int = 0) -> list[RubricSample]:
    """One GRPO step: one user (10 history items), 5 negatives, a group of 5 rubric sets of 10 rules."""
    with tempfile.TemporaryDirectory() as tmp:
        sample = write_parl_sample(tmp, seed=seed)
        examples = attach_baselines(
            read_task(sample.root / "amazon", "amazon"), [sample.root / "amazon" / "baselines.jsonl"]
        )
    user = next(ex for ex in examples if len(ex.history) == HISTORY)
    others = [ex.output for ex in examples if ex.user_id != user.user_id][: NEGATIVES - len(user.baselines)]
    negatives = [*user.baselines.values(), *others]
    rng = random.Random(seed)
    samples = []
    for _ in range(GROUP):
        rules = rng.sample(RULE_POOL, RULES)
        samples.append(
            RubricSample(
                task="amazon",
                completion=json.dumps([{"rule": r} for r in rules]),
                history_inputs=[h.input for h in user.history],
                history_outputs=[h.output for h in user.history],
                target_input=user.input,
                ground_truth=user.output,
                negatives=negatives,
            )
        )
    return samples


def _computed_tokens(backend, samples: list[RubricSample]) -> int:
    """Tokens the batched path needs: per text, the shared head once plus every check's own tail."""
    by_text: dict[tuple[str, str], list[list[int]]] = {}
    seen = set()
    for s in samples:
        rules = [r["rule"] for r in json.loads(s.completion)]
        texts = [
            *zip(s.history_inputs, s.history_outputs, strict=True),
            (s.target_input, s.ground_truth),
            *((s.target_input, n) for n in s.negatives),
        ]
        for rule in rules:
            for inp, text in texts:
                if (rule, inp, text) in seen:
                    continue
                seen.add((rule, inp, text))
                tokens = backend.encode(backend.render(judge_request(s.task, inp, text, rule)))
                by_text.setdefault((inp, text), []).append(tokens)
    total = 0
    for group in by_text.values():
        head = min(_common(group[0], t) for t in group) if len(group) > 1 else len(group[0])
        total += head + sum(len(t) - head for t in group)
    return total


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def reward_speed(args: argparse.Namespace) -> dict:
    samples = _step_samples(args.seed)
    engine = load_engine(args.model, prefix_cache_bytes=0)
    judge = RubricJudge(engine)
    config = RewardConfig(variant=args.variant)
    score_batch(judge, samples[:1], config)  # warm-up (weights paged in, kernels chosen)
    batched_s, batched = best_of(lambda: score_batch(judge, samples, config), args.repeats)
    before = engine.cost.prompt_tokens
    sequential_s, sequential = best_of(lambda: score_sequential(judge, samples, config), args.sequential_repeats)
    request_tokens = (engine.cost.prompt_tokens - before) // args.sequential_repeats
    computed = _computed_tokens(engine.backend, samples)
    diff = max(abs(a.reward - b.reward) for a, b in zip(batched, sequential, strict=True))
    OUT.mkdir(parents=True, exist_ok=True)
    parts_path = OUT / "reward_parts.jsonl"
    with parts_path.open("w", encoding="utf-8") as f:
        for p in batched:
            f.write(json.dumps({k: v for k, v in p.as_dict().items() if k != "rules"}) + "\n")
    console.print(
        f"reward of one step ({GROUP} sets x {RULES} rules, {HISTORY} history items, {NEGATIVES} "
        f"negatives): batched {batched_s:.2f} s, sequential {sequential_s:.2f} s; request tokens "
        f"{request_tokens}, computed {computed}; rewards {[round(p.reward, 4) for p in batched]}"
    )
    return {
        "reward_batched_s": round(batched_s, 3),
        "reward_sequential_s": round(sequential_s, 3),
        "reward_speedup_vs_sequential": round(sequential_s / batched_s, 2),
        "reward_ideal_speedup": round(request_tokens / computed, 2),
        "reward_request_tokens": request_tokens,
        "reward_computed_tokens": computed,
        "reward_max_abs_diff": diff,
        "rewards_identical": diff <= 1e-4,
        "reward_parts_path": str(parts_path),
    }


#: Benchmark parts; each returns its keys of the final JSON object.
PARTS: dict[str, Callable[[argparse.Namespace], dict]] = {"reward": reward_speed, "grpo": grpo_run}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", action="append", choices=sorted(PARTS), help="Part to run (repeatable); all.")
    parser.add_argument("--model", default=DEFAULT_MODEL, help="Judge model spec.")
    parser.add_argument("--variant", default="parl-a")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sequential-repeats", type=int, default=1, help="The slow path; 1 by default.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quiet", action="store_true")
    add_grpo_arguments(parser)  # the grpo part: benchmarks/parl_grpo.py
    return parser


def main(argv: list[str] | None = None) -> dict:
    args = make_parser().parse_args(argv)
    set_quiet(args.quiet)
    results: dict = {}
    for part in args.part or list(PARTS):
        results.update(PARTS[part](args))
    emit(results)
    return results


if __name__ == "__main__":
    main()
