"""How often a PARL rubric generator writes a valid rule set for the users it trained on: one fixed check,
before and after GRPO.

GRPO's own curve samples each user at the training temperature, one step at a time, from a policy that moves
between steps, so it cannot say whether training changed the policy. This check samples every training user of a
prepared PARL dataset ``--samples`` times (temperature ``--temperature``, up to ``--max-new-tokens`` tokens, one
try, no schema), seeded by sample index, and validates each set with ``--judge``: a set is valid when 2 or more of
its rules pass on every history text (the reward's consistency validation). A valid set *separates* when the
user's own target text satisfies all its valid rules and every negative fails at least one (the user's share of
Max-Diff): a rule the judge passes on any text makes a set valid without separating anything, so the separating
share is what says whether the valid sets GRPO adds are discriminative. Per policy it prints the users with at
least one valid set, the valid share and the separating share; every policy after the first is compared with the
first, user by user (one-sided paired t-test and Wilcoxon signed-rank test on each user's count of valid sets,
and of separating sets).

The negatives are generic model outputs, so a set can separate a user from them by rules that fit any quirky
writer. The *other-user pass rate* asks whether a set is the user's own: the share of the other users' target
texts (same split) on which every valid rule of the set passes, averaged over valid sets; lower is more
personal. Its references are the users' true sets (their planted signatures, ``data_prep.parl.rubrics``), decided
by the signature checkers (what a perfect generator with a perfect judge would get) and by the judge (each rule in
the first wording the verifier trained on), so the dataset must be the synthetic sample's.

    python benchmarks/parl_validity.py --data runs/demo-parl/data/parl_news --judge runs/demo-parl/verifier/merged \\
        --policy runs/demo-parl/warmstart/merged --policy runs/demo-parl/grpo/merged

The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import emit  # beside this script
from scipy import stats

from data_prep.parl.rubrics import true_checks, true_other_user_pass_rates
from data_prep.parl.rule_verifier import require_synthetic
from persetrain.data import read_split
from persetrain.engine import load_engine
from persetrain.evaluators.parl import PARLConfig, UserRubrics, induce, other_user_pass_rates, valid_sets
from persetrain.io import InputError
from persetrain.metrics.parl import GT, paired_runs_t_test
from persetrain.prompts.parl import MIN_RULES
from persetrain.rewards.parl import RubricJudge

#: The two counts per user and policy: sets with MIN_RULES or more valid rules, and those of them that separate.
KINDS = ("valid", "separating")


def separates(user: UserRubrics, tau: float) -> bool:
    """Whether the set's valid rules (``MIN_RULES`` or more) pass the user's own text and fail every negative
    somewhere."""
    valid = user.valid(tau)
    if sum(valid) < MIN_RULES:
        return False
    passes = {t: all(p > tau for p, ok in zip(ps, valid, strict=True) if ok) for t, ps in user.p_targets.items()}
    return passes[GT] and not any(ok for t, ok in passes.items() if t != GT)


def sets_per_user(policy: str, examples, config: PARLConfig, judge, samples: int) -> tuple[dict, list[float]]:
    """For every kind and user, how many of ``samples`` induced sets are valid, and how many separate; and the
    other-user pass rate of every valid set."""
    engine = load_engine(policy)
    counts = {kind: {ex.id: 0 for ex in examples} for kind in KINDS}
    pass_rates: list[float] = []
    for sample in range(samples):
        users = induce(engine, examples, config, sample, judge)
        for user in users:
            counts["valid"][user.example.id] += sum(user.valid(config.tau)) >= MIN_RULES
            counts["separating"][user.example.id] += separates(user, config.tau)
        sets = list(valid_sets(users, config.tau).items())
        pass_rates += other_user_pass_rates(sets, examples, config.tau, RubricJudge(judge))
    return counts, pass_rates


def compare(before: dict[str, int], after: dict[str, int]) -> dict:
    """One-sided paired tests of "``after`` writes more such sets per user than ``before``"."""
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


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def figures_of(per_user: dict[str, int], baseline: dict[str, int] | None, samples: int) -> dict:
    """Users with at least one such set, the share of such sets, and the tests against the baseline's counts."""
    row = {
        "users_with_one": sum(n > 0 for n in per_user.values()),
        "share": round(sum(per_user.values()) / (samples * len(per_user)), 3),
        "per_user": per_user,
    }
    return row | (compare(baseline, per_user) if baseline is not None else {})


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="A prepared PARL dataset (persetrain prepare parl).")
    parser.add_argument("--judge", required=True, help="The rule verifier that validates the sets.")
    parser.add_argument("--policy", action="append", required=True, help="A generator; the first is the baseline.")
    parser.add_argument("--split", default="train")
    parser.add_argument("--samples", type=int, default=4, help="Sets induced per user and policy.")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    return parser


def main() -> None:
    args = make_parser().parse_args()
    began = time.perf_counter()
    try:
        require_synthetic(Path(args.data), "this check's references are those users' true sets")
    except InputError as err:
        raise SystemExit(str(err)) from None
    _, examples = read_split(args.data, args.split)
    config = PARLConfig(
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        structured=False,
        max_tries=1,
        judge_model=args.judge,
    )
    judge = load_engine(args.judge)
    measured = {policy: sets_per_user(policy, examples, config, judge, args.samples) for policy in args.policy}
    counts = {policy: per_kind for policy, (per_kind, _) in measured.items()}
    baseline = args.policy[0]
    figures = {
        policy: {
            kind: figures_of(per_kind[kind], counts[baseline][kind] if policy != baseline else None, args.samples)
            for kind in KINDS
        }
        | {"other_user_pass_rate": _mean(measured[policy][1]), "valid_sets": len(measured[policy][1])}
        for policy, per_kind in counts.items()
    }
    true_rates = true_other_user_pass_rates(examples)
    # the true sets as the judge decides them, each rule in the first wording the verifier trained on
    true_worded = [(user, [c.wordings[0] for c in checks]) for user, checks in true_checks(examples).items()]
    true_judged = other_user_pass_rates(true_worded, examples, config.tau, RubricJudge(judge))
    print(f"{'policy':50s} {'sets':>10s} {'users with one':>14s} {'share':>6s} {'p (t / Wilcoxon)':>17s}")
    for policy, per_kind in figures.items():
        for kind in KINDS:
            row = per_kind[kind]
            p = f"{row['t_test_p']} / {row['wilcoxon_p']}" if "t_test_p" in row else "(baseline)"
            users = f"{row['users_with_one']} of {len(row['per_user'])}"
            print(f"{policy:50s} {kind:>10s} {users:>14s} {row['share']:6.3f} {p:>17s}")
        print(
            f"{policy:50s} other-user pass rate {per_kind['other_user_pass_rate']} over {per_kind['valid_sets']} sets"
        )
    print(
        f"{'true sets (signature checkers)':50s} other-user pass rate {_mean(true_rates)} over {len(true_rates)} sets"
    )
    print(f"{'true sets (the judge)':50s} other-user pass rate {_mean(true_judged)} over {len(true_judged)} sets")
    emit(
        {
            "users": len(examples),
            "samples": args.samples,
            "temperature": args.temperature,
            "policies": figures,
            "true_sets_other_user_pass_rate": _mean(true_rates),
            "true_sets_other_user_pass_rate_judged": _mean(true_judged),
            "seconds": round(time.perf_counter() - began, 1),
        }
    )


if __name__ == "__main__":
    main()
