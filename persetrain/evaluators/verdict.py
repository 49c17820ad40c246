"""A think-then-verdict judge: a rationale, then ``Verdict: X`` on a last line (``persetrain prepare verdict``'s
``think`` mode).

A judge trained in ``verdict`` mode answers with the letter alone and is read by ``mcq-letter`` like any model;
one trained in ``think`` mode writes its reasoning first, so its answer is text to parse, not a next-token
distribution. This evaluator asks the very prompt it was trained on (:func:`persetrain.prompts.verdict.choice_request`
in ``think`` mode), generates, and reads the verdict exactly as the training reward does
(:func:`persetrain.rewards.verdict.parse_verdict`): a letter named anywhere but on the last line does not count, so
the evaluation measures the same thing the training rewarded.

The chosen option scores 10 and the others 0 (``details["scores"]``, the scale of the multiple-choice metrics) and
``details["parsed"]`` is the letter read; an answer without a readable last line is kept as an unparsed judgment
(choice, scores and letter None), its text as the explanation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from persetrain.engine import Engine, GenerationParams
from persetrain.engine.types import Generation
from persetrain.evaluators.base import (
    CANDIDATES,
    DataNeeds,
    Evaluator,
    EvaluatorConfig,
    JudgeContext,
    refuse_single_answer,
    refuse_unlettered,
    register,
)
from persetrain.prompts.mcq_letter import LETTERS
from persetrain.prompts.pref import SCORE_MAX
from persetrain.prompts.verdict import choice_request
from persetrain.rewards.verdict import parse_verdict
from persetrain.schema import Judgment, McqExample


@dataclass
class VerdictConfig(EvaluatorConfig):
    #: Tokens generated per answer: the rationale (at most THINK_WORDS words asked for) and the verdict line.
    max_new_tokens: int = 256
    #: Sampling temperature; 0 is greedy, the judge's single most likely answer.
    temperature: float = 0.0


@register("verdict")
class Verdict(Evaluator):
    """Generates a rationale and a ``Verdict: X`` line; the parsed letter is the choice."""

    tasks = ("mcq",)
    Config = VerdictConfig
    needs = DataNeeds(fields=(CANDIDATES,))
    option_labels = "letters"

    def judge(self, examples: Sequence[McqExample], engine: Engine | None, context: JudgeContext) -> list[Judgment]:
        config: VerdictConfig = self.config
        refuse_single_answer(examples, "verdict", context.data)
        if engine is None:
            raise ValueError("verdict needs a model")
        refuse_unlettered(examples, "verdict", len(LETTERS))
        requests = [
            choice_request(ex.preference, ex.question, ex.options, "think").model_copy(update={"id": ex.id})
            for ex in examples
        ]
        params = GenerationParams(
            max_new_tokens=config.max_new_tokens, temperature=config.temperature, seed=context.seed
        )
        generations = engine.generate(requests, params, description=f"{context.system}: verdicts")
        return [read_verdict(ex, g, context.system) for ex, g in zip(examples, generations, strict=True)]


def read_verdict(example: McqExample, generation: Generation, system: str) -> Judgment:
    """The judgment one generated answer gives: its last line's letter as the choice, the whole text kept."""
    letter = parse_verdict(generation.text, LETTERS[: len(example.options)], mode="think")
    index = None if letter is None else LETTERS.index(letter)
    scores = None if index is None else [float(SCORE_MAX if k == index else 0) for k in range(len(example.options))]
    return Judgment(
        example_id=example.id,
        evaluator=system,
        choice=None if index is None else str(index),
        parsed=index is not None,
        explanation=generation.text,
        details={"scores": scores, "parsed": letter},
        cost=generation.cost,
    )
