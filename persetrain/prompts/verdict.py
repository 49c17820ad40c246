"""Prompts of the verdict judges, trained by reinforcement on their own verdicts (``persetrain prepare verdict``, the
``verdict-*`` rewards, the ``verdict`` evaluator).

Two modes (:data:`MODES`):

- ``verdict``: the judge answers with the verdict alone, a letter or yes / no. A PrefEval question is asked with
  exactly the ``mcq-letter`` prompt (:data:`persetrain.prompts.mcq_letter.LETTER`, its ``Answer: `` prefix included) and
  a yes / no check with exactly the prompt it came with (the verifier's, PARL's rule judge), so a judge trained in
  this mode is read by ``mcq-letter`` / ``verifier`` as any model is: no evaluator of its own is needed to
  measure it. The cheap mode: one sampled token a rollout.
- ``think``: a rationale of at most :data:`THINK_WORDS` words, then the verdict alone on a last line
  ``Verdict: X`` (:data:`VERDICT_MARK`). The fixed last line is what the reward and the ``verdict`` evaluator
  parse; a verdict named anywhere else in the rationale does not count.

A dataset row holds its prompt as TRL's conversational messages; an assistant prefix is the last message, with
role ``assistant`` (:func:`prompt_messages`). ``persetrain.train.grpo`` renders such a prompt as the engine does
(chat template with the generation prompt, then the prefix), so the tokens the policy is trained after are the
tokens ``mcq-letter`` reads after.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine.types import ChatRequest, Message
from persetrain.person import stated
from persetrain.prompts.mcq_letter import LETTER, letter_request, lettered
from persetrain.prompts.template import PromptTemplate, register

MODES = ("verdict", "think")
#: The last line of a think-then-verdict answer starts with this; the verdict follows it.
VERDICT_MARK = "Verdict:"
#: The rationale's bound, stated in the prompt (the recipe's max_completion_length enforces it in tokens).
THINK_WORDS = 120

_THINK_TAIL = (
    "Think it through in at most {words} words, then end with a last line '" + VERDICT_MARK + " X', X being {what}."
)

CHOOSE_THINK = register(
    PromptTemplate(
        method="verdict",
        task="choose-think",
        user=(
            "{preference}\n\n{question}\n\n"
            "Options:\n{options}\n\n"
            "Which option is the best answer for me? " + _THINK_TAIL.format(words="{words}", what="the option's letter")
        ),
    )
)

#: Two texts of a person that is shown by a profile (a PerSE reviewer's past reviews), not by a stated preference.
PAIR = register(
    PromptTemplate(
        method="verdict",
        task="pair",
        user=(
            "{person_label}: {person}\n\n{request}\n\n"
            "Options:\n{options}\n\n"
            "Which option would this person prefer? Reply with the letter of the option only."
        ),
        assistant_prefix=LETTER.assistant_prefix,
    )
)

PAIR_THINK = register(
    PromptTemplate(
        method="verdict",
        task="pair-think",
        user=(
            "{person_label}: {person}\n\n{request}\n\n"
            "Options:\n{options}\n\n"
            "Which option would this person prefer? " + _THINK_TAIL.format(words="{words}", what="the option's letter")
        ),
    )
)


def choice_request(preference: str, question: str, options: Sequence[str], mode: str) -> ChatRequest:
    """A stated preference's question: ``mcq-letter``'s own prompt in ``verdict`` mode."""
    check_mode(mode)
    if mode == "verdict":
        return letter_request(preference, question, list(options))
    return CHOOSE_THINK.render(
        preference=stated(preference), question=question, options=lettered(options), words=THINK_WORDS
    )


def pair_request(person_label: str, person: str, request: str, options: Sequence[str], mode: str) -> ChatRequest:
    """A person shown by a profile, and the texts to choose between."""
    check_mode(mode)
    template = PAIR if mode == "verdict" else PAIR_THINK
    values = {"words": THINK_WORDS} if mode == "think" else {}
    return template.render(
        person_label=person_label, person=stated(person), request=request, options=lettered(options), **values
    )


def yes_no_request(messages: Sequence[dict], mode: str) -> ChatRequest:
    """A yes / no check asked with its own prompt (``messages``, TRL's conversational form); ``think`` asks for the
    rationale and the last line after it."""
    check_mode(mode)
    turns = [Message(**m) for m in messages]
    if mode == "think":
        tail = _THINK_TAIL.format(words=THINK_WORDS, what="yes or no")
        turns[-1] = Message(role=turns[-1].role, content=f"{turns[-1].content}\n\n{tail}")
    return ChatRequest(messages=tuple(turns))


def prompt_messages(request: ChatRequest) -> list[dict[str, str]]:
    """The request as a dataset's ``prompt``: its messages, and its assistant prefix as a last assistant message."""
    messages = request.chat_messages()
    if request.assistant_prefix:
        messages.append({"role": "assistant", "content": request.assistant_prefix})
    return messages


def request_of(messages: Sequence[dict]) -> ChatRequest:
    """The inverse of :func:`prompt_messages`: a last assistant message becomes the assistant prefix."""
    turns = list(messages)
    prefix = turns.pop()["content"] if turns and turns[-1]["role"] == "assistant" else ""
    return ChatRequest(messages=tuple(Message(**m) for m in turns), assistant_prefix=prefix)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"judge mode is one of {', '.join(MODES)}, not {mode!r}")
