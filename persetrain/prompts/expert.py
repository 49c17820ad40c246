"""ExPerT prompts (paper Figure 2): aspect extraction, aspect matching, content and style alignment.

The structure is the paper's: extraction sees the user's task input and one text and lists atomic
aspects as JSON ``{title, description, evidence: [sentences]}``; matching shows one aspect (title and
description) and the other side's numbered aspects and asks for the best match or "none"; the
content and style prompts show the two evidence lists (content also shows the aspect) and ask for a
binary decision with a one-sentence reason. Evidence "list 1" is always the side being scored, as
in the paper's code.

Answers are JSON under a schema in both of ExPerT's paths, so that the closed-set steps read the
same position either way: the sampled-text path generates the whole object and parses it, the
``choice_probs`` path scores the answer values right where the object holds them
(``MATCH_PREFIX`` / the reason followed by ``ALIGN_KEY``).
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine.types import ChatRequest
from persetrain.prompts.template import PromptTemplate, register

NONE = "none"
YES, NO = "yes", "no"
#: The match object starts with its answer; the choice_probs path scores the values after this.
MATCH_PREFIX = '{"match": "'
#: Alignment objects give the reason first, then the decision (key order of ``alignment_schema``).
REASON_PREFIX = '{"reason": "'
ALIGN_KEY = '", "aligned": "'

EXTRACT = register(
    PromptTemplate(
        method="expert",
        task="extract",
        system=(
            "You break a text into its atomic aspects. An aspect is one idea, opinion, fact or topic the "
            "text presents; its evidence is the sentences of the text that express it, copied word for word. "
            "Together the aspects should cover everything the text says."
        ),
        user=(
            "Task the text was written for:\n{input}\n\n"
            "Text:\n{text}\n\n"
            "List the atomic aspects of the text, at most {max_aspects}. Reply with a JSON list; each item has "
            '"title" (a few words), "description" (one sentence) and "evidence" (a list of one or more '
            "sentences from the text)."
        ),
    )
)

MATCH = register(
    PromptTemplate(
        method="expert",
        task="match",
        system=(
            "You judge whether two aspects of two texts are about the same concept, from their titles and "
            "descriptions. Two aspects match when they describe the same idea, even in other words."
        ),
        user=(
            "Test aspect\ntitle: {title}\ndescription: {description}\n\n"
            "Candidate aspects\n{candidates}\n\n"
            'Which candidate aspect matches the test aspect best? Answer with its number, or "none" when no '
            'candidate is about the same concept. Reply in JSON: {{"match": "<number or none>", '
            '"reason": "<one sentence>"}}.'
        ),
    )
)

CONTENT = register(
    PromptTemplate(
        method="expert",
        task="content",
        system=(
            "You are an impartial judge of content. Decide whether two lists of text snippets about one aspect "
            "convey the same underlying ideas, meaning and emphasis; ignore differences of wording."
        ),
        user=(
            "Aspect\ntitle: {title}\ndescription: {description}\n\n"
            "List 1\n{evidence_1}\n\nList 2\n{evidence_2}\n\n"
            "Do the two lists match in content and intent about this aspect? Reply in JSON: "
            '{{"reason": "<one sentence>", "aligned": "yes" or "no"}}.'
        ),
    )
)

STYLE = register(
    PromptTemplate(
        method="expert",
        task="style",
        system=(
            "You are a judge with a keen eye for writing style. Decide whether two lists of text snippets are "
            "written in the same style: tone, vocabulary, sentence structure and flow."
        ),
        user=(
            "List 1\n{evidence_1}\n\nList 2\n{evidence_2}\n\n"
            "Do the two lists match in writing style? Reply in JSON: "
            '{{"reason": "<one sentence>", "aligned": "yes" or "no"}}.'
        ),
    )
)


def aspects_schema(max_aspects: int, max_evidence: int = 3) -> dict:
    """JSON schema of the extraction answer; lengths are bounded so a small model cannot ramble."""
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": max_aspects,
        "items": {
            "type": "object",
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 60},
                "description": {"type": "string", "minLength": 1, "maxLength": 160},
                "evidence": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": max_evidence,
                    "items": {"type": "string", "minLength": 1, "maxLength": 240},
                },
            },
            "required": ["title", "description", "evidence"],
        },
    }


def match_schema(choices: Sequence[str], reason_chars: int) -> dict:
    return {
        "type": "object",
        "properties": {
            "match": {"type": "string", "enum": list(choices)},
            "reason": {"type": "string", "maxLength": reason_chars},
        },
        "required": ["match", "reason"],
    }


def alignment_schema(reason_chars: int) -> dict:
    return {
        "type": "object",
        "properties": {
            "reason": {"type": "string", "maxLength": reason_chars},
            "aligned": {"type": "string", "enum": [YES, NO]},
        },
        "required": ["reason", "aligned"],
    }


def reason_regex(reason_chars: int) -> str:
    """The alignment object up to its decision: the same tokens the schema allows, ending at ``ALIGN_KEY``."""
    return '\\{"reason": "[^"\\\\\\n]{0,' + str(reason_chars) + '}", "aligned": "'


def match_choices(n_candidates: int) -> list[str]:
    return [str(i) for i in range(1, n_candidates + 1)] + [NONE]


def extract_request(task_input: str, text: str, max_aspects: int, id: str | None = None) -> ChatRequest:
    return EXTRACT.render(id=id, input=task_input, text=text, max_aspects=max_aspects)


def match_request(aspect: dict, candidates: Sequence[dict], id: str | None = None) -> ChatRequest:
    listed = "\n".join(
        f"{i}. title: {c['title']}\n   description: {c['description']}" for i, c in enumerate(candidates, start=1)
    )
    return MATCH.render(id=id, title=aspect["title"], description=aspect["description"], candidates=listed)


def alignment_request(kind: str, aspect: dict, other: dict, id: str | None = None) -> ChatRequest:
    """``kind`` is "content" or "style"; ``aspect`` is the side being scored (list 1)."""
    lists = {"evidence_1": "\n".join(aspect["evidence"]), "evidence_2": "\n".join(other["evidence"])}
    if kind == "content":
        return CONTENT.render(id=id, title=aspect["title"], description=aspect["description"], **lists)
    return STYLE.render(id=id, **lists)
