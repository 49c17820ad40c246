"""Zero-shot letter choice: the PrefEval baseline PREF must beat (PrefEval's "zero-shot" setting).

The user's preference, the question and the options as A, B, C, ... go into one prompt; the model's
next-token distribution over the letters (``choice_probs``) is the judgment. An option's score is
10 x its probability, so the multiple-choice metrics (accuracy, MSE on 0..10, nDCG) read it like
any other judge's scores.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine import Engine
from persetrain.evaluators.base import (
    CANDIDATES,
    DataNeeds,
    Evaluator,
    JudgeContext,
    refuse_single_answer,
    refuse_unlettered,
    register,
)
from persetrain.metrics.mcq import strict_argmax
from persetrain.prompts.mcq_letter import LETTERS, letter_request
from persetrain.prompts.pref import SCORE_MAX
from persetrain.schema import Judgment, McqExample


@register("mcq-letter")
class McqLetter(Evaluator):
    """Reads which option letter the model would answer with."""

    tasks = ("mcq",)
    option_labels = "letters"
    needs = DataNeeds(fields=(CANDIDATES,))

    def judge(self, examples: Sequence[McqExample], engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        refuse_single_answer(examples, "mcq-letter", context.data)
        if engine is None:
            raise ValueError("mcq-letter needs a model")
        refuse_unlettered(examples, "mcq-letter", len(LETTERS))
        judgments: list[Judgment | None] = [None] * len(examples)
        # One choice set per number of options (PrefEval always has four).
        for n in sorted({len(ex.options) for ex in examples}):
            idx = [i for i, ex in enumerate(examples) if len(ex.options) == n]
            letters = list(LETTERS[:n])
            requests = [
                letter_request(examples[i].preference, examples[i].question, examples[i].options, id=examples[i].id)
                for i in idx
            ]
            for i, p in zip(
                idx, engine.choice_probs(requests, letters, description=f"{context.system}: letters"), strict=True
            ):
                scores = [SCORE_MAX * p.probs[letter] for letter in letters]
                best = strict_argmax(scores)
                judgments[i] = Judgment(
                    example_id=examples[i].id,
                    evaluator=context.system,
                    probs=p.probs,
                    choice=None if best is None else str(best),
                    details={"scores": scores},
                    cost=p.cost,
                    explanation="P(letter): " + ", ".join(f"{k} {v:.3f}" for k, v in p.probs.items()),
                )
        return judgments
