"""Prompts of the baseline LLM judges: GEMBA / G-Eval (ExPerT, Figure 7) and LLM-as-a-judge (PARL, Appendix I).

GEMBA and G-Eval share one pointwise prompt (as in ExPerT): the instruction, the reference and the
response, criteria for scores 0..4, and a JSON answer ``{"score": n}``. On the multiple-choice task
there is no reference; the user's stated preference takes its place and the criteria ask how well
the response answers the instruction for that user. The PARL judge reads the user's history (on
the multiple-choice task: the stated preference), the task input and the text, and answers 1..5.
"""

from __future__ import annotations

from persetrain.prompts.template import PromptTemplate, register

GEMBA_RANGE = (0, 4)
LLM_JUDGE_RANGE = (1, 5)

_POINTWISE_INTRO = (
    "You are a careful, impartial judge. Rate the response that an AI assistant gave to the user's "
    "instruction below. Be as objective as possible."
)

POINTWISE_REFERENCE = register(
    PromptTemplate(
        method="gemba",
        task="reference",
        system=_POINTWISE_INTRO,
        user=(
            "Compare the response with the reference (the answer the user actually wanted), considering both "
            "content and writing style.\n\n"
            "Scores:\n"
            "0: the response has nothing to do with the reference.\n"
            "1: the response is slightly related but does not match the reference.\n"
            "2: the response is fairly related but has mistakes.\n"
            "3: the response matches the reference with small omissions.\n"
            "4: the response matches the reference fully.\n\n"
            "instruction: {input}\n\nreference: {reference}\n\nresponse: {response}\n\n"
            'Reply with a JSON object {{"score": <an integer from 0 to 4>}}.'
        ),
        assistant_prefix='{{"score": ',
    )
)

POINTWISE_PREFERENCE = register(
    PromptTemplate(
        method="gemba",
        task="mcq",
        system=_POINTWISE_INTRO,
        user=(
            "Judge how well the response answers the instruction for this user, given the user's preference.\n\n"
            "Scores:\n"
            "0: the response has nothing to do with the instruction or goes against the preference.\n"
            "1: the response is slightly relevant but ignores the preference.\n"
            "2: the response is relevant but only partly fits the preference.\n"
            "3: the response fits the instruction and the preference with small gaps.\n"
            "4: the response answers the instruction and fully respects the preference.\n\n"
            "user's preference: {preference}\n\ninstruction: {input}\n\nresponse: {response}\n\n"
            'Reply with a JSON object {{"score": <an integer from 0 to 4>}}.'
        ),
        assistant_prefix='{{"score": ',
    )
)

LLM_JUDGE = register(
    PromptTemplate(
        method="llm-judge",
        task="pointwise",
        system=(
            "You are an expert personalization evaluator. Given what a user wrote or said before, the task "
            "input and a text to evaluate, judge how well the text matches this user's preferences.\n"
            "Output only the score of the text: a number between 1 and 5. No markdown, no other text."
        ),
        user=(
            "<User History>\n{history}\n</User History>\n"
            "<Task Input>\n{input}\n</Task Input>\n"
            "<Text>\n{response}\n</Text>"
        ),
        assistant_prefix="Score: ",
    )
)
