"""What the trained judges (``rm``, ``verifier``) share: the items they score and the judgments they make of them.

A learned judge scores one candidate at a time for one person and request, with the wording of
``persetrain.prompts.preference`` that ``persetrain prepare preference`` trains it on:

* ``mcq`` (PrefEval): the stated preference, the question, every option;
* ``scalar`` (Per-MPST, Amazon): the reviewer's profile (``reviews_person``), ``PLOT_REQUEST``, the query plot;
* ``pairwise`` (Per-DOC): the annotator's earlier choices, the premise and the aspect's question, both plots;
* ``pairwise`` (preference rows): the row's person (``person_of``), its prompt, both responses;
* ``reference``: the user's latest earlier texts (``texts_person``), the task input, every system's output.

A subclass computes one raw score per item (a reward, or p(yes)); this module turns them into each
task kind's judgments: the option with the strictly highest score (the scores on 0..10 in
``details["scores"]``, every raw score kept), the higher of two plots, a score on the dataset's own
scale (``calibration``), or one score per generator output. An example whose person the blind probe
removed (``persetrain.person``) is scored with the person-blind form of the prompt.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from persetrain.engine import Cost, Engine
from persetrain.evaluators.base import (
    CANDIDATES,
    DataNeeds,
    Evaluator,
    EvaluatorConfig,
    JudgeContext,
    refuse_single_answer,
)
from persetrain.metrics.calibration import apply_calibration, cross_fitted_quantile, linear_calibration
from persetrain.metrics.mcq import strict_argmax
from persetrain.person import has_person
from persetrain.prompts.perse import ASPECT_QUESTIONS, PAIRWISE_PROFILE_WORDS, PROFILE_WORDS, truncate_words
from persetrain.prompts.pref import SCORE_MAX
from persetrain.prompts.preference import PERSON_LABELS, PLOT_REQUEST, reviews_person, texts_person
from persetrain.schema import (
    Judgment,
    McqExample,
    PairwiseExample,
    PairwiseProfileItem,
    PreferencePairExample,
    ReferenceExample,
    ScalarExample,
)

if TYPE_CHECKING:
    from persetrain.tasks import TaskKind

Calibration = Literal["quantile", "linear", "none"]


@dataclass(frozen=True)
class Item:
    """One candidate to score: whose example, which candidate (option index, "A"/"B", a system), and the texts.

    ``person`` is None when the example's person was removed (the blind probe).
    """

    example_id: str
    target: str
    person: str | None
    person_label: str
    request: str
    candidate: str


@dataclass
class LearnedJudgeConfig(EvaluatorConfig):
    #: Earlier texts of a reference-task user shown as the person (``prepare preference --profile-items``).
    profile_items: int = 3
    #: Words kept of each profile item (``prepare preference --profile-words``); a Per-DOC annotator's earlier
    #: plots keep 100, as PerSE's pairwise judge shows them.
    profile_words: int = PROFILE_WORDS
    #: Scalar tasks: how a raw score lands on the dataset's scale. ``quantile``: fit on the labels by 2-fold
    #: cross-fitting (no example's own label shapes its score); ``linear``: the judge's 0..1 score mapped
    #: onto 1..score_max (no labels); ``none``: the raw score (rank correlations are unchanged by either map).
    calibration: Calibration = "quantile"


def pairwise_person(profile: Sequence[PairwiseProfileItem], words: int = PAIRWISE_PROFILE_WORDS) -> str:
    """A Per-DOC annotator as the person: each earlier pair of plots and which one they preferred on which aspect."""
    pairs: dict[tuple[str, str, str], list[str]] = {}
    for item in profile:
        pairs.setdefault((item.premise, item.plot_a, item.plot_b), []).append(f"{item.aspect}: Plot {item.preferred}")
    return "\n\n".join(
        f"Premise: {premise}\nPlot A: {truncate_words(a, words)}\nPlot B: {truncate_words(b, words)}\n"
        f"Preferred: {'; '.join(choices)}"
        for (premise, a, b), choices in pairs.items()
    )


def items_of(examples: Sequence, config: LearnedJudgeConfig) -> list[Item]:
    """Every candidate of every example, with the person, label and request the judge was trained to read."""
    items: list[Item] = []
    profile = PERSON_LABELS["profile"]
    for ex in examples:
        known = has_person(ex)
        if isinstance(ex, McqExample):
            items += [
                Item(ex.id, str(k), ex.preference if known else None, PERSON_LABELS["preference"], ex.question, option)
                for k, option in enumerate(ex.options)
            ]
        elif isinstance(ex, ScalarExample):
            person = reviews_person(ex.profile, ex.score_max, config.profile_words) if known else None
            items.append(Item(ex.id, "", person, profile, PLOT_REQUEST, ex.query_plot))
        elif isinstance(ex, PairwiseExample):
            person = pairwise_person(ex.profile) if known else None
            request = f"{ex.premise}\n{ASPECT_QUESTIONS[ex.aspect]}"
            items += [
                Item(ex.id, side, person, profile, request, plot) for side, plot in (("A", ex.plot_a), ("B", ex.plot_b))
            ]
        elif isinstance(ex, PreferencePairExample):
            person = ex.person if known else None
            items += [
                Item(ex.id, side, person, ex.person_label, ex.prompt, text)
                for side, text in (("A", ex.response_a), ("B", ex.response_b))
            ]
        elif isinstance(ex, ReferenceExample):
            person = texts_person(ex.profile[-config.profile_items :], config.profile_words) if known else None
            items += [Item(ex.id, system, person, profile, ex.input, text) for system, text in ex.outputs.items()]
        else:
            raise ValueError(f"a learned judge cannot judge a {type(ex).__name__}")
    return items


class LearnedJudge(Evaluator):
    """Scores every candidate with a trained model; subclasses say how one item is scored."""

    tasks = ("mcq", "pairwise", "scalar", "reference")
    needs = DataNeeds(fields=(CANDIDATES,))
    Config = LearnedJudgeConfig

    def __init__(self, config: LearnedJudgeConfig | None = None):
        super().__init__(config)
        self._calibrations: dict[str, dict] = {}  # system -> how its scalar scores were calibrated

    @abstractmethod
    def score_items(
        self, items: Sequence[Item], engine: Engine | None, context: JudgeContext
    ) -> tuple[list[float], list[Cost], list[str]]:
        """A raw score, its cost and a short note (e.g. "context cut to fit") per item."""

    @abstractmethod
    def unit(self, scores: Sequence[float]) -> list[float]:
        """Raw scores on 0..1, read as the probability that a candidate is good for the person."""

    def share(self, scores: Sequence[float]) -> list[float]:
        """How the judge splits its preference among one example's candidates (sums to 1)."""
        unit = self.unit(scores)
        total = sum(unit)
        return [u / total for u in unit] if total > 0 else [1 / len(unit)] * len(unit)

    def option_scores(self, scores: Sequence[float]) -> list[float]:
        """One question's option scores on the multiple-choice metrics' 0..10: each option judged on its own."""
        return [SCORE_MAX * u for u in self.unit(scores)]

    def judge(self, examples: Sequence, engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        if examples and isinstance(examples[0], McqExample):
            refuse_single_answer(examples, self.name, context.data)
        items = items_of(examples, self.config)
        scores, costs, notes = self.score_items(items, engine, context)
        mine: dict[str, list[int]] = {}
        for k, item in enumerate(items):
            mine.setdefault(item.example_id, []).append(k)
        judgments = []
        for ex in examples:
            ks = mine[ex.id]
            judgments += self._judgments(
                ex,
                [items[k] for k in ks],
                [scores[k] for k in ks],
                [costs[k] for k in ks],
                [notes[k] for k in ks],
                context.system,
            )
        if examples and isinstance(examples[0], ScalarExample):
            return self._calibrated(judgments, examples, context.system)
        return judgments

    def _judgments(
        self, ex, items: list[Item], raw: list[float], costs: list[Cost], notes: list[str], system: str
    ) -> list[Judgment]:
        """The example's judgment(s): one per question or pair, one per scalar example, one per reference output."""
        note = "".join(f"; {n}" for n in dict.fromkeys(notes) if n)
        blind = "" if items[0].person is not None else " (person-blind prompt)"
        if isinstance(ex, McqExample | PairwiseExample | PreferencePairExample):
            if isinstance(ex, McqExample):
                ten = self.option_scores(raw)
                best = strict_argmax(ten)
                choice, probs, details = None if best is None else str(best), None, {"scores": ten, "raw_scores": raw}
            else:
                p_a = self.share(raw)[0]
                choice = "A" if raw[0] > raw[1] else "B" if raw[1] > raw[0] else None
                probs, details = {"A": p_a, "B": 1 - p_a}, {"raw_scores": raw}
            listed = ", ".join(f"{item.target}: {score:.3f}" for item, score in zip(items, raw, strict=True))
            return [
                Judgment(
                    example_id=ex.id,
                    evaluator=system,
                    choice=choice,
                    probs=probs,
                    details=details,
                    cost=sum(costs, Cost()),
                    explanation=f"raw scores {listed}{blind}{note}",
                )
            ]
        return [
            Judgment(
                example_id=ex.id,
                evaluator=system,
                target=item.target or None,
                score=score,
                cost=cost,
                details={"raw_score": score},
                explanation=f"raw score {score:.3f}{blind}" + (f"; {n}" if n else ""),
            )
            for item, score, cost, n in zip(items, raw, costs, notes, strict=True)
        ]

    def _calibrated(self, judgments: list[Judgment], examples: Sequence[ScalarExample], system: str) -> list[Judgment]:
        """Scalar scores on the dataset's scale (``LearnedJudgeConfig.calibration``); the raw score stays in details."""
        scales = {ex.score_max for ex in examples}
        if len(scales) != 1:
            raise ValueError(f"examples mix score scales {sorted(scales)}; evaluate one scale at a time")
        top = scales.pop()
        raw = [j.score for j in judgments]
        method = self.config.calibration
        if method == "none":
            return judgments
        if method == "linear":
            linear = linear_calibration((0.0, 1.0), (1.0, float(top)))
            mapped, record = apply_calibration(linear, self.unit(raw)), {"method": "linear", "map": linear.to_dict()}
        elif method == "quantile":
            mapped, record = cross_fitted_quantile(raw, [ex.score for ex in examples], [ex.id for ex in examples])
        else:
            raise ValueError(f"unknown calibration {method!r}; use quantile, linear or none")
        self._calibrations[system] = {**record, "scale": [1, top]}
        return [j.model_copy(update={"score": m}) for j, m in zip(judgments, mapped, strict=True)]

    def metrics(self, task: TaskKind, examples: Sequence, judgments: list[Judgment]) -> dict:
        metrics = task.metrics(examples, judgments)
        if judgments and judgments[0].evaluator in self._calibrations:
            metrics["calibration"] = self._calibrations[judgments[0].evaluator]
        return metrics
