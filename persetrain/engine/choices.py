"""Closed-set scoring math, shared by the backends: which tokens a choice is, and its probability.

A choice is scored as the text the model would produce after the prompt. The prompt and each
prompt+choice are tokenized jointly (a prompt ending in "[Score] " and a choice "7" tokenize as
"...]" + " 7"), the context is their longest common token prefix, and a choice's tokens are what
follows it. log P(choice) is the sum of its tokens' log-probabilities after the context, less the mass
of continuing from it into a longer choice ("1" must not include "10"). Each backend only supplies
``log p(token | context + prefix)``: the ``hf`` backend from its forward passes, the ``openai`` backend
from a server's prompt log-probabilities.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from persetrain.engine.types import ChoiceProbs, Cost

#: log p(token | context + prefix), for a token path ``prefix`` after the context.
TokenLogprob = Callable[[list[int], int], float]


def split_choices(prompt: list[int], joint: Sequence[list[int]], choices: Sequence[str]) -> tuple[int, list[list[int]]]:
    """(context length, each choice's tokens after the context) from the prompt's and each prompt+choice's tokens."""
    common = len(prompt)
    for seq in joint:
        common = min(common, common_prefix(prompt, seq))
    per_choice = [list(seq[common:]) for seq in joint]
    if any(not toks for toks in per_choice) or len({tuple(t) for t in per_choice}) < len(choices):
        raise ValueError(
            f"the tokenizer cannot distinguish the choices {list(choices)!r} after this prompt "
            f"(token sequences {per_choice}); rephrase the choices"
        )
    return common, per_choice


def choice_logprobs(
    choice_tokens: Sequence[list[int]], logprob: TokenLogprob, choices: Sequence[str]
) -> dict[str, float]:
    """log P(choice) for every choice, excluding the mass that continues into a longer choice."""
    result: dict[str, float] = {}
    for choice, toks in zip(choices, choice_tokens, strict=True):
        total = sum(logprob(toks[:p], t) for p, t in enumerate(toks))
        extensions = sorted(
            {other[len(toks)] for other in choice_tokens if len(other) > len(toks) and other[: len(toks)] == toks}
        )
        if extensions:
            cont = logsumexp([logprob(toks, e) for e in extensions])
            total += math.log1p(-math.exp(min(cont, -1e-12)))
        result[choice] = total
    return result


def normalized(logprobs: dict[str, float], cost: Cost) -> ChoiceProbs:
    """Probabilities over the closed set (softmax of the choices' log-probabilities)."""
    top = max(logprobs.values())
    weights = {c: math.exp(v - top) for c, v in logprobs.items()}
    z = sum(weights.values())
    return ChoiceProbs(probs={c: w / z for c, w in weights.items()}, logprobs=logprobs, cost=cost)


def logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def common_prefix(a: Sequence, b: Sequence) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
