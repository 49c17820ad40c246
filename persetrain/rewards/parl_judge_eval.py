"""How well a PARL judge answers labelled (rule, text) checks: can this judge carry the reward?

The reward's margin D is flat when the judge says "yes" to everything, so before a GRPO run is worth its
compute the judge is measured on checks whose answer is known (``persetrain prepare verifier`` writes
them): accuracy of ``p(yes) > tau`` (the reward's own consistency threshold), the share of "yes" answers
(a judge that always agrees scores the yes share of the data), and accuracy per rule, where a judge
that is right on average can still be blind to one signature.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from persetrain.prompts.yes_no import YES
from persetrain.rewards.parl import RubricJudge


@dataclass(frozen=True)
class JudgeAccuracy:
    accuracy: float
    yes_share: float
    #: Accuracy per rule name (rows without one, labelled data, are grouped under their rule text).
    per_rule: dict[str, float]
    n: int

    def as_dict(self) -> dict:
        return asdict(self)


def judge_accuracy(judge: RubricJudge, rows: Sequence[dict], tau: float = 0.5) -> JudgeAccuracy:
    """Score ``rows`` (``task``, ``rule``, ``input``, ``text``, ``label`` yes/no) in one engine call."""
    if not rows:
        raise ValueError("no labelled checks to measure the judge on")
    p_yes = judge.p_yes_many([(r["task"], r["rule"], r["input"], r["text"]) for r in rows])
    said_yes = [p > tau for p in p_yes]
    right = [said == (r["label"] == YES) for said, r in zip(said_yes, rows, strict=True)]
    by_rule: dict[str, list[bool]] = defaultdict(list)
    for ok, r in zip(right, rows, strict=True):
        by_rule[r.get("rule_name") or r["rule"]].append(ok)
    return JudgeAccuracy(
        accuracy=sum(right) / len(rows),
        yes_share=sum(said_yes) / len(rows),
        per_rule={name: sum(oks) / len(oks) for name, oks in sorted(by_rule.items())},
        n=len(rows),
    )
