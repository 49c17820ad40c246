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

This module is the evaluator; the stages and their configuration are in ``evaluators.pref_stages``, the
reading of their JSON answers in ``evaluators.pref_parsing``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from persetrain.engine import Cost, Engine
from persetrain.evaluators.base import CANDIDATES, DataNeeds, JudgeContext, refuse_single_answer, register
from persetrain.evaluators.learned import Item
from persetrain.evaluators.pairs import is_pairs, judge_pairs, refuse_plot_pairs
from persetrain.evaluators.pref_stages import (
    PREFConfig,
    Rubric,
    average,
    build_rubrics,
    score_by_probs,
    score_by_text,
    stage3_inputs,
    unrotate,
)
from persetrain.evaluators.scorers import WithTrainedScorer, grouped_scores
from persetrain.metrics.mcq import strict_argmax
from persetrain.prompts.pref import ADDED_PREFIX
from persetrain.prompts.preference import PERSON_LABELS
from persetrain.schema import Judgment, McqExample

if TYPE_CHECKING:
    from persetrain.tasks import TaskKind


@register("pref")
class PREF(WithTrainedScorer):
    """Scores every candidate answer of a multiple-choice question on 0..10 for the asking user."""

    #: ``pairwise``: preference rows, judged as two-option questions (``persetrain.evaluators.pairs``).
    tasks = ("mcq", "pairwise")
    Config = PREFConfig
    needs = DataNeeds(fields=(CANDIDATES,))
    option_labels = "numbers"

    def judge(self, examples: Sequence[McqExample], engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        if is_pairs(examples):
            return judge_pairs(lambda questions: self.judge(questions, engine, context), examples)
        refuse_plot_pairs(examples, "pref")
        config: PREFConfig = self.config
        refuse_single_answer(examples, "PREF", context.data)
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
                unrotate(found, shift) for found, shift in zip(flat_scores[start:end], rubric.shifts, strict=True)
            ]
            s = average(by_order)
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
        if engine is None:
            raise ValueError("PREF needs a model")
        return build_rubrics(examples, engine, self.config, system)

    def _trained_stage3(
        self, examples: Sequence[McqExample], rubrics: Sequence[Rubric], context: JudgeContext
    ) -> tuple[list[list[float]], list[Cost]]:
        """Stage 3 by the configured trained judge (``scorer``), loaded once per evaluator."""
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
        scorer = self.trained_scorer()
        raw, costs = grouped_scores(scorer, groups, context)
        return [scorer.judge.option_scores(r) for r in raw], costs


def _explain(guideline: str | None, scores: list[float] | None, notes: list[str]) -> str:
    """The rubric the scores came from, then the scores, then anything that went wrong."""
    parts = [f"Guideline:\n{guideline}" if guideline else "No guideline (direct scoring)."]
    parts.append(
        "Scores: "
        + (", ".join(f"{k + 1}: {s:.2f}" for k, s in enumerate(scores)) if scores is not None else "unreadable")
    )
    return "\n".join(parts + notes)
