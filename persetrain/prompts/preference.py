"""Prompts of the learned judges: a reward model's input text and a verifier's yes/no question.

One wording serves training data (``persetrain prepare preference``) and inference (the ``rm`` and
``verifier`` evaluators), so a checkpoint is always read with the text it was trained on.

- **Reward model** (a sequence-classification head, any backbone, encoders without a chat template
  included): plain text. The *context* names the person (a stated preference, a profile of earlier
  reviews or texts, or a rule) and the request; the *candidate* is the text to score. TRL's
  ``RewardTrainer`` concatenates ``prompt + chosen`` in its standard (non-conversational) format, so
  the context ends where the candidate begins.
- **Verifier** (a causal LM fine-tuned with ``persetrain sft``): a chat prompt asking whether the
  candidate follows what the person wants, answered by ``yes`` / ``no`` and read back as p(yes) through
  ``engine.choice_probs`` (the closed answer set PARL's judge uses too).

The *person-blind* forms leave the person out (the same request and candidate, no preference or
profile): the ablation that tells a judge that reads the person from one that learned the dataset.

**The person template** is one line, :data:`PERSON_LINE` (``{person_label}: {person}``), which every prompt
here opens with: the reward model's context and the verifier's question. A person from a user's own column
(``--person_column``) is rendered by :func:`person_of`: a text (a persona, a stated preference) is shown as it
is under ``User preference``; a list of earlier items (a profile) as ``Example 1: ...`` lines under ``User
profile``. A row ``{"prompt": "Suggest a dinner.", "person": "I am vegan."}`` gives the reward-model context::

    User preference: I am vegan.
    Question: Suggest a dinner.
    Answer:
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from persetrain.prompts.perse import PROFILE_WORDS, scalar_profile, truncate_words
from persetrain.prompts.template import PromptTemplate, register
from persetrain.schema import ProfileReview

#: What the context calls the person's side, by what is known of them.
PERSON_LABELS = {"preference": "User preference", "profile": "User profile", "rule": "Rule"}

#: The request a Per-MPST plot answers. PerSE data has none of its own: a reviewer scores plots, so the
#: candidate is the plot and the person is the reviewer's profile.
PLOT_REQUEST = "Describe a movie plot this reviewer would enjoy."


def reviews_person(profile: Sequence[ProfileReview], score_max: int, profile_words: int = PROFILE_WORDS) -> str:
    """A reviewer as the person (label ``User profile``): past plots with their reviews and 1-10 scores,
    as PerSE's scalar judge shows them."""
    return scalar_profile(profile, score_max, profile_words)


def texts_person(texts: Sequence[str], profile_words: int = PROFILE_WORDS) -> str:
    """A writer as the person (label ``User profile``): their earlier texts in the order given (oldest
    first), each cut to ``profile_words`` words."""
    return "\n".join(f"Example {n}: {truncate_words(text, profile_words)}" for n, text in enumerate(texts, start=1))


#: How every prompt here shows the person: the one person template.
PERSON_LINE = "{person_label}: {person}"


def person_of(value: object, profile_words: int = PROFILE_WORDS) -> tuple[str, str]:
    """``(person_label, person)`` of a person column's value: a text (persona, stated preference) under ``User
    preference``; a list of earlier items (texts, or objects whose values are joined) under ``User profile``,
    shown as :func:`texts_person` shows a writer's texts. A value of another type, or an empty one, is refused."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("the person is empty")
        return PERSON_LABELS["preference"], value.strip()
    if isinstance(value, list | tuple) and value:
        texts = []
        for k, item in enumerate(value):
            if isinstance(item, dict):
                item = "; ".join(f"{key}: {v}" for key, v in item.items() if v is not None and str(v).strip())
            if not isinstance(item, str) or not item.strip():
                raise ValueError(f"profile item {k} is not a text or an object of texts")
            texts.append(item.strip())
        return PERSON_LABELS["profile"], texts_person(texts, profile_words)
    raise ValueError(f"expected the person as a text or a list of earlier items, got {json.dumps(value, default=str)}")


def rm_context(person: str | None, request: str, person_label: str = PERSON_LABELS["preference"]) -> str:
    """The reward model's context: the person (omitted when ``None``: the blind form) and the request.

    It ends with a line break so that ``context + candidate`` reads as one text, as TRL's standard format
    concatenates them, and tokenizes as the context's tokens followed by the candidate's: byte-level BPE
    keeps a line break a token of its own, where a trailing space would merge into the candidate's first
    word. That is what lets the reward-model trainer encode a question's context once for all its options.
    """
    head = PERSON_LINE.format(person_label=person_label, person=person.strip()) + "\n" if person is not None else ""
    return f"{head}Question: {request.strip()}\nAnswer:\n"


VERIFIER = register(
    PromptTemplate(
        method="verifier",
        task="preference",
        system="You check whether an answer follows what a specific user wants. Reply with yes or no.",
        user=(
            f"{PERSON_LINE}\n\n"
            "Question: {request}\n\n"
            "Answer: {candidate}\n\n"
            "Does this answer follow the user's preference? Reply yes or no."
        ),
    )
)

VERIFIER_BLIND = register(
    PromptTemplate(
        method="verifier",
        task="preference-blind",
        system="You check whether an answer is a good answer for the user. Reply with yes or no.",
        user=("Question: {request}\n\nAnswer: {candidate}\n\nIs this a good answer for the user? Reply yes or no."),
    )
)
