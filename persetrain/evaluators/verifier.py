"""``verifier``: a causal LM asked, per candidate, whether it follows what the person wants; the score is p(yes).

The question is the ``VERIFIER`` chat prompt that ``persetrain prepare preference`` writes as SFT
data for ``persetrain sft`` (``VERIFIER_BLIND`` when the blind probe removed the person), read back
through the engine's ``choice_probs`` over both spellings of yes and no (``persetrain.prompts.yes_no``: p(yes)
sums its two spellings): one call for every candidate of every
example, batched and cached by the engine, exact and never unparsable. Any engine model works (an
untrained instruct model is the zero-shot verifier); a reward-model checkpoint is refused before it
loads. p(yes) is a pointwise score: x 10 for the multiple-choice metrics, the higher of two for a
pair, linearly onto the dataset's scale for a scalar task (``calibration``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from persetrain.engine import ChatRequest, Cost, Engine
from persetrain.evaluators.base import JudgeContext, register
from persetrain.evaluators.learned import Calibration, Item, LearnedJudge, LearnedJudgeConfig
from persetrain.models import check_causal_lm
from persetrain.prompts.preference import VERIFIER, VERIFIER_BLIND
from persetrain.prompts.yes_no import CHOICES, p_yes


@dataclass
class VerifierConfig(LearnedJudgeConfig):
    #: p(yes) is on 0..1 already, so the label-free linear map is the default here.
    calibration: Calibration = "linear"


def verifier_request(item: Item) -> ChatRequest:
    """The yes/no question about one candidate, with the person or (blind probe) without."""
    if item.person is None:
        return VERIFIER_BLIND.render(id=item.example_id, request=item.request, candidate=item.candidate)
    return VERIFIER.render(
        id=item.example_id,
        person_label=item.person_label,
        person=item.person,
        request=item.request,
        candidate=item.candidate,
    )


@register("verifier")
class Verifier(LearnedJudge):
    """p(yes) of a (fine-tuned) causal LM for every candidate."""

    Config = VerifierConfig

    def check_model(self, model: str) -> None:
        check_causal_lm(model, "the verifier (p(yes) of a causal LM)")

    def score_items(
        self, items: Sequence[Item], engine: Engine | None, context: JudgeContext
    ) -> tuple[list[float], list[Cost], list[str]]:
        if engine is None:
            raise ValueError("verifier needs a model")
        probs = engine.choice_probs(
            [verifier_request(it) for it in items], CHOICES, description=f"{context.system}: p(yes)"
        )
        return [p_yes(p.probs) for p in probs], [p.cost for p in probs], [""] * len(items)

    def unit(self, scores: Sequence[float]) -> list[float]:
        return list(scores)
