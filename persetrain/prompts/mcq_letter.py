"""The zero-shot letter-choice prompt (``mcq-letter/choose``): the user's preference, the question and the options
as A, B, C, ..., answered after an ``Answer: `` prefix.

A module of its own because more than one method asks it word for word: the ``mcq-letter`` baseline reads the
letter distribution after it, and the RL verdict judges in ``verdict`` mode (:mod:`persetrain.prompts.verdict`) are
trained after exactly these tokens, so that ``mcq-letter`` measures a trained judge as it measures any model.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine.types import ChatRequest
from persetrain.person import stated
from persetrain.prompts.template import PromptTemplate, register

#: The option labels, in order; a question with more options than letters cannot be asked.
LETTERS = "ABCDEFGHIJ"

LETTER = register(
    PromptTemplate(
        method="mcq-letter",
        task="choose",
        user=(
            "{preference}\n\n{question}\n\n"
            "Options:\n{options}\n\n"
            "Which option is the best answer for me? Reply with the letter of the option only."
        ),
        assistant_prefix="Answer: ",
    )
)


def lettered(options: Sequence[str]) -> str:
    """``A. first`` per line, as ``mcq-letter`` shows options."""
    return "\n".join(f"{LETTERS[k]}. {option}" for k, option in enumerate(options))


def letter_request(preference: str, question: str, options: Sequence[str], id: str | None = None) -> ChatRequest:
    return LETTER.render(id=id, preference=stated(preference), question=question, options=lettered(options))
