"""``rm``: a trained reward model as a judge - the scalar reward of ``rm_context(person, request) + candidate``.

The checkpoint is what ``persetrain rm`` (TRL's ``RewardTrainer``) writes: a one-label sequence
classifier on any backbone, loaded by ``persetrain.reward_model.scorer.RewardModelScorer``, never by the
engine (``uses_engine = False``). A Bradley-Terry reward has no scale of its own, only differences
mean something, so on multiple choice the options' rewards become a softmax over the options (the
probability the model gives each option of being the preferred one, x 10 for the 0..10 metrics;
the raw rewards stay in ``details["raw_scores"]``), on a pair the probability of the first is
sigmoid(r_A - r_B), and on a scalar task the reward is put on the dataset's scale by cross-fitted
quantile calibration (``calibration``). A causal LM given to ``rm`` is refused before it loads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from persetrain.engine import Cost, Engine
from persetrain.evaluators.base import JudgeContext, register
from persetrain.evaluators.learned import Item, LearnedJudge, LearnedJudgeConfig
from persetrain.prompts.pref import SCORE_MAX
from persetrain.prompts.preference import rm_context
from persetrain.reward_model.scorer import RewardModelScorer, check_reward_model


@dataclass
class RMConfig(LearnedJudgeConfig):
    #: Longest text in tokens (context + candidate); longer ones lose the start of the context. None: the model's.
    max_length: int | None = None
    #: Most tokens per forward pass, cached context included (a memory bound; batches are cut to the least padding).
    batch_tokens: int = 8192


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


@register("rm")
class RewardModelJudge(LearnedJudge):
    """Scores every candidate with a reward-model checkpoint (``--model DIR``)."""

    Config = RMConfig
    uses_engine = False

    def __init__(self, config: RMConfig | None = None):
        super().__init__(config)
        self._scorer: RewardModelScorer | None = None  # loaded once, reused by every probe of a meta-eval

    def check_model(self, model: str) -> None:
        check_reward_model(model)

    def scorer(self, model: str) -> RewardModelScorer:
        if self._scorer is None or self._scorer.spec != model:
            self._scorer = RewardModelScorer(
                model, batch_tokens=self.config.batch_tokens, max_length=self.config.max_length
            )
        return self._scorer

    def score_items(
        self, items: Sequence[Item], engine: Engine | None, context: JudgeContext
    ) -> tuple[list[float], list[Cost], list[str]]:
        if context.model is None:
            raise ValueError("rm needs a reward-model checkpoint: --evaluator rm --model DIR")
        contexts = [rm_context(it.person, it.request, it.person_label) for it in items]
        scored = self.scorer(context.model).score_detailed(
            contexts, [it.candidate for it in items], description=f"{context.system}: rewards"
        )
        return (
            [s.score for s in scored],
            [Cost(calls=1, prompt_tokens=s.tokens) for s in scored],
            ["context cut to fit the model" if s.truncated else "" for s in scored],
        )

    def unit(self, scores: Sequence[float]) -> list[float]:
        return [sigmoid(s) for s in scores]

    def share(self, scores: Sequence[float]) -> list[float]:
        """Bradley-Terry / listwise: a softmax over the candidates' rewards."""
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        return [w / sum(weights) for w in weights]

    def option_scores(self, scores: Sequence[float]) -> list[float]:
        return [SCORE_MAX * p for p in self.share(scores)]
