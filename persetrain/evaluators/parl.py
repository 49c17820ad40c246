"""PARL: induce a rubric set from a user's history, keep the rules the history satisfies, score texts.

For every user (a ``RubricExample``): the rubric generator (the engine ``evaluate`` gives, e.g. a
GRPO-trained checkpoint) writes a JSON array of rules under structured output (inference only:
``RUBRIC_SCHEMA``); an unparsable set is retried with a new seed, at most ``max_tries`` times, then
kept as an unparsed judgment. Rules of 20..400 characters are validated by the judge (p(yes) > 0.5
on every history item's own text) and the valid ones are checked against the user's own text
(target ``gt``) and every negative (target = generator name). Every yes/no check of a run goes to
the judge in one ``choice_probs`` call, laid out for prefix reuse (``persetrain.rewards.parl``).

One judgment per (user, target, run): ``score`` is 1 when the target satisfies every valid rule
(user-level, all-or-nothing), ``details`` holds the rules, the dropped ones, and each rule's p(yes),
``explanation`` lists the valid rules. ``runs`` > 1 repeats induction with seeds ``seed + run`` (and
sampling) for the mean ± std the paper reports. The judge is the same engine unless ``judge_model``
names another one (``judge_backend``/``judge_base_url`` for a server, as in the paper's setup).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from persetrain.engine.retry import RetrySchedule, generate_parsed
from persetrain.engine.types import Cost, GenerationParams
from persetrain.evaluators.base import Evaluator, EvaluatorConfig, JudgeContext, register
from persetrain.metrics.parl import GT
from persetrain.prompts.parl import MIN_RULES, RUBRIC_SCHEMA, induction_request
from persetrain.rewards.parl import RubricJudge, parse_rubric
from persetrain.schema import Judgment, RubricExample

if TYPE_CHECKING:
    from persetrain.engine import Engine


@dataclass
class PARLConfig(EvaluatorConfig):
    """How rubrics are induced and judged; every field can be set with ``--set FIELD=VALUE``."""

    #: Induction runs with seeds seed, seed+1, ... (the paper: 5); metrics report mean and std.
    runs: int = 1
    #: Sampling temperature of the rubric generator (0 decodes greedily; several runs then agree).
    temperature: float = 0.6
    top_p: float = 0.95
    #: Longest rubric set in tokens.
    max_new_tokens: int = 768
    #: Structured output (JSON array of {"rule"}); off to see what the generator writes unaided.
    structured: bool = True
    #: Tries per user when the set does not parse (later tries sample at temperature >= 0.7).
    max_tries: int = 3
    #: Consistency threshold τ: a rule is satisfied by a text when p(yes) > tau.
    tau: float = 0.5
    #: Judge model spec; None: the generator's own engine.
    judge_model: str | None = None
    judge_backend: str = "hf"
    judge_base_url: str | None = None


@dataclass
class UserRubrics:
    """One user's induced set in one run, before and after validation, with every judge score."""

    example: RubricExample
    seed: int
    raw: str
    parsed: bool
    total_rules: int
    rules: list[str]  # length-kept, before validation
    p_history: list[list[float]]  # rule -> history item
    p_targets: dict[str, list[float]]  # target -> p(yes) of each kept rule
    cost: Cost

    def valid(self, tau: float) -> list[bool]:
        return [all(p > tau for p in row) for row in self.p_history]

    def valid_rules(self, tau: float) -> list[str]:
        """The rules every history item satisfies, in order: the set the reward and Max-Diff score."""
        return [r for r, ok in zip(self.rules, self.valid(tau), strict=True) if ok]


def _judge_engine(config: PARLConfig, engine: Engine) -> Engine:
    if config.judge_model is None:
        return engine
    from persetrain.engine import load_engine

    return load_engine(config.judge_model, backend=config.judge_backend, base_url=config.judge_base_url)


