"""AuPEL prompts: one pairwise comparison per evaluation dimension (paper section 3).

The three instructions are the paper's: quality compares the two responses with no context,
relevance gives the task input (the immediate context Q), personalization gives samples of the
user's earlier writing (U_t) and asks which response is more likely written by the same author.
The answer is a closed set, "A" or "B", read with ``choice_probs`` after ``ANSWER_PREFIX``.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine.types import ChatRequest
from persetrain.prompts.template import PromptTemplate, register

DIMENSIONS: tuple[str, ...] = ("personalization", "quality", "relevance")
CHOICES: tuple[str, str] = ("A", "B")
ANSWER_PREFIX = "Answer: Response "

_SYSTEM = "You are a careful judge comparing two responses. Answer with the letter of the response you choose."
_RESPONSES = "Response A:\n{response_a}\n\nResponse B:\n{response_b}\n\n"
_ANSWER = 'Answer with "A" or "B".'

TEMPLATES = {
    "quality": register(
        PromptTemplate(
            method="aupel",
            task="quality",
            system=_SYSTEM,
            assistant_prefix=ANSWER_PREFIX,
            user=_RESPONSES
            + "Compare the two responses and select the one that is more fluent and cohesive. "
            + _ANSWER,
        )
    ),
    "relevance": register(
        PromptTemplate(
            method="aupel",
            task="relevance",
            system=_SYSTEM,
            assistant_prefix=ANSWER_PREFIX,
            user=(
                "Context:\n{context}\n\n"
                + _RESPONSES
                + "Compare the two responses and select the one that is more relevant to the given context. "
                + _ANSWER
            ),
        )
    ),
    "personalization": register(
        PromptTemplate(
            method="aupel",
            task="personalization",
            system=_SYSTEM,
            assistant_prefix=ANSWER_PREFIX,
            user=(
                "Examples written by one author:\n{examples}\n\n"
                + _RESPONSES
                + "Compare the two responses and select the one that is more likely to be written by the same "
                "author who wrote the examples above. " + _ANSWER
            ),
        )
    ),
}


def _cut(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts) if len(parts) <= words else " ".join(parts[:words]) + " ..."


def comparison_request(
    dimension: str,
    response_a: str,
    response_b: str,
    context: str,
    samples: Sequence[str],
    max_samples: int,
    sample_words: int,
    id: str | None = None,
) -> ChatRequest:
    """The request of one comparison; only the dimension's own context is shown (none for quality)."""
    values = {"response_a": response_a, "response_b": response_b}
    if dimension == "relevance":
        values["context"] = context
    elif dimension == "personalization":
        values["examples"] = "\n\n".join(
            f"Example {i}: {_cut(s, sample_words)}" for i, s in enumerate(samples[:max_samples], start=1)
        )
    return TEMPLATES[dimension].render(id=id, **values)
