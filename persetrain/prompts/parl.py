"""PARL prompts: rubric induction from a user's history, and the yes/no rubric judge.

Both follow the paper's templates (Appendix, Tables 10-15) for the three tasks: Amazon review
generation (``amazon``), Reddit topic writing in the LongLaMP layout (``reddit``) and news headlines
in the LaMP-4 layout (``news``). Induction prompts have the paper's structure: role, input schema,
task, drafting rules (atomicity, consistency, determinism, specificity, topic-agnosticism,
multi-dimensionality, personalization) and the output format, a JSON array of ``{"rule": ...}``.

The judge prompt puts what is shared first and the rule last: the system prompt, the task input and
the text under judgment form a head that every rule checked against that text repeats verbatim, so
the ``hf`` engine computes the head once per text and only the rule's tokens once per check (and a
vLLM server's prefix cache does the same). ``RUBRIC_SCHEMA`` is for inference only (``persetrain
rubrics induce``); GRPO rollouts are sampled unconstrained so that their log-probabilities are the
policy's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine.types import ChatRequest
from persetrain.prompts.perse import truncate_words
from persetrain.prompts.template import PromptTemplate, register

TASKS: tuple[str, ...] = ("amazon", "reddit", "news")

#: Rules requested from the generator, and the paper's limits on a usable set and a kept rule.
RULES_REQUESTED = 10
MIN_RULES, MAX_RULES = 2, 10
MIN_RULE_CHARS, MAX_RULE_CHARS = 20, 400

#: Structured output for inference: an array of 2..10 objects with exactly one key, ``rule``.
RUBRIC_SCHEMA: dict = {
    "type": "array",
    "minItems": MIN_RULES,
    "maxItems": MAX_RULES,
    "items": {
        "type": "object",
        "properties": {"rule": {"type": "string", "minLength": MIN_RULE_CHARS, "maxLength": MAX_RULE_CHARS}},
        "required": ["rule"],
        "additionalProperties": False,
    },
}

#: Words of a news article shown per history item in an induction prompt (headlines are short,
#: articles are not; ten whole articles would dwarf the headlines the rules are about).
HISTORY_ARTICLE_WORDS = 60

# Per task: (what the user writes, plural, what the history holds, the agnosticism rule's name and
# its subject, the history tag, how the task is analysed).
_WORDING: dict[str, dict[str, str]] = {
    "amazon": dict(
        text="review text",
        texts="review texts",
        history="historical reviews",
        agnostic="Item-Agnosticism",
        unit="review",
        subject="items",
        tag="User Historical Reviews",
        schema="A collection of historical review texts written by the target user.",
        task=(
            "Analyze the user's historical reviews from multiple dimensions (e.g., writing style, linguistic "
            "features, structure, tone, content focus, expression patterns) and generate 10 highly "
            "personalized rubrics that cover different aspects of the user's preferences."
        ),
    ),
    "reddit": dict(
        text="reddit post content",
        texts="reddit post contents",
        history="historical reddit posts",
        agnostic="Topic-Agnosticism",
        unit="post",
        subject="topics",
        tag="User Historical Reddit Posts",
        schema="A collection of historical reddit post contents written by the target user.",
        task=(
            "Analyze the user's historical reddit posts from multiple dimensions (e.g., writing style, "
            "linguistic features, structure, tone, content focus, expression patterns) and generate 10 "
            "highly personalized rubrics that cover different aspects of the user's preferences."
        ),
    ),
    "news": dict(
        text="news headline",
        texts="news headlines",
        history="historical news",
        agnostic="News-Agnosticism",
        unit="headline",
        subject="news",
        tag="User Historical News",
        schema=(
            "A collection of historical news contents and their corresponding news headlines written by "
            "the target user."
        ),
        task=(
            "Analyze how user transforms news content into news headline and generate 10 highly "
            "personalized rubrics that cover different aspects of the user's preferences."
        ),
    ),
}


def _induction_system(task: str) -> str:
    w = _WORDING[task]
    return (
        "# Role\nYou are an expert in Personalization Analysis and Rubric Generation. Your job is to generate a "
        f"self-contained set of personalized evaluation rubrics based on a user's {w['history']}. These rubrics "
        f"should be used to evaluate whether a newly generated {w['text']} matches the user's preferences.\n\n"
        f"# Input Data\n- **User History:** {w['schema']}\n\n"
        f"# Task\n{w['task']}\n\n"
        "# Drafting Rules\n"
        f"- **Atomicity:** Each rubric should be a single, clear and self-contained criterion that can be used to "
        f"evaluate a {w['text']} independently. It should not require context from other rubrics or external "
        "information to be meaningful. Avoid combining multiple criteria into one rubric.\n"
        f"- **Consistency:** Each rubric should reflect a consistent pattern identified across all the user's "
        f"{w['history']}. Each rubric must be satisfied when applied to all {w['texts']} in the user's profile. "
        "Avoid rubrics that only match a subset of the history.\n"
        "- **Determinism:** Each rubric should be unambiguous and objectively evaluable, allowing for clear yes/no "
        "judgments rather than vague or subjective assessments.\n"
        "- **Specificity:** Each rubric should be specific to a concrete, observable feature. Instead of vague "
        'statements like "matches writing style", provide precise characteristics such as "uses short, '
        'fragmented sentences without punctuation" or "prefers active voice over passive voice".\n'
        f"- **{w['agnostic']}:** Each rubric should be applicable to *any* future {w['unit']} about *any* "
        f"{w['subject']}, not just the ones in the user's history. Focus on *how* the user writes (writing style, "
        "structure, tone, linguistic patterns) rather than *what* they wrote about.\n"
        "- **Multi-Dimensionality:** The set of rubrics should collectively cover multiple dimensions of the "
        "user's writing: writing style (sentence structure, paragraph organization), linguistic features "
        "(vocabulary choice, grammar patterns), tone (formality, emotional expression), content focus and "
        "expression patterns. Avoid rubrics that all focus on the same dimension.\n"
        "- **Personalization:** Each rubric should capture something distinctive about this specific user's "
        "writing that distinguishes them from other users. Generic rubrics that could apply to any user should "
        "be avoided.\n\n"
        "# Output Format\nProvide a JSON array of objects. Each object must contain exactly one key: rule.\n"
        'Example: [{"rule": "The text is written entirely in lowercase letters, including the first word of '
        'every sentence."}, {"rule": "The text ends with a short sign-off line after the last sentence."}]\n'
        "Do not output markdown code blocks or extra text."
    )


def _judge_system(task: str) -> str:
    w = _WORDING[task]
    given = {
        "amazon": "the metadata of the item and the review to be evaluated",
        "reddit": "the reddit post summary",
        "news": "the news content",
    }[task]
    return (
        f"# Role\nYou are an expert Personalization Evaluator. Your job is to evaluate the quality of a {w['text']} "
        f"based on a personalized evaluation rubric for the user. Given {given}, the {w['text']} to be evaluated, "
        f"and a personalized evaluation rubric, please judge whether the {w['text']} satisfies the given "
        "personalized evaluation rubric.\n\n"
        f"# Output Format\nOnly output the answer of whether the {w['text']} satisfies the given personalized "
        "evaluation rubric. The answer should be yes or no."
    )


_JUDGE_TAGS = {
    "amazon": ("Review Metadata", "Review Text"),
    "reddit": ("Reddit Post Summary", "Reddit Post Content"),
    "news": ("News Content", "News Headline"),
}

INDUCE = {
    task: register(
        PromptTemplate(
            method="parl",
            task=f"induce-{task}",
            system=_induction_system(task).replace("{", "{{").replace("}", "}}"),
            user=(
                f"Given the following {_WORDING[task]['history']}, please generate a self-contained set of "
                f"personalized evaluation rubrics for the user.\n<{_WORDING[task]['tag']}>\n{{history}}\n"
                f"</{_WORDING[task]['tag']}>"
            ),
        )
    )
    for task in TASKS
}

JUDGE = {
    task: register(
        PromptTemplate(
            method="parl",
            task=f"judge-{task}",
            system=_judge_system(task),
            user=(
                f"<{_JUDGE_TAGS[task][0]}>\n{{input}}\n</{_JUDGE_TAGS[task][0]}>\n"
                f"<{_JUDGE_TAGS[task][1]}>\n{{response}}\n</{_JUDGE_TAGS[task][1]}>\n"
                "<Personalized Evaluation Rubric>\n{rule}\n</Personalized Evaluation Rubric>"
            ),
        )
    )
    for task in TASKS
}


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"unknown PARL task {task!r}; expected one of {TASKS}")
    return task


def format_history(task: str, inputs: Sequence[str], outputs: Sequence[str]) -> str:
    """The history block of an induction prompt: the user's texts (news: each with its article)."""
    check_task(task)
    if task == "news":
        items = [
            f"[News {n}]\nContent: {truncate_words(article, HISTORY_ARTICLE_WORDS)}\nHeadline: {headline}"
            for n, (article, headline) in enumerate(zip(inputs, outputs, strict=True), start=1)
        ]
    else:
        label = "Review" if task == "amazon" else "Post"
        items = [f"[{label} {n}]\n{text}" for n, text in enumerate(outputs, start=1)]
    return "\n\n".join(items)


