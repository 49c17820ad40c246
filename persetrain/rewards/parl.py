"""The PARL reward: a rubric set is worth what it says about the user's own text versus competitors'.

Three layers, each usable alone:

* ``parse_rubric`` — the generator's text to rules, with the reference code's limits: a JSON array of
  2..10 objects that each have a string ``"rule"`` (else unparsable, reward 0.0); rules of 20..400
  characters are kept, each once (a repeat, up to case and spacing, is dropped: the reference code keeps
  repeats, and a GRPO policy learned to reach 2 valid rules by writing one rule twice). It tolerates what
  models wrap JSON in (``<think>`` blocks, code fences, text after the array).
* ``reward_parts`` — pure math over judge scores (docs/methods.md, PARL): consistency validation (a rule
  survives only if p(yes) > τ = 0.5 on every history item's own text), soft score S = mean p(yes)
  over the valid rules, margin product D = Π_j σ(k (S_gt − S_j)) with k = 20 over the negatives j (the
  generators' outputs, then any *user negatives*: other users' own texts, ``data_prep.parl.prepare``),
  cardinality c, and PARL-A = 0.1 + 10 S_gt c D, PARL-B = 0.1 + 10 c D, PARL-0 = 0.1 + 10 S_gt c (no margin),
  ``parl-a-linear`` = PARL-A with c = valid rules / 10. Fewer than 2 valid rules: 0.1, no scoring.
* ``RubricJudge`` / ``score_batch`` — p(yes) for (rule, text) checks through the engine's
  ``choice_probs``. All checks of a batch of samples (a GRPO step) go to the engine in one call,
  identical checks once, every prompt laid out head-first (``persetrain.prompts.parl``) so the shared
  head is computed once per text. Rules are checked against the target and the negatives in the
  same call as the history: one round trip, at the price of the (short) rule tails of rules that
  validation then drops.

A judge that fails (server down after the engine's bounded retries) raises ``RewardError`` naming
it: a transport error never becomes a reward of 0. The TRL and verl adapters live in ``parl_trl.py``
and ``parl_verl.py``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Literal

from persetrain.prompts.parl import (
    MAX_RULE_CHARS,
    MAX_RULES,
    MIN_RULE_CHARS,
    MIN_RULES,
    judge_request,
)
from persetrain.prompts.yes_no import CHOICES, p_yes

if TYPE_CHECKING:
    from persetrain.engine import Engine

Variant = Literal["parl-a", "parl-b", "parl-0", "parl-a-linear"]
VARIANTS: tuple[str, ...] = ("parl-a", "parl-b", "parl-0", "parl-a-linear")

#: Reward of an output that does not parse, and of one with fewer than ``MIN_RULES`` valid rules.
UNPARSABLE_REWARD = 0.0
TOO_FEW_RULES_REWARD = 0.1


class RewardError(RuntimeError):
    """The reward could not be computed (the judge failed); never silently turned into a reward."""


@dataclass(frozen=True)
class RewardConfig:
    """Constants of the PARL reward (defaults: the paper's)."""

    variant: str = "parl-a"
    #: Sharpness of the margin sigmoid σ(k (S_gt − S_j)).
    k: float = 20.0
    #: Global scale and floor: reward = base + scale · (...).
    scale: float = 10.0
    base: float = 0.1
    #: Consistency threshold: a rule is satisfied by a text when p(yes) > tau.
    tau: float = 0.5

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown PARL reward variant {self.variant!r}; expected one of {VARIANTS}")


@dataclass(frozen=True)
class ParsedRubric:
    """``rules`` is None when the output is unusable (reward 0.0); otherwise the length-kept rules."""

    rules: list[str] | None
    total_rules: int
    problem: str = ""


@dataclass
class RewardParts:
    """Everything the reward of one sample is made of; logged per sample."""

    total_rules: int
    valid_rules: int
    s_gt: float | None
    s_negatives: list[float]
    d: float | None
    c: float
    reward: float
    variant: str
    parsed: bool = True
    rules: list[str] = field(default_factory=list)  # the valid rules

    def as_dict(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------ parsing
_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\s*\n?(.*?)```", re.DOTALL)


def _candidates(text: str) -> list[str]:
    """Texts that may hold the array: after the last ``</think>``, inside code fences, then all of it."""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    return [m.group(1) for m in _FENCE.finditer(text)] + [text]


def _first_array(text: str) -> list | None:
    """The first JSON array in ``text``, ignoring text before and after it."""
    decoder = json.JSONDecoder()
    for start in (m.start() for m in re.finditer(r"\[", text)):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, list):
            return value
    return None


def parse_rubric(text: str) -> ParsedRubric:
    """The rules of a generated rubric set, with the reference code's limits (module docstring)."""
    items = None
    for candidate in _candidates(text):
        items = _first_array(candidate)
        if items is not None:
            break
    if items is None:
        return ParsedRubric(None, 0, "no JSON array found")
    if not MIN_RULES <= len(items) <= MAX_RULES:
        return ParsedRubric(None, len(items), f"{len(items)} rules; a set needs {MIN_RULES}..{MAX_RULES}")
    if not all(isinstance(item, dict) and isinstance(item.get("rule"), str) for item in items):
        return ParsedRubric(None, len(items), 'every element must be an object with a string "rule"')
    kept: dict[str, str] = {}
    for item in items:
        rule = item["rule"].strip()
        if MIN_RULE_CHARS <= len(rule) <= MAX_RULE_CHARS:
            kept.setdefault(" ".join(rule.casefold().split()), rule)
    return ParsedRubric(list(kept.values()), len(items))


# --------------------------------------------------------------------------------------- math
def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x >= 0 else math.exp(x) / (1.0 + math.exp(x))


def valid_rule_mask(p_history: Sequence[Sequence[float]], tau: float = 0.5) -> list[bool]:
    """Consistency validation: rule r is valid when p(yes) > tau on every history text (``p_history[r][h]``)."""
    return [bool(row) and all(p > tau for p in row) for row in p_history]


def reward_parts(
    total_rules: int,
    rules: Sequence[str],
    p_history: Sequence[Sequence[float]],
    p_gt: Sequence[float],
    p_negatives: Sequence[Sequence[float]],
    config: RewardConfig = RewardConfig(),
) -> RewardParts:
    """The reward of one parsed rubric set from its judge scores.

    ``p_history[r][h]`` is p(yes) of rule r on history text h, ``p_gt[r]`` on the user's target text,
    ``p_negatives[j][r]`` on negative j; ``rules`` are the length-kept rules (``parse_rubric``).
    """
    keep = valid_rule_mask(p_history, config.tau)
    valid = [r for r, ok in zip(rules, keep, strict=True) if ok]
    n = len(valid)
    if n < MIN_RULES:
        return RewardParts(total_rules, n, None, [], None, 0.0, TOO_FEW_RULES_REWARD, config.variant, rules=valid)
    idx = [r for r, ok in enumerate(keep) if ok]
    s_gt = sum(p_gt[r] for r in idx) / n
    s_neg = [sum(row[r] for r in idx) / n for row in p_negatives]
    d = math.prod(_sigmoid(config.k * (s_gt - s)) for s in s_neg)
    c = min(n, MAX_RULES) / MAX_RULES if config.variant == "parl-a-linear" else 1.0
    if config.variant == "parl-b":
        core = c * d
    elif config.variant == "parl-0":
        core = s_gt * c
    else:  # parl-a and its linear-cardinality ablation
        core = s_gt * c * d
    return RewardParts(
        total_rules, n, s_gt, s_neg, d, c, config.base + config.scale * core, config.variant, rules=valid
    )


def unparsable_parts(total_rules: int, config: RewardConfig = RewardConfig()) -> RewardParts:
    return RewardParts(total_rules, 0, None, [], None, 0.0, UNPARSABLE_REWARD, config.variant, parsed=False)


# ---------------------------------------------------------------------------------- the judge
@dataclass(frozen=True)
class RubricSample:
    """One scored rubric set: the generator's text and the user it was induced for.

    ``history_inputs[h]`` is the task input the user answered with ``history_outputs[h]``; the target
    text ``ground_truth`` and every ``negatives[j]`` answer ``target_input``. ``user_negatives`` are
    ``(input, text)`` pairs of other users' own texts, each judged with the input it answers, scored after
    ``negatives`` in the margin product.
    """

    task: str
    completion: str
    history_inputs: Sequence[str]
    history_outputs: Sequence[str]
    target_input: str
    ground_truth: str
    negatives: Sequence[str]
    user_negatives: Sequence[tuple[str, str]] = ()

    def negative_texts(self) -> list[tuple[str, str]]:
        """``(input, text)`` of every negative, the generators' first."""
        return [*((self.target_input, neg) for neg in self.negatives), *self.user_negatives]


class RubricJudge:
    """p(yes) of a rule on a text from ``engine.choice_probs`` over both spellings of yes / no (``prompts.yes_no``)."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def p_yes(self, task: str, checks: Sequence[tuple[str, str, str]]) -> list[float]:
        """p(yes) for each ``(rule, input, text)`` check, all in one engine call, duplicates once."""
        return self.p_yes_many([(task, *c) for c in checks])

    def p_yes_many(self, checks: Sequence[tuple[str, str, str, str]]) -> list[float]:
        """Like ``p_yes`` for ``(task, rule, input, text)`` checks of any tasks."""
        if not checks:
            return []
        requests = [judge_request(task, input, text, rule) for task, rule, input, text in checks]
        try:  # the engine computes identical checks once
            results = self.engine.choice_probs(requests, CHOICES, description="rubric checks")
        except Exception as err:
            raise RewardError(
                f"the PARL judge ({self.engine.backend.fingerprint}) failed on {len(checks)} "
                f"checks: {type(err).__name__}: {err}"
            ) from err
        return [p_yes(r.probs) for r in results]


def score_batch(
    judge: RubricJudge, samples: Sequence[RubricSample], config: RewardConfig = RewardConfig()
) -> list[RewardParts]:
    """The reward parts of every sample, with every yes/no check of the batch in one engine call."""
    parsed = [parse_rubric(s.completion) for s in samples]
    checks: list[tuple[str, str, str, str]] = []
    for s, p in zip(samples, parsed, strict=True):
        if p.rules is None or len(p.rules) < MIN_RULES:
            continue  # nothing to score: 0.0 or 0.1 whatever the judge says
        if not s.history_outputs:
            raise ValueError("a PARL sample needs at least one history item to validate rules against")
        texts = [
            *zip(s.history_inputs, s.history_outputs, strict=True),
            (s.target_input, s.ground_truth),
            *s.negative_texts(),
        ]
        checks += [(s.task, rule, inp, text) for rule in p.rules for inp, text in texts]
    scores = dict(zip(checks, judge.p_yes_many(checks), strict=True))
    out: list[RewardParts] = []
    for s, p in zip(samples, parsed, strict=True):
        if p.rules is None:
            out.append(unparsable_parts(p.total_rules, config))
            continue
        if len(p.rules) < MIN_RULES:
            out.append(reward_parts(p.total_rules, p.rules, [[] for _ in p.rules], [], [], config))
            continue

        def score(rule: str, inp: str, text: str, s=s) -> float:
            return scores[(s.task, rule, inp, text)]

        p_history = [
            [score(r, i, o) for i, o in zip(s.history_inputs, s.history_outputs, strict=True)] for r in p.rules
        ]
        p_gt = [score(r, s.target_input, s.ground_truth) for r in p.rules]
        p_neg = [[score(r, i, neg) for r in p.rules] for i, neg in s.negative_texts()]
        out.append(reward_parts(p.total_rules, p.rules, p_history, p_gt, p_neg, config))
    return out


def score_sequential(
    judge: RubricJudge, samples: Sequence[RubricSample], config: RewardConfig = RewardConfig()
) -> list[RewardParts]:
    """The reference code's way: one judge call per (rule, text), one after another.

    Kept as the equivalence reference for ``score_batch`` (tests, ``benchmarks/parl.py``); it
    validates first and scores only the valid rules, as the reference does.
    """
    out: list[RewardParts] = []
    for s in samples:
        p = parse_rubric(s.completion)
        if p.rules is None:
            out.append(unparsable_parts(p.total_rules, config))
            continue
        if len(p.rules) < MIN_RULES:
            out.append(reward_parts(p.total_rules, p.rules, [[] for _ in p.rules], [], [], config))
            continue
        p_history = [
            [judge.p_yes(s.task, [(r, i, o)])[0] for i, o in zip(s.history_inputs, s.history_outputs, strict=True)]
            for r in p.rules
        ]
        keep = valid_rule_mask(p_history, config.tau)
        if sum(keep) < MIN_RULES:  # 0.1 without scoring anything else
            out.append(reward_parts(p.total_rules, p.rules, p_history, [], [], config))
            continue
        nan = float("nan")  # never read: reward_parts only reads the valid rules' scores
        p_gt = [
            judge.p_yes(s.task, [(r, s.target_input, s.ground_truth)])[0] if ok else nan
            for r, ok in zip(p.rules, keep, strict=True)
        ]
        p_neg = [
            [judge.p_yes(s.task, [(r, i, neg)])[0] if ok else nan for r, ok in zip(p.rules, keep, strict=True)]
            for i, neg in s.negative_texts()
        ]
        out.append(reward_parts(p.total_rules, p.rules, p_history, p_gt, p_neg, config))
    return out
