"""A trained judge as another method's scorer: ``rm:PATH`` (a reward model) or ``verifier:PATH`` (p(yes)).

PREF's stage 3 and AuPEL's comparisons ask an LLM to score or compare candidates; given
``scorer: "rm:PATH"`` or ``scorer: "verifier:PATH"`` in their config, they ask the trained judge
instead, with the person and the request it was trained to read (``evaluators.learned.Item``).
The checkpoint is checked for its kind before it loads (a causal LM given as ``rm:``, a reward model
as ``verifier:``), and loaded once per evaluator: every probe of a meta-eval reuses it.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine import Cost
from persetrain.evaluators.base import Evaluator, EvaluatorConfig, JudgeContext
from persetrain.evaluators.learned import Item, LearnedJudge
from persetrain.evaluators.rm import RewardModelJudge
from persetrain.evaluators.verifier import Verifier

KINDS: dict[str, type[LearnedJudge]] = {"rm": RewardModelJudge, "verifier": Verifier}


def parse_scorer(spec: str) -> tuple[str, str]:
    """``"rm:PATH"`` -> ``("rm", "PATH")``; the model part may hold ':' (``verifier:embedded:NAME``)."""
    kind, _, model = spec.partition(":")
    if kind not in KINDS or not model:
        raise ValueError(
            f"scorer {spec!r}: use rm:PATH (a reward-model checkpoint) or verifier:MODEL (a causal LM read as p(yes))"
        )
    return kind, model


def check_scorer(spec: str) -> None:
    """Refuse a malformed scorer spec or a checkpoint of the wrong kind before anything loads."""
    kind, model = parse_scorer(spec)
    KINDS[kind]().check_model(model)


class TrainedScorer:
    """Raw scores of items from a trained judge, and the judge's own reading of them (``option_scores``, ``share``)."""

    def __init__(self, spec: str):
        check_scorer(spec)
        self.kind, self.model = parse_scorer(spec)
        self.judge = KINDS[self.kind]()
        self._engine = None

    def score(self, items: Sequence[Item], context: JudgeContext) -> tuple[list[float], list[Cost]]:
        """One raw score and its cost per item (a verifier's engine is loaded on first use, without a cache)."""
        engine = None
        if self.judge.uses_engine:
            if self._engine is None:
                from persetrain.engine import load_engine

                self._engine = load_engine(self.model)
            engine = self._engine
        scoring = JudgeContext(
            data=context.data,
            split=context.split,
            system=f"{context.system} scorer",
            out=context.out,
            seed=context.seed,
            model=self.model,
        )
        scores, costs, _ = self.judge.score_items(items, engine, scoring)
        return scores, costs


class WithTrainedScorer(Evaluator):
    """An evaluator one step of which a trained judge may take (its config's ``scorer``: AuPEL's comparisons,
    ExPerT's match step, PREF's stage 3): the spec is checked with the model, before anything loads, and the judge
    is loaded once, on first use, so that every probe of a meta-eval reuses it."""

    def __init__(self, config: EvaluatorConfig | None = None):
        super().__init__(config)
        self._scorer: TrainedScorer | None = None

    def check_model(self, model: str) -> None:
        if self.config.scorer:
            check_scorer(self.config.scorer)

    def trained_scorer(self) -> TrainedScorer:
        """The judge the config's ``scorer`` names, loaded on first use."""
        if self._scorer is None:
            self._scorer = TrainedScorer(self.config.scorer)
        return self._scorer


def grouped_scores(
    scorer: TrainedScorer, groups: Sequence[Sequence[Item]], context: JudgeContext
) -> tuple[list[list[float]], list[Cost]]:
    """Each group's raw scores and their summed cost, from one call to the judge for every group; the caller
    reads a group as the judge does (``judge.option_scores``: 0..10 each, ``judge.share``: split among them)."""
    flat = [item for group in groups for item in group]
    raw, costs = scorer.score(flat, context)
    scores, spent, start = [], [], 0
    for group in groups:
        end = start + len(group)
        scores.append(raw[start:end])
        spent.append(sum(costs[start:end], Cost()))
        start = end
    return scores, spent