def induce(
    engine: Engine, examples: Sequence[RubricExample], config: PARLConfig, seed: int, judge_engine: Engine | None = None
) -> list[UserRubrics]:
    """Induce, validate and score every user's rubric set for one run (module docstring)."""
    params = GenerationParams(
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=seed,
        json_schema=RUBRIC_SCHEMA if config.structured else None,
    )
    requests = {
        ex.id: induction_request(ex.task, [h.input for h in ex.history], [h.output for h in ex.history], id=ex.id)
        for ex in examples
    }
    # a retry's seed steps by 1000, off the seeds seed + run of the other runs
    schedule = RetrySchedule(tries=config.max_tries, temperature=0.7, seed_stride=1000)
    found = generate_parsed(
        engine,
        list(requests.values()),
        params,
        lambda text: parse_rubric(text).rules,
        schedule,
        "rubrics",
    )
    texts = {id: f.text for id, f in zip(requests, found, strict=True)}
    costs = {id: f.cost for id, f in zip(requests, found, strict=True)}

    parsed = {ex.id: parse_rubric(texts[ex.id]) for ex in examples}
    checks: list[tuple[str, str, str, str]] = []
    for ex in examples:
        rules = parsed[ex.id].rules or []
        texts_of = (
            [(h.input, h.output) for h in ex.history]
            + [(ex.input, ex.output)]
            + [(ex.input, t) for t in ex.baselines.values()]
        )
        checks += [(ex.task, r, i, t) for r in rules for i, t in texts_of]
    judge = RubricJudge(judge_engine or engine)
    before = judge.engine.cost
    scores = dict(zip(checks, judge.p_yes_many(checks), strict=True))
    judge_cost = judge.engine.cost.model_copy()
    spent = Cost(calls=judge_cost.calls - before.calls, prompt_tokens=judge_cost.prompt_tokens - before.prompt_tokens)
    out = []
    for ex in examples:
        got = parsed[ex.id]
        rules = got.rules or []
        p_history = [[scores[(ex.task, r, h.input, h.output)] for h in ex.history] for r in rules]
        targets = {GT: ex.output, **ex.baselines}
        p_targets = {name: [scores[(ex.task, r, ex.input, text)] for r in rules] for name, text in targets.items()}
        # the judge's cost is one batch: each user carries the share of its rules
        share = len(rules) / max(1, sum(len(parsed[e.id].rules or []) for e in examples))
        judge_share = Cost(calls=round(spent.calls * share), prompt_tokens=round(spent.prompt_tokens * share))
        out.append(
            UserRubrics(
                ex,
                seed,
                texts[ex.id],
                got.rules is not None,
                got.total_rules,
                rules,
                p_history,
                p_targets,
                costs[ex.id] + judge_share,
            )
        )
    return out


def valid_sets(users: Sequence[UserRubrics], tau: float) -> dict[str, list[str]]:
    """Each user's valid rules, for the users with ``MIN_RULES`` or more (the reward's bar for a set)."""
    sets = {u.example.id: u.valid_rules(tau) for u in users}
    return {user: rules for user, rules in sets.items() if len(rules) >= MIN_RULES}


def other_user_pass_rates(
    sets: Sequence[tuple[str, list[str]]], examples: Sequence[RubricExample], tau: float, judge: RubricJudge
) -> list[float]:
    """For each (user id, valid rules) set, the share of the other users' target texts on which all its rules pass.

    Why: the negatives a set is scored against are generic model outputs, so a set can separate a user from them
    by rules that fit any quirky writer; a set that is the user's own also fails on other users' texts. Lower is
    more personal. Every check of every set goes to the judge in one call; a user may give several sets (runs).
    """
    if not sets:
        return []
    by_id = {ex.id: ex for ex in examples}
    checks = [
        (by_id[user].task, rule, by_id[other].input, by_id[other].output)
        for user, rules in sets
        for other in by_id
        if other != user
        for rule in rules
    ]
    p_yes = dict(zip(checks, judge.p_yes_many(checks), strict=True))
    return [
        sum(
            all(p_yes[(by_id[user].task, r, by_id[other].input, by_id[other].output)] > tau for r in rules)
            for other in by_id
            if other != user
        )
        / (len(by_id) - 1)
        for user, rules in sets
    ]


