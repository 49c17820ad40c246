"""PREF: a personalised, reference-free judge built from a two-stage rubric (pref.txt, Algorithm 1).

1. Coverage: from the question alone, what makes a good answer, as ``{keyword: sentence}``. It
   does not depend on the user, so it is computed once per distinct question and reused.
2. User alignment: given the question, those factors and the user's preference, a weight 0..10
   for every factor plus the factors the preference needs that coverage missed (``preh_`` keys).
3. Scoring: given the question, the preference, the weighted factors and all candidate answers,
   a 0..10 score per candidate.

Every stage answers in JSON under structured output, at temperature 0 (the paper's setting). By
default stage 3 reads each candidate's score as the expected value of ``choice_probs`` over
"0".."10" after a prefix that restates the candidate - deterministic, never unparsable, and one
forward pass per candidate; ``scoring="text"`` samples the paper's JSON list of scores instead.
``variant`` selects the paper's ablations: ``base`` scores with no guideline, ``w/S1`` with the
coverage factors only. ``balance_positions`` runs stage 3 once per cyclic rotation of the candidate
list and averages each candidate's scores over the rotations, so that every candidate is scored once
in every position (balanced position calibration, Wang et al. 2023, "Large Language Models are not
Fair Evaluators"): a judge's preference for a position then adds the same to every candidate.
Output that cannot be read is retried ``max_retries`` times with sampling; what still fails is kept
as an unparsed judgment (or, for stages 1-2, recorded in ``details``). ``scorer`` hands stage 3 to a
trained judge (``rm:PATH`` or ``verifier:MODEL``, ``evaluators.scorers``) that reads the preference and
the guideline of stages 1-2 as the person.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from persetrain.engine import ChatRequest, Cost, Engine, GenerationParams
from persetrain.evaluators.base import Evaluator, EvaluatorConfig, JudgeContext, register
from persetrain.metrics.mcq import strict_argmax
from persetrain.prompts.pref import (
    ADDED_PREFIX,
    SCORE_CHOICES,
    SCORE_MAX,
    SCORE_MIN,
    alignment_request,
    alignment_schema,
    coverage_request,
    coverage_schema,
    factor_lines,
    score_prefix,
    score_request,
    scores_schema,
)
from persetrain.schema import Judgment, McqExample

if TYPE_CHECKING:
    from persetrain.tasks import TaskKind

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


def refuse_single_answer(examples: Sequence[McqExample], method: str) -> None:
    """Comparing candidates needs at least two; a one-answer list is a data error, not a score."""
    for ex in examples:
        if len(ex.options) < 2:
            raise ValueError(
                f"{method} compares candidate answers, but example {ex.id!r} has "
                f"{len(ex.options)} candidate answer; give at least two"
            )


def generate_parsed(
    engine: Engine,
    requests: Sequence[ChatRequest],
    params: Sequence[GenerationParams],
    parsers: Sequence[Callable[[str], object | None]],
    retries: int,
    temperature: float,
    description: str,
) -> list[tuple[object | None, str, Cost]]:
    """(parsed value or None, last text, cost of every attempt) per request, retrying what fails.

    ``parsers[i]`` reads request i's text (None: unreadable). Retries sample with a new seed each
    time (a greedy retry would repeat the same text).
    """
    results: list[list] = [[None, "", Cost()] for _ in requests]
    todo = list(range(len(requests)))
    for attempt in range(retries + 1):
        if not todo:
            break
        attempt_params = [
            params[i] if attempt == 0 else params[i].model_copy(update={"temperature": temperature, "seed": attempt})
            for i in todo
        ]
        label = description if attempt == 0 else f"{description} (retry {attempt})"
        generations = engine.generate([requests[i] for i in todo], attempt_params, description=label)
        failed = []
        for i, generation in zip(todo, generations, strict=True):
            value = parsers[i](generation.text)
            results[i] = [value, generation.text, results[i][2] + generation.cost]
            if value is None:
                failed.append(i)
        todo = failed
    return [tuple(r) for r in results]


def _json(text: str) -> object | None:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def parse_factors(text: str) -> dict[str, str] | None:
    obj = _json(text)
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, str) for v in obj.values()):
        return None
    return {str(k).strip(): v.strip() for k, v in obj.items()}


def parse_weights(keys: Sequence[str]) -> Callable[[str], dict[str, int] | None]:
    """Stage 2 must weigh every coverage factor; added keys must carry the ``preh_`` prefix."""

    def parse(text: str) -> dict[str, int] | None:
        obj = _json(text)
        if not isinstance(obj, dict) or any(k not in obj for k in keys):
            return None
        weights = {}
        for key, value in obj.items():
            if key not in keys and not key.startswith(ADDED_PREFIX):
                return None
            if not isinstance(value, int) or isinstance(value, bool) or not SCORE_MIN <= value <= SCORE_MAX:
                return None
            weights[key] = value
        return weights

    return parse


def parse_scores(n: int) -> Callable[[str], list[float] | None]:
    def parse(text: str) -> list[float] | None:
        obj = _json(text)
        if (
            not isinstance(obj, list)
            or len(obj) != n
            or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in obj)
            or not all(SCORE_MIN <= v <= SCORE_MAX for v in obj)
        ):
            return None
        return [float(v) for v in obj]

    return parse


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


@register("pref")
class PREF(Evaluator):
    """Scores every candidate answer of a multiple-choice question on 0..10 for the asking user."""

    tasks = ("mcq",)
    Config = PREFConfig

    def __init__(self, config: PREFConfig | None = None):
        super().__init__(config)
        self._scorer = None  # the trained stage-3 judge (config.scorer), loaded on first use

    def check_model(self, model: str) -> None:
        if self.config.scorer:
            from persetrain.evaluators.scorers import check_scorer  # imported here: the learned judges import pref

            check_scorer(self.config.scorer)

    def judge(self, examples: Sequence[McqExample], engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        config: PREFConfig = self.config
        rubrics = self.rubrics(examples, engine, context.system)
        shown, requests = stage3_inputs(examples, rubrics)
        if config.scorer:
            flat_scores, flat_costs = self._trained_stage3(examples, rubrics, context)
            flat_raws = [""] * len(examples)
        elif config.scoring == "choice_probs":
            flat_scores, flat_raws, flat_costs = score_by_probs(engine, shown, requests, context.system)
        else:
            flat_scores, flat_raws, flat_costs = score_by_text(engine, shown, requests, config, context.system)
        judgments, start = [], 0
        for ex, rubric in zip(examples, rubrics, strict=True):
            end = start + len(rubric.shifts)
            by_order = [
                _unrotate(found, shift) for found, shift in zip(flat_scores[start:end], rubric.shifts, strict=True)
            ]
            s = _average(by_order)
            raw = "\n".join(r for r in flat_raws[start:end] if r)
            cost = sum(flat_costs[start:end], Cost())
            start = end
            details = {
                "variant": config.variant,
                "scoring": config.scoring,
                "scores": s,
                "scores_by_order": by_order if len(by_order) > 1 else None,
                "factors": rubric.factors,
                "weights": rubric.weights,
                "added": {k: v for k, v in (rubric.weights or {}).items() if k.startswith(ADDED_PREFIX)},
                "notes": rubric.notes,
            }
            best = strict_argmax(s)
            judgments.append(
                Judgment(
                    example_id=ex.id,
                    evaluator=context.system,
                    choice=None if best is None else str(best),
                    raw=raw,
                    parsed=s is not None,
                    details=details,
                    explanation=_explain(rubric.guideline, s, rubric.notes),
                    cost=rubric.cost + cost,
                )
            )
        return judgments

    def metrics(self, task: TaskKind, examples: Sequence[McqExample], judgments: list[Judgment]) -> dict:
        """The task's accuracy / MSE / nDCG, plus how the rubrics went (paper, Section 5.3: additions are few)."""
        metrics = task.metrics(examples, judgments)
        details = [j.details or {} for j in judgments]
        factors = [len(d["factors"]) for d in details if d.get("factors")]
        added = [len(d["added"]) for d in details if d.get("weights") is not None]
        metrics["rubrics"] = {
            "stage1_unparsed": sum(any(n.startswith("stage 1") for n in d.get("notes", [])) for d in details),
            "stage2_unparsed": sum(any(n.startswith("stage 2") for n in d.get("notes", [])) for d in details),
            "mean_factors": sum(factors) / len(factors) if factors else None,
            "mean_added": sum(added) / len(added) if added else None,
        }
        return metrics

    def report(
        self,
        out: Path,
        examples: Sequence[McqExample],
        judgments: Mapping[str, list[Judgment]],
        metrics: Mapping[str, dict],
    ) -> dict[str, str]:
        """One example rubric per system, with the scores it led to."""
        sections = {}
        for system, found in judgments.items():
            if found:
                rubric = metrics[system].get("rubrics", {})
                sections[f"PREF rubric: {system}"] = (
                    f"Stage 1 unparsed: {rubric.get('stage1_unparsed')}, stage 2 unparsed: "
                    f"{rubric.get('stage2_unparsed')}; mean factors {rubric.get('mean_factors')}, mean preh_ "
                    f"additions {rubric.get('mean_added')}.\n\nExample `{found[0].example_id}`:\n\n```\n"
                    f"{found[0].explanation}\n```"
                )
        return sections

    def rubrics(self, examples: Sequence[McqExample], engine: Engine | None, system: str = "pref") -> list[Rubric]:
        """Stages 1-2 (as the variant asks) and the stage-3 request of every example."""
        config: PREFConfig = self.config
        refuse_single_answer(examples, "PREF")
        if engine is None:
            raise ValueError("PREF needs a model")
        costs = [Cost() for _ in examples]
        factors: list[dict[str, str] | None] = [None] * len(examples)
        weights: list[dict[str, int] | None] = [None] * len(examples)
        notes: list[list[str]] = [[] for _ in examples]
        if config.variant != "base":
            factors = self._coverage(engine, examples, costs, notes, system)
        if config.variant == "full":
            weights = self._alignment(engine, examples, factors, costs, notes, system)
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

    def _trained_stage3(
        self, examples: Sequence[McqExample], rubrics: Sequence[Rubric], context: JudgeContext
    ) -> tuple[list[list[float]], list[Cost]]:
        """Stage 3 by the configured trained judge (``scorer``), loaded once per evaluator."""
        # Imported here: the learned judges import this module (refuse_single_answer).
        from persetrain.evaluators.learned import Item
        from persetrain.evaluators.scorers import TrainedScorer, grouped_scores
        from persetrain.prompts.preference import PERSON_LABELS

        if self._scorer is None:
            self._scorer = TrainedScorer(self.config.scorer)
        groups = []
        for ex, rubric in zip(examples, rubrics, strict=True):
            person = ex.preference + (f"\nGuideline:\n{rubric.guideline}" if rubric.guideline else "")
            groups.append(
                [
                    Item(
                        ex.id,
                        str(k),
                        person if ex.preference.strip() else None,
                        PERSON_LABELS["preference"],
                        ex.question,
                        option,
                    )
                    for k, option in enumerate(ex.options)
                ]
            )
        raw, costs = grouped_scores(self._scorer, groups, context)
        return [self._scorer.judge.option_scores(r) for r in raw], costs

    # ------------------------------------------------------------------ stage 1: coverage
    def _coverage(self, engine, examples, costs, notes, system) -> list[dict[str, str] | None]:
        """One guideline per distinct question; its cost is booked on the first example asking it."""
        config: PREFConfig = self.config
        questions = list(dict.fromkeys(ex.question for ex in examples))
        params = GenerationParams(max_new_tokens=config.max_new_tokens, json_schema=coverage_schema())
        found = generate_parsed(
            engine,
            [coverage_request(q) for q in questions],
            [params] * len(questions),
            [parse_factors] * len(questions),
            config.max_retries,
            config.retry_temperature,
            f"{system}: stage 1 (coverage)",
        )
        by_question = dict(zip(questions, found, strict=True))
        first = {}
        for i, ex in enumerate(examples):
            first.setdefault(ex.question, i)
        result = []
        for i, ex in enumerate(examples):
            value, _, cost = by_question[ex.question]
            if first[ex.question] == i:
                costs[i] = costs[i] + cost
            if value is None:
                notes[i].append(f"stage 1 unparsed after {config.max_retries} retries: scored without factors")
            result.append(value)
        return result

    # ------------------------------------------------------------ stage 2: user alignment
    def _alignment(self, engine, examples, factors, costs, notes, system) -> list[dict[str, int] | None]:
        config: PREFConfig = self.config
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
            config.max_retries,
            config.retry_temperature,
            f"{system}: stage 2 (user alignment)",
        )
        result: list[dict[str, int] | None] = [None] * len(examples)
        for i, (value, _, cost) in zip(todo, found, strict=True):
            costs[i] = costs[i] + cost
            if value is None:
                notes[i].append(f"stage 2 unparsed after {config.max_retries} retries: factors shown unweighted")
            result[i] = value
        return result


