"""PREF's stages over a batch (the method is described in ``evaluators.pref``): its configuration, stages 1-2
building each example's rubric, and stage 3 scoring the candidates from ``choice_probs`` or sampled JSON.

The evaluator class (``evaluators.pref.PREF``) only strings these together, so that a benchmark can time one
stage on its own (``benchmarks/evaluators.py`` runs stage 3 both ways on the same rubrics).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from persetrain.engine import ChatRequest, Cost, Engine, GenerationParams
from persetrain.engine.retry import RetrySchedule, generate_parsed
from persetrain.evaluators.base import EvaluatorConfig
from persetrain.evaluators.pref_parsing import parse_factors, parse_scores, parse_weights
from persetrain.prompts.pref import (
    SCORE_CHOICES,
    alignment_request,
    alignment_schema,
    coverage_request,
    coverage_schema,
    factor_lines,
    score_prefix,
    score_request,
    scores_schema,
)
from persetrain.schema import McqExample

Variant = Literal["full", "w/S1", "base"]


@dataclass
class PREFConfig(EvaluatorConfig):
    #: ``full`` (coverage + user alignment), ``w/S1`` (coverage only) or ``base`` (no guideline).
    variant: Variant = "full"
    #: Stage 3 from ``choice_probs`` (expected 0..10 score per candidate) or from sampled JSON ``text``.
    scoring: Literal["choice_probs", "text"] = "choice_probs"
    #: Token budget of each JSON answer (stages 1-2, and stage 3 with ``scoring="text"``).
    max_new_tokens: int = 256
    #: Extra attempts, with sampling, for an answer that does not parse; then it is kept as unparsed.
    max_retries: int = 2
    #: Sampling temperature of the retries (the first attempt is greedy).
    retry_temperature: float = 0.7
    #: Score every candidate once in every position (one stage-3 pass per cyclic rotation of the list,
    #: scores averaged per candidate); off is the paper's single order, at 1/n of stage 3's cost.
    balance_positions: bool = True
    #: A trained judge for stage 3 in place of the model's own 0..10 score: ``rm:PATH`` (a reward model) or
    #: ``verifier:MODEL`` (p(yes)). It reads the preference followed by the stage 1-2 guideline as the person,
    #: one candidate at a time (so no rotations are needed); ``variant=base`` leaves it the plain trained judge.
    scorer: str | None = None

    def retries(self) -> RetrySchedule:
        """The first attempt greedy, then ``max_retries`` samples at ``retry_temperature`` (seeds 1, 2, ...)."""
        return RetrySchedule(tries=self.max_retries + 1, temperature=self.retry_temperature)


def rotate(options: Sequence[str], shift: int) -> list[str]:
    """The candidate list shown in rotation ``shift``: position p holds candidate ``(p + shift) % n``."""
    return [*options[shift:], *options[:shift]]


@dataclass
class Rubric:
    """What stages 1-2 produced for one example, and its stage-3 requests: one per candidate order."""

    factors: dict[str, str] | None
    weights: dict[str, int] | None
    guideline: str | None
    shifts: list[int]
    requests: list[ChatRequest]
    notes: list[str]
    cost: Cost


def build_rubrics(
    examples: Sequence[McqExample], engine: Engine, config: PREFConfig, system: str = "pref"
) -> list[Rubric]:
    """Stages 1-2 (as the variant asks) and the stage-3 requests of every example."""
    costs = [Cost() for _ in examples]
    factors: list[dict[str, str] | None] = [None] * len(examples)
    weights: list[dict[str, int] | None] = [None] * len(examples)
    notes: list[list[str]] = [[] for _ in examples]
    if config.variant != "base":
        factors = _coverage(engine, examples, config, costs, notes, system)
    if config.variant == "full":
        weights = _alignment(engine, examples, factors, config, costs, notes, system)
    rubrics = []
    for ex, f, w, n, c in zip(examples, factors, weights, notes, costs, strict=True):
        guideline = None if config.variant == "base" else factor_lines(f or {}, w)
        shifts = list(range(len(ex.options))) if config.balance_positions and not config.scorer else [0]
        requests = [
            score_request(
                ex.question, ex.preference, rotate(ex.options, shift), guideline, weighted=w is not None, id=ex.id
            )
            for shift in shifts
        ]
        rubrics.append(Rubric(f, w, guideline, shifts, requests, n, c))
    return rubrics


def _coverage(engine, examples, config: PREFConfig, costs, notes, system) -> list[dict[str, str] | None]:
    """Stage 1: one guideline per distinct question; its cost is booked on the first example asking it."""
    questions = list(dict.fromkeys(ex.question for ex in examples))
    params = GenerationParams(max_new_tokens=config.max_new_tokens, json_schema=coverage_schema())
    found = generate_parsed(
        engine,
        [coverage_request(q) for q in questions],
        [params] * len(questions),
        [parse_factors] * len(questions),
        config.retries(),
        f"{system}: stage 1 (coverage)",
    )
    by_question = dict(zip(questions, found, strict=True))
    first = {}
    for i, ex in enumerate(examples):
        first.setdefault(ex.question, i)
    result = []
    for i, ex in enumerate(examples):
        value, cost = by_question[ex.question].value, by_question[ex.question].cost
        if first[ex.question] == i:
            costs[i] = costs[i] + cost
        if value is None:
            notes[i].append(f"stage 1 unparsed after {config.max_retries} retries: scored without factors")
        result.append(value)
    return result


def _alignment(engine, examples, factors, config: PREFConfig, costs, notes, system) -> list[dict[str, int] | None]:
    """Stage 2: the user's weight of every factor, for the examples whose stage 1 was read."""
    todo = [i for i, f in enumerate(factors) if f]
    requests = [
        alignment_request(examples[i].question, factors[i], examples[i].preference, id=examples[i].id) for i in todo
    ]
    params = [
        GenerationParams(max_new_tokens=config.max_new_tokens, json_schema=alignment_schema(list(factors[i])))
        for i in todo
    ]
    found = generate_parsed(
        engine,
        requests,
        params,
        [parse_weights(list(factors[i])) for i in todo],
        config.retries(),
        f"{system}: stage 2 (user alignment)",
    )
    result: list[dict[str, int] | None] = [None] * len(examples)
    for i, (value, _, cost, _) in zip(todo, found, strict=True):
        costs[i] = costs[i] + cost
        if value is None:
            notes[i].append(f"stage 2 unparsed after {config.max_retries} retries: factors shown unweighted")
        result[i] = value
    return result


