"""PerSE: a judge that infers one reviewer's taste from their profile and scores a new text.

Scalar (Per-MPST, Amazon): the judge writes ``[Review] ... [Score] n``. Two scores come out of one
call sequence, and both are reported:

* ``perse`` — the score parsed from the sampled text (the paper's protocol: temperature 0.8, up
  to 600 new tokens). A text without a readable score is kept as an unparsed judgment, never
  dropped, so the metrics can count it.
* ``perse-expected`` — the expectation of the score under ``choice_probs`` over "1".."10" right
  after the judge's own review and the ``[Score]`` marker: deterministic given the review, and
  free of the parsing failure mode. With ``review=False`` the marker follows the prompt directly,
  which skips generation altogether (cheapest; it asks the model to score before it explains).

Pairwise (Per-DOC): ``choice_probs`` over "Plot A"/"Plot B", asked in both orders with the plots
swapped; the two answers are averaged so that a position bias cancels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from persetrain.engine import ChatRequest, Engine, GenerationParams
from persetrain.evaluators.base import Evaluator, EvaluatorConfig, JudgeContext, register
from persetrain.evaluators.pairs import refuse_preference_rows
from persetrain.metrics import similarity_summary
from persetrain.metrics.calibration import apply_calibration, cross_fitted_quantile, linear_calibration
from persetrain.prompts.perse import (
    PAIRWISE_CHOICES,
    PAIRWISE_PROFILE_WORDS,
    PROFILE_WORDS,
    REVIEW_MARKER,
    SCORE_MARKER,
    SCORE_MAX,
    SCORE_MIN,
    pairwise_request,
    scalar_request,
)
from persetrain.schema import Judgment, PairwiseExample, ScalarExample
from persetrain.tasks import TaskKind, by_example

SCORE_CHOICES = [str(n) for n in range(SCORE_MIN, SCORE_MAX + 1)]

_SCORE_PATTERNS = [
    re.compile(re.escape(SCORE_MARKER) + r"\s*:?\s*(\d{1,2})(?:\s*/\s*10)?"),
    re.compile(r"\bscore\s*(?:is|of|:)?\s*(\d{1,2})\s*(?:/\s*10|out of 10)?", re.IGNORECASE),
    re.compile(r"\b(\d{1,2})\s*(?:/\s*10|out of 10)\b"),
]


def parse_scalar_output(text: str) -> tuple[str, int | None]:
    """Split a judge's text into (review, score); the score is None when none can be read.

    The marker form is tried first, then looser forms models produce ("Score: 7", "7/10"); only
    integers on the 1-10 scale count, and the last match wins because judges often restate.
    """
    review = text.split(SCORE_MARKER)[0].replace(REVIEW_MARKER, "").strip()
    for pattern in _SCORE_PATTERNS:
        values = [int(m.group(1)) for m in pattern.finditer(text) if SCORE_MIN <= int(m.group(1)) <= SCORE_MAX]
        if values:
            return review, values[-1]
    return review, None


@dataclass
class PerSEConfig(EvaluatorConfig):
    """How the PerSE judge is run; every field can be set with ``persetrain evaluate --set FIELD=VALUE``."""

    #: Sampling temperature of the review (the paper: 0.8; 0 decodes greedily).
    temperature: float = 0.8
    #: Longest review in tokens (the paper: 600).
    max_new_tokens: int = 600
    seed: int = 0
    #: Generate the review before scoring (the paper's protocol). False: expected score only.
    review: bool = True
    #: Words of each profile plot in the prompt. None: as the dataset was built (its build_info.json),
    #: because a judge scored on prompts cut differently from the ones it was trained on is
    #: handicapped; the prompt module's default where no build info exists.
    profile_words: int | None = None
    #: How 1-10 scores are put on a dataset with another scale (Amazon: 1-5 stars): ``linear`` needs
    #: no labels; ``quantile`` is fit by 2-fold cross-fitting so that no example's own label shapes
    #: its calibrated score.
    calibration: Literal["linear", "quantile"] = "linear"
    #: Compare the generated reviews with the reviewers' own (BLEU, ROUGE, BERTScore).
    explanation_metrics: bool = True


def judge_scalar(
    engine: Engine, examples: Sequence[ScalarExample], config: PerSEConfig | None = None, name: str = "perse"
) -> dict[str, list[Judgment]]:
    """Judgments keyed by evaluator name: ``name`` (parsed text) and ``name-expected``."""
    config = config or PerSEConfig()
    words = config.profile_words or PROFILE_WORDS
    requests = [scalar_request(ex, profile_words=words) for ex in examples]
    out: dict[str, list[Judgment]] = {}
    if config.review:
        params = GenerationParams(
            max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=config.seed
        )
        generations = engine.generate(requests, params, description=f"{name}: reviews")
        parsed = [parse_scalar_output(g.text) for g in generations]
        out[name] = [
            Judgment(
                example_id=ex.id,
                evaluator=name,
                score=score,
                explanation=review,
                raw=g.text,
                parsed=score is not None,
                cost=g.cost,
            )
            for ex, g, (review, score) in zip(examples, generations, parsed, strict=True)
        ]
        prefixes = [f"{REVIEW_MARKER} {review} {SCORE_MARKER} " for review, _ in parsed]
    else:
        prefixes = [f"{SCORE_MARKER} "] * len(examples)
    scoring = [r.model_copy(update={"assistant_prefix": p}) for r, p in zip(requests, prefixes, strict=True)]
    probs = engine.choice_probs(scoring, SCORE_CHOICES, description=f"{name}: score probabilities")
    out[f"{name}-expected"] = [
        Judgment(
            example_id=ex.id,
            evaluator=f"{name}-expected",
            score=p.expectation(),
            probs=p.probs,
            explanation=prefix.removeprefix(REVIEW_MARKER).removesuffix(f"{SCORE_MARKER} ").strip(),
            cost=p.cost,
        )
        for ex, p, prefix in zip(examples, probs, prefixes, strict=True)
    ]
    return out


def _swapped(example: PairwiseExample) -> PairwiseExample:
    return example.model_copy(
        update={
            "plot_a": example.plot_b,
            "plot_b": example.plot_a,
            "preferred": "B" if example.preferred == "A" else "A",
        }
    )


def judge_pairwise(
    engine: Engine, examples: Sequence[PairwiseExample], profile_words: int | None = None, name: str = "perse"
) -> list[Judgment]:
    """Per-aspect preference with position bias cancelled by asking in both orders."""
    profile_words = profile_words or PAIRWISE_PROFILE_WORDS
    requests: list[ChatRequest] = []
    for ex in examples:
        requests.append(pairwise_request(ex, profile_words=profile_words))
        requests.append(pairwise_request(_swapped(ex), profile_words=profile_words))
    probs = engine.choice_probs(requests, list(PAIRWISE_CHOICES), description=f"{name}: pairwise")
    a, b = PAIRWISE_CHOICES
    judgments = []
    for i, ex in enumerate(examples):
        forward, backward = probs[2 * i], probs[2 * i + 1]
        p_a = (forward.probs[a] + backward.probs[b]) / 2  # original Plot A sits in slot B when swapped
        judgments.append(
            Judgment(
                example_id=ex.id,
                evaluator=name,
                choice="A" if p_a >= 0.5 else "B",
                probs={"A": p_a, "B": 1 - p_a},
                explanation=f"P(Plot A) = {forward.probs[a]:.3f} as shown, {backward.probs[b]:.3f} swapped",
                cost=forward.cost + backward.cost,
            )
        )
    return judgments


def built_profile_words(data: Path) -> int | None:
    """The ``profile_words`` a prepared dataset's prompts were cut to (its build_info.json), if known."""
    info = Path(data) / "build_info.json"
    if not info.exists():
        return None
    return json.loads(info.read_text(encoding="utf-8")).get("params", {}).get("profile_words")