def induction_messages(task: str, inputs: Sequence[str], outputs: Sequence[str]) -> list[dict[str, str]]:
    """The induction prompt as chat messages (the ``prompt`` column of GRPO / verl datasets)."""
    request = INDUCE[check_task(task)].render(history=format_history(task, inputs, outputs))
    return request.chat_messages()


def induction_request(task: str, inputs: Sequence[str], outputs: Sequence[str], id: str | None = None) -> ChatRequest:
    return INDUCE[check_task(task)].render(id=id, history=format_history(task, inputs, outputs))


def judge_request(task: str, input: str, response: str, rule: str) -> ChatRequest:
    """Does ``response`` (written for ``input``) satisfy ``rule``? Answered by p(yes) (``prompts.yes_no``)."""
    return JUDGE[check_task(task)].render(input=input, response=response, rule=rule)


# ------------------------------------------------------------------ generators of the negatives
#: What a generator is asked to write for a task input, and how many new tokens it may use.
_GENERATE_USER = {
    "amazon": (
        "Write the review text a customer would write for this item, given the rating and the review "
        "title.\n{input}\nReply with the review text only."
    ),
    "reddit": (
        "Write the content of a reddit post with this summary.\nSummary: {input}\nReply with the post content only."
    ),
    "news": "Write a headline for this news article.\nArticle: {input}\nReply with the headline only.",
}
GENERATE_TOKENS = {"amazon": 160, "reddit": 200, "news": 32}

GENERATE = {
    task: register(
        PromptTemplate(
            method="parl",
            task=f"generate-{task}",
            system="You are a helpful writing assistant.",
            user="{examples}" + _GENERATE_USER[task],
        )
    )
    for task in TASKS
}


def generation_request(
    task: str, input: str, examples: Sequence[tuple[str, str]] = (), id: str | None = None
) -> ChatRequest:
    """The Non generator's prompt (no ``examples``) or the RAG generator's (retrieved history items first)."""
    shown = ""
    if examples:
        items = "\n\n".join(f"[Input {n}]\n{i}\n[Text {n}]\n{o}" for n, (i, o) in enumerate(examples, start=1))
        shown = f"Here are earlier texts written by this user:\n\n{items}\n\nWrite in the same style as this user.\n"
    return GENERATE[check_task(task)].render(id=id, examples=shown, input=input)