def stage3_inputs(
    examples: Sequence[McqExample], rubrics: Sequence[Rubric]
) -> tuple[list[list[str]], list[ChatRequest]]:
    """Every stage-3 request of ``rubrics``, flat, with the candidate list each one shows (in its order)."""
    shown = [rotate(ex.options, shift) for ex, r in zip(examples, rubrics, strict=True) for shift in r.shifts]
    return shown, [request for r in rubrics for request in r.requests]


def unrotate(scores: list[float] | None, shift: int) -> list[float] | None:
    """Scores in shown order back in candidate order (shown position p holds candidate ``(p + shift) % n``)."""
    if scores is None:
        return None
    return [scores[(k - shift) % len(scores)] for k in range(len(scores))]


def average(by_order: list[list[float] | None]) -> list[float] | None:
    """Each candidate's mean score over the orders that were read; None when none was."""
    read = [scores for scores in by_order if scores is not None]
    return [sum(column) / len(read) for column in zip(*read, strict=True)] if read else None


def score_by_probs(
    engine: Engine, shown: Sequence[list[str]], requests: Sequence[ChatRequest], system: str = "pref"
) -> tuple[list[list[float]], list[str], list[Cost]]:
    """Stage 3 from ``choice_probs``: each candidate's expected 0..10 score after a prefix restating it.

    ``shown[i]`` is the candidate list request i shows, in its order; scores come back in that order.
    The candidates of one request share the whole prompt, so the engine scores them from one shared
    prefix; nothing is sampled and nothing can fail to parse. Why restate the candidate: named by its number
    alone ("Score of candidate 2 (0-10): "), the embedded model's four scores of a question came out within
    0.02 of each other, position noise (flip rate 0.79 on 24 dev questions; restated, 0.0 on 12 of them),
    though stage 3 then ran at 1.43x the sampled path instead of 0.88x.
    """
    flat = [
        request.model_copy(update={"assistant_prefix": score_prefix(k, option)})
        for options, request in zip(shown, requests, strict=True)
        for k, option in enumerate(options)
    ]
    probs = engine.choice_probs(flat, list(SCORE_CHOICES), description=f"{system}: stage 3 (scores)")
    scores, costs, start = [], [], 0
    for options in shown:
        mine = probs[start : start + len(options)]
        start += len(options)
        scores.append([p.expectation() for p in mine])
        costs.append(sum((p.cost for p in mine), Cost()))
    return scores, [""] * len(shown), costs


def score_by_text(
    engine: Engine,
    shown: Sequence[list[str]],
    requests: Sequence[ChatRequest],
    config: PREFConfig,
    system: str = "pref",
) -> tuple[list[list[float] | None], list[str], list[Cost]]:
    """Stage 3 as the paper runs it: one sampled JSON list of scores per request (greedy, then retries)."""
    params = [
        GenerationParams(max_new_tokens=config.max_new_tokens, json_schema=scores_schema(len(options)))
        for options in shown
    ]
    found = generate_parsed(
        engine,
        requests,
        params,
        [parse_scores(len(options)) for options in shown],
        config.retries(),
        f"{system}: stage 3 (scores)",
    )
    return [f.value for f in found], [f.text for f in found], [f.cost for f in found]
