"""A trained PerSE judge as a TRL reward: train a personalized generator against a learned evaluator.

The generator writes a text (a plot, in PerSE's data) for the reviewer of a dataset row; the reward is
the PerSE judge's expected 1-10 score of that text for that reviewer: the prompt is the judge's own
(``persetrain.prompts.perse.scalar_request``, the reviewer's profile with the completion as the query
plot) and the score is the expectation under ``choice_probs`` over "1".."10" right after the
``[Score]`` marker (``perse-expected`` without a review: one forward pass per completion, no sampling).
All completions of a generation batch go to the engine in one call.

Rows are PerSE scalar rows as ``persetrain prepare perse`` writes them (``id``, ``reviewer_id``,
``profile``, ``score_max``); TRL passes those columns to the reward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from persetrain.prompts.perse import PROFILE_WORDS, SCORE_MARKER, SCORE_MAX, SCORE_MIN, scalar_request
from persetrain.rewards.parl_trl import completion_text
from persetrain.schema import ScalarExample

if TYPE_CHECKING:
    from persetrain.engine import Engine

SCORE_CHOICES = [str(n) for n in range(SCORE_MIN, SCORE_MAX + 1)]
#: Placeholder id of the query: the completion is not a dataset plot, and must not match a profile plot.
GENERATED_ID = "generated"


class PerSEReward:
    """``reward(prompts=, completions=, completion_ids=, profile=, ...) -> list[float]`` (module docstring).

    An empty completion gets ``SCORE_MIN``, the worst score the judge can give.
    """

    __name__ = "perse_expected_score"

    def __init__(self, engine: Engine, profile_words: int = PROFILE_WORDS):
        self.engine = engine
        self.profile_words = profile_words

    def __call__(
        self,
        prompts: Sequence | None = None,
        completions: Sequence | None = None,
        completion_ids: Sequence | None = None,
        *,
        profile: Sequence,
        log_metric: Callable | None = None,
        **columns: Any,
    ) -> list[float]:
        texts = [completion_text(c).strip() for c in completions or []]
        requests, scored = [], []
        for i, text in enumerate(texts):
            if not text:
                continue
            example = ScalarExample(  # the score fields are placeholders: only the prompt is used
                id=str((columns.get("id") or [i] * len(texts))[i]),
                reviewer_id=str((columns.get("reviewer_id") or [""] * len(texts))[i]),
                profile=profile[i],
                query_plot_id=GENERATED_ID,
                query_plot=text,
                score=1,
                score_max=(columns.get("score_max") or [10] * len(texts))[i],
            )
            requests.append(
                scalar_request(example, self.profile_words).model_copy(update={"assistant_prefix": f"{SCORE_MARKER} "})
            )
            scored.append(i)
        rewards = [float(SCORE_MIN)] * len(texts)
        for i, probs in zip(scored, self.engine.choice_probs(requests, SCORE_CHOICES, "perse reward"), strict=True):
            rewards[i] = probs.expectation()
        if log_metric is not None and texts:
            log_metric("perse/empty_share", 1 - len(scored) / len(texts))
        return rewards