def calibrate(
    found: list[Judgment], examples: Sequence[ScalarExample], method: str
) -> tuple[list[Judgment], dict | None]:
    """Put the judge's 1-10 scores on the examples' own scale (PerSE on Amazon: 1-5 stars).

    Nothing changes on a 1-10 dataset. Elsewhere ``score`` becomes the calibrated value the
    metrics use, while ``raw`` (parsed judgments) and ``probs`` (expected) keep the judge's 1-10 answer.
    """
    scales = {ex.score_max for ex in examples}
    if len(scales) != 1:
        raise ValueError(f"examples mix score scales {sorted(scales)}; evaluate one scale at a time")
    top = scales.pop()
    if top == SCORE_MAX:
        return found, None
    ordered = by_example(examples, found)
    pred = [j.score if j.parsed else None for j in ordered]
    linear = linear_calibration((SCORE_MIN, SCORE_MAX), (1, top))
    if method == "linear":
        mapped, record = apply_calibration(linear, pred), {"method": "linear", "map": linear.to_dict()}
    elif method == "quantile":
        mapped, record = cross_fitted_quantile(
            pred, [ex.score for ex in examples], [ex.id for ex in examples], fallback=linear
        )
        record["linear_folds"] = record.pop("fallback_folds")  # PerSE's fallback is the linear map
    else:
        raise ValueError(f"unknown calibration {method!r}; use linear or quantile")
    record["scale"] = [1, top]
    updated = [j.model_copy(update={"score": m}) if m is not None else j for j, m in zip(ordered, mapped, strict=True)]
    return updated, record


@register("perse")
class PerSE(Evaluator):
    """The PerSE judge on any model: scalar (review + score, and the expected score) or pairwise."""

    tasks = ("scalar", "pairwise")
    Config = PerSEConfig

    def __init__(self, config: PerSEConfig | None = None):
        super().__init__(config)
        self._calibrations: dict[str, dict] = {}  # system -> calibration record, for the metrics

    def judge(self, examples: Sequence, engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        refuse_preference_rows(examples, "perse", "Per-DOC's pairs of plots judged on an aspect")
        config = self.config
        if config.profile_words is None:
            config = replace(config, profile_words=built_profile_words(context.data))
        if examples and isinstance(examples[0], PairwiseExample):
            return judge_pairwise(engine, examples, config.profile_words, name=context.system)
        judgments = []
        for name, found in judge_scalar(engine, examples, config, name=context.system).items():
            found, record = calibrate(found, examples, config.calibration)
            if record:
                self._calibrations[name] = record
            judgments += found
        return judgments

    def metrics(self, task: TaskKind, examples: Sequence, judgments: list[Judgment]) -> dict:
        metrics = task.metrics(examples, judgments)
        if task.name != "scalar" or not judgments:
            return metrics
        if self.config.explanation_metrics and any(j.raw for j in judgments):
            ordered = by_example(examples, judgments)
            metrics["explanation"] = similarity_summary(
                [j.explanation if j else "" for j in ordered], [ex.review for ex in examples]
            )
        if judgments[0].evaluator in self._calibrations:
            metrics["calibration"] = self._calibrations[judgments[0].evaluator]
        return metrics
