"""True rubric sets of the SYNTHETIC PARL users: what a perfect rubric generator would write for them.

Why: GRPO learns from differences between one prompt's rollouts, and the base model's own rubric sets,
validated by the base model (which says "yes" to nearly every rule), are mostly rules the trained judge
rejects on the user's own texts; a policy warm-started on them has no valid rollout to learn from. The
synthetic users know their truth: a signature rule holds on a user's history when its checker
(``data_prep.parl.signatures``) says so for every history text. Warm-starting on those sets, written in
the rule wordings the judge was trained on, starts GRPO from sets that pass validation, so the reward's
discriminative part can move.

Only the PARL dataset's ``train`` users are used (the CLI and the demo pass that split), plus every user of
``extra`` synthetic datasets: other samples (other seeds) of new users, never the held-out ones. On 23 users
the policy wrote the commonest rule for everyone; with more users its valid sets cover more held-out users
(0.48 with 23 users, 0.59-0.78 with 87: ``docs/findings/2026-11-26-parl-warm-start.md``). Each user gives
``copies`` rows, each with its own rule order and wording draw, so the policy does not learn one string per user.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from data_prep.parl.signatures import RULES, TRAIN_WORDINGS, RuleCheck
from persetrain.io import InputError
from persetrain.prompts.parl import MIN_RULES
from persetrain.schema import RubricExample


def true_rules(example: RubricExample) -> list[str]:
    """Names of the signatures every history text of ``example`` has, in ``RULES`` order."""
    texts = [h.output for h in example.history]
    return [check.name for check in RULES[example.task] if all(check.check(t) for t in texts)]


def true_checks(examples: Sequence[RubricExample]) -> dict[str, list[RuleCheck]]:
    """Each user's true set: the checks of their planted signatures, for the users with ``MIN_RULES`` or more."""
    sets = {}
    for ex in examples:
        names = true_rules(ex)
        if len(names) >= MIN_RULES:
            sets[ex.id] = [c for c in RULES[ex.task] if c.name in names]
    return sets


def true_other_user_pass_rates(examples: Sequence[RubricExample]) -> list[float]:
    """The other-user pass rate (``persetrain.evaluators.parl.other_user_pass_rates``) of each user's true set,
    decided by the signature checkers: what a perfect generator with a perfect judge would get."""
    return [
        sum(all(c.check(other.output) for c in checks) for other in examples if other.id != user) / (len(examples) - 1)
        for user, checks in true_checks(examples).items()
    ]


def true_rubric_rows(examples: Sequence[RubricExample], seed: int = 0, copies: int = 2) -> tuple[list[dict], dict]:
    """SFT rows (induction prompt -> the user's true rules as a JSON array) and counts, like the induced ones.

    A user with fewer than ``MIN_RULES`` true rules gives no row: the reward scores such a set as too small.
    """
    from persetrain.train.warmstart import warmstart_row

    rng = random.Random(f"{seed}:true-rubrics")
    rows: list[dict] = []
    users = 0
    for ex in examples:
        names = true_rules(ex)
        if len(names) < MIN_RULES:
            continue
        users += 1
        checks = {check.name: check for check in RULES[ex.task]}
        for copy in range(copies):
            order = rng.sample(names, len(names))
            rows.append(warmstart_row(ex, [checks[n].wordings[rng.randrange(TRAIN_WORDINGS)] for n in order], copy))
    return rows, {"sets": len(examples), "valid": users}


def write_true_warmstart_data(
    parl_dir: Path,
    split: str,
    out_dir: Path,
    seed: int = 0,
    copies: int = 2,
    max_examples: int | None = None,
    extra: Sequence[Path] = (),
) -> dict:
    """The warm-start dataset from the true rubric sets of a synthetic PARL dataset's ``split`` and of every user
    of the ``extra`` datasets (all their splits); the counts.

    Refuses a dataset whose ``build_info.json`` does not say ``synthetic``: elsewhere the checkers know no truth.
    """
    from data_prep.parl.rule_verifier import require_synthetic
    from persetrain.data import read_split
    from persetrain.saved import saved_splits
    from persetrain.train.warmstart import save_warmstart

    hint = "warm-start from induced sets instead (--source induced)"
    for path in (parl_dir, *extra):
        require_synthetic(path, hint)
    _, examples = read_split(parl_dir, split)
    examples = examples[:max_examples]
    for path in extra:
        examples += [ex for name in saved_splits(path) for ex in read_split(path, name)[1]]
    rows, counts = true_rubric_rows(examples, seed, copies)
    if not rows:
        raise InputError(parl_dir, f"no {split} user has {MIN_RULES} or more rules that all their history satisfies")
    info = {"source": "truth", "split": split, "copies": copies, "seed": seed, "extra": [str(p) for p in extra]}
    return save_warmstart(rows, counts, out_dir, info)