def judgments_of(user: UserRubrics, run: int, system: str, tau: float) -> list[Judgment]:
    """One judgment per target of one user's run (module docstring)."""
    ex = user.example
    valid = user.valid(tau)
    kept = user.valid_rules(tau)
    dropped = [
        {"rule": r, "reason": "not satisfied by every history item"}
        for r, ok in zip(user.rules, valid, strict=True)
        if not ok
    ]
    out = []
    for n, (target, ps) in enumerate(user.p_targets.items()):
        p_valid = [p for p, ok in zip(ps, valid, strict=True) if ok]
        satisfied = [p > tau for p in p_valid]
        out.append(
            Judgment(
                example_id=ex.id,
                evaluator=system,
                target=target,
                parsed=user.parsed,
                score=(float(all(satisfied)) if kept else None) if user.parsed else None,
                explanation="\n".join(f"- {r}" for r in kept) if user.parsed else "rubric set did not parse",
                raw=user.raw if n == 0 else "",
                details={
                    "run": run,
                    "rules": kept,
                    "p_yes": p_valid,
                    "satisfied": satisfied,
                    "dropped": dropped,
                    "total_rules": user.total_rules,
                    "min_rules": MIN_RULES,
                },
                cost=user.cost if n == 0 else Cost(),
            )
        )
    return out


@register("parl")
class PARLEvaluator(Evaluator):
    """Rubric induction, consistency validation and all-or-nothing scoring (module docstring)."""

    tasks = ("rubric",)
    Config = PARLConfig

    def judge(self, examples: Sequence[RubricExample], engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        config: PARLConfig = self.config
        if engine is None:
            raise ValueError("the parl evaluator needs a model (the rubric generator)")
        missing = [ex.id for ex in examples if not ex.baselines]
        if missing:
            raise ValueError(
                f"examples without negatives cannot be judged by parl: {missing[:5]} (attach the "
                "outputs of generate-baselines with `persetrain prepare parl`)"
            )
        judge_engine = _judge_engine(config, engine)
        out: list[Judgment] = []
        for run in range(config.runs):
            for user in induce(engine, examples, config, context.seed + run, judge_engine):
                out += judgments_of(user, run, context.system, config.tau)
        return out

    def report(self, out: Path, examples: Sequence, judgments, metrics) -> dict[str, str]:
        lines = ["| system | coverage | rules/user | Max-Diff | user-level acc. (gt) |", "|---|---|---|---|---|"]
        for system, m in metrics.items():

            def fmt(key: str, m=m) -> str:
                v, sd = m.get(key), m.get(f"{key}_std")
                return "n/a" if v is None else f"{v:.3f}" + (f" ± {sd:.3f}" if sd is not None else "")

            lines.append(
                f"| {system} | {fmt('user_coverage')} | {fmt('avg_rules_per_user')} | {fmt('max_diff')} "
                f"| {fmt('user_acc/gt')} |"
            )
        return {"PARL rubrics": "\n".join(lines)}


def induce_to_file(
    engine: Engine, examples: Sequence[RubricExample], config: PARLConfig, out: Path, seed: int = 0
) -> Path:
    """``persetrain rubrics induce``: every user's rubric set per run, validated and scored, as JSON lines."""
    from persetrain.io import write_jsonl

    judge_engine = _judge_engine(config, engine)
    records = []
    for run in range(config.runs):
        for user in induce(engine, examples, config, seed + run, judge_engine):
            valid = user.valid(config.tau)
            records.append(
                {
                    "id": user.example.id,
                    "user_id": user.example.user_id,
                    "task": user.example.task,
                    "run": run,
                    "seed": user.seed,
                    "parsed": user.parsed,
                    "total_rules": user.total_rules,
                    "rules": user.valid_rules(config.tau),
                    "dropped": [r for r, ok in zip(user.rules, valid, strict=True) if not ok],
                    "p_history": user.p_history,
                    "satisfied": {
                        t: [p > config.tau for p, ok in zip(ps, valid, strict=True) if ok]
                        for t, ps in user.p_targets.items()
                    },
                    "p_yes": user.p_targets,
                    "raw": user.raw,
                    "cost": user.cost.model_dump(),
                }
            )
    write_jsonl(out, records)
    return out