def _explain(guideline: str | None, scores: list[float] | None, notes: list[str]) -> str:
    """The rubric the scores came from, then the scores, then anything that went wrong."""
    parts = [f"Guideline:\n{guideline}" if guideline else "No guideline (direct scoring)."]
    parts.append(
        "Scores: "
        + (", ".join(f"{k + 1}: {s:.2f}" for k, s in enumerate(scores)) if scores is not None else "unreadable")
    )
    return "\n".join(parts + notes)


def stage3_inputs(
    examples: Sequence[McqExample], rubrics: Sequence[Rubric]
) -> tuple[list[list[str]], list[ChatRequest]]:
    """Every stage-3 request of ``rubrics``, flat, with the candidate list each one shows (in its order)."""
    shown = [rotate(ex.options, shift) for ex, r in zip(examples, rubrics, strict=True) for shift in r.shifts]
    return shown, [request for r in rubrics for request in r.requests]


def _unrotate(scores: list[float] | None, shift: int) -> list[float] | None:
    """Scores in shown order back in candidate order (shown position p holds candidate ``(p + shift) % n``)."""
    if scores is None:
        return None
    return [scores[(k - shift) % len(scores)] for k in range(len(scores))]


def _average(by_order: list[list[float] | None]) -> list[float] | None:
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
        config.max_retries,
        config.retry_temperature,
        f"{system}: stage 3 (scores)",
    )
    return [f[0] for f in found], [f[1] for f in found], [f[2] for f in found]
