"""A judge made of several checkpoints: every closed-set answer is the mean of the members' probabilities.

Why: one small verifier's errors move from seed to seed (which rule it misreads on users it never saw
changes from run to run), so averaging the probabilities of a few independently trained ones removes much
of that variance, as ensembles of reward models do for RL against a learned reward (Coste et al., 2023).
The model spec names the members joined by commas (``runs/v0/merged,runs/v1/merged``), so every place
that takes a judge model (GRPO's ``reward_judge_model``, the ``parl`` evaluator, ``rubrics verifier-accuracy``,
``demo parl --judge``) takes an ensemble as it is.

``probs`` of a request: the mean of the members' renormalised probabilities (each judge's answer counts
alike); ``logprobs``: the log of the mean of their sequence probabilities (the mixture's). An ensemble only
judges: generation needs one model, so ``generate`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.special import logsumexp

from persetrain.engine.base import Backend, EngineError, OnDone
from persetrain.engine.types import ChatRequest, ChoiceProbs, Cost, GenerationParams

#: Requests per round through every member: large enough for each member's own batching and prefix sharing.
CHUNK = 256


class EnsembleBackend(Backend):
    def __init__(self, members: Sequence[Backend], chunk: int = CHUNK):
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least two members, got {len(members)}")
        self.members, self.chunk = list(members), chunk
        self.fingerprint = "ensemble:" + ",".join(m.fingerprint for m in self.members)

    def generate(self, requests: Sequence[ChatRequest], params: Sequence[GenerationParams], on_done: OnDone) -> None:
        raise EngineError(
            f"the ensemble judge {self.fingerprint} only answers closed sets (choice_probs); "
            "generation needs one model: name a single checkpoint"
        )

    def choice_probs(self, requests: Sequence[ChatRequest], choices: Sequence[str], on_done: OnDone) -> None:
        # Chunks of requests, each through every member, then reported: progress moves and the request cache
        # keeps each finished chunk, where one pass per member would report nothing until the last ended.
        for start in range(0, len(requests), self.chunk):
            chunk = requests[start : start + self.chunk]
            per_member = [self._member_probs(member, chunk, choices) for member in self.members]
            for i, results in enumerate(zip(*per_member, strict=True)):
                cost = sum((r.cost for r in results), Cost())
                probs = {c: sum(r.probs[c] for r in results) / len(results) for c in choices}
                logprobs = {c: _log_mean_exp([r.logprobs[c] for r in results]) for c in choices}
                on_done(start + i, ChoiceProbs(probs=probs, logprobs=logprobs, cost=cost))

    @staticmethod
    def _member_probs(member: Backend, requests: Sequence[ChatRequest], choices: Sequence[str]) -> list[ChoiceProbs]:
        found: list[ChoiceProbs | None] = [None] * len(requests)
        member.choice_probs(requests, choices, lambda i, result: found.__setitem__(i, result))
        missing = [requests[i].id or i for i, r in enumerate(found) if r is None]
        if missing:
            raise EngineError(f"ensemble member {member.fingerprint} returned no result for requests {missing[:10]}")
        return found  # type: ignore[return-value]  # every slot filled, checked above

    def close(self) -> None:
        for member in self.members:
            member.close()


def _log_mean_exp(values: Sequence[float]) -> float:
    return float(logsumexp(values)) - math.log(len(values))
