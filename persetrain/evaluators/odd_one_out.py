"""``odd-one-out``: picks the option least like the other options - a baseline that never reads the preference.

On PrefEval the three distractors are often near-paraphrases of one generic answer, so the option
that shares the fewest words with the others is frequently the preference-following one. A learned
judge has to beat this to show it reads the person and not the shape of the dataset. An option's
score is 10 x its ``oddness`` (1 - its mean TF-IDF cosine to the other options), so the
multiple-choice metrics read it like any judge's 0..10 scores.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine import Engine
from persetrain.evaluators.base import CANDIDATES, DataNeeds, Evaluator, JudgeContext, refuse_single_answer, register
from persetrain.metrics.mcq import strict_argmax
from persetrain.metrics.odd_one_out import oddness
from persetrain.prompts.pref import SCORE_MAX
from persetrain.schema import Judgment, McqExample


@register("odd-one-out")
class OddOneOut(Evaluator):
    """The option with the lowest mean TF-IDF cosine to the others; no model, no preference."""

    tasks = ("mcq",)
    needs_model = False
    needs = DataNeeds(fields=(CANDIDATES,))

    def judge(self, examples: Sequence[McqExample], engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        refuse_single_answer(examples, "odd-one-out", context.data)
        judgments = []
        for ex in examples:
            odd = oddness(ex.options)
            scores = [SCORE_MAX * o for o in odd]
            best = strict_argmax(scores)
            judgments.append(
                Judgment(
                    example_id=ex.id,
                    evaluator=context.system,
                    choice=None if best is None else str(best),
                    details={"scores": scores, "oddness": odd},
                    explanation="1 - mean TF-IDF cosine to the other options: "
                    + ", ".join(f"{k}: {o:.3f}" for k, o in enumerate(odd)),
                )
            )
        return judgments
