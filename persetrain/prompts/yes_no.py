"""The yes / no answer that every yes / no judge gives, and how its probability is read.

Three judges ask a causal LM a yes / no question and read p(yes) from its answer: the ``verifier`` evaluator (does a
candidate follow the person), PARL's ``RubricJudge`` (does a text satisfy a rule) and the judge trained by GRPO in
its yes / no form. Their SFT data write the answer in lower case, but an untrained instruct model answers "Yes" /
"No" far more often, and so does a judge trained by GRPO from one (its verdict reward reads any case). SmolLM2-135M
on PrefEval's verifier questions: p("No") 0.33-0.60, "no" not among its six likeliest first tokens; on four PARL
rule checks: "Yes" 0.54-0.57, "No" 0.38-0.42, "yes" 0.03-0.06, "no" at most 0.007. Read over the lower case alone,
p(yes) was 0.86-0.90 on all four, a judge that agrees with every rule; over both spellings 0.58-0.62. So p(yes) is
the mass of both spellings of "yes" among both spellings of both answers.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The two answers, as SFT data and gold verdicts write them.
YES_NO: tuple[str, str] = ("yes", "no")
YES = YES_NO[0]
#: Every spelling read as each answer.
SPELLINGS: dict[str, tuple[str, str]] = {"yes": ("yes", "Yes"), "no": ("no", "No")}
#: What ``engine.choice_probs`` is asked for: every spelling of every answer.
CHOICES: tuple[str, ...] = tuple(spelling for answer in YES_NO for spelling in SPELLINGS[answer])


def p_yes(probs: Mapping[str, float]) -> float:
    """p(yes) from ``choice_probs``' probabilities over :data:`CHOICES` (which sum to 1)."""
    return sum(probs[spelling] for spelling in SPELLINGS[YES])
