"""How often a PARL rubric generator writes a valid rule set for the users it trained on: one fixed check,
before and after GRPO.

GRPO's own curve samples each user at the training temperature, one step at a time, from a policy that moves
between steps, so it cannot say whether training changed the policy. This check samples every training user of a
prepared PARL dataset ``--samples`` times (temperature ``--temperature``, up to ``--max-new-tokens`` tokens, one
try, no schema), seeded by sample index, and validates each set with ``--judge``: a set is valid when 2 or more of
its rules pass on every history text (the reward's consistency validation). Per policy it prints the users with
at least one valid set and the valid share; every policy after the first is compared with the first, user by user
(one-sided paired t-test and Wilcoxon signed-rank test on each user's count of valid sets).

    python benchmarks/parl_validity.py --data runs/demo-parl/data/parl_news --judge runs/demo-parl/verifier/merged \\
        --policy runs/demo-parl/warmstart/merged --policy runs/demo-parl/grpo/merged

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

from scipy import stats

from persetrain.data import load_dataset
from persetrain.engine import load_engine
from persetrain.evaluators.parl import PARLConfig, induce
from persetrain.metrics.parl import paired_runs_t_test


def valid_sets_per_user(policy: str, examples, config: PARLConfig, judge, samples: int) -> dict[str, int]:
    """For every user, how many of ``samples`` induced sets have 2 or more valid rules."""
    engine = load_engine(policy)
    counts = {ex.id: 0 for ex in examples}
    for sample in range(samples):
        for user in induce(engine, examples, config, sample, judge):
            counts[user.example.id] += sum(user.valid(config.tau)) >= 2
    return counts


def compare(before: dict[str, int], after: dict[str, int]) -> dict:
    """One-sided paired tests of "``after`` writes more valid sets per user than ``before``"."""
    users = sorted(before)
    a, b = [before[u] for u in users], [after[u] for u in users]
    differences = [y - x for x, y in zip(a, b, strict=True)]
    t_test = paired_runs_t_test(b, a)  # the same one-sided paired t-test, here paired by user
    if t_test["p"] is None:  # no variance of the differences: no test
        return {"t_test_p": None, "wilcoxon_p": None, "users_up": 0, "users_down": 0}
    return {
        "t_test_p": round(t_test["p"], 4),
        "wilcoxon_p": round(float(stats.wilcoxon(b, a, alternative="greater").pvalue), 4),
        "users_up": sum(d > 0 for d in differences),
        "users_down": sum(d < 0 for d in differences),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="A prepared PARL dataset (persetrain prepare parl).")
    parser.add_argument("--judge", required=True, help="The rule verifier that validates the sets.")
    parser.add_argument("--policy", action="append", required=True, help="A generator; the first is the baseline.")
    parser.add_argument("--split", default="train")
    parser.add_argument("--samples", type=int, default=4, help="Sets induced per user and policy.")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    args = parser.parse_args()
    began = time.perf_counter()
    _, examples = load_dataset(args.data, args.split)
    config = PARLConfig(
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        structured=False,
        max_tries=1,
        judge_model=args.judge,
    )
    judge = load_engine(args.judge)
    counts = {policy: valid_sets_per_user(policy, examples, config, judge, args.samples) for policy in args.policy}
    baseline = args.policy[0]
    figures = {}
    print(f"{'policy':60s} {'users with a valid set':>22s} {'valid share':>11s} {'p (t / Wilcoxon)':>17s}")
    for policy, per_user in counts.items():
        row = {
            "users_with_a_valid_set": sum(n > 0 for n in per_user.values()),
            "valid_share": round(sum(per_user.values()) / (args.samples * len(per_user)), 3),
            "per_user": per_user,
        }
        if policy != baseline:
            row |= compare(counts[baseline], per_user)
        figures[policy] = row
        p = f"{row['t_test_p']} / {row['wilcoxon_p']}" if "t_test_p" in row else "(baseline)"
        covered = f"{row['users_with_a_valid_set']} of {len(per_user)}"
        print(f"{policy:60s} {covered:>22s} {row['valid_share']:11.3f} {p:>17s}")
    print(
        json.dumps(
            {
                "users": len(examples),
                "samples": args.samples,
                "temperature": args.temperature,
                "policies": figures,
                "seconds": round(time.perf_counter() - began, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
