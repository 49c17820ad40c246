"""Checkers and rule wordings for the SYNTHETIC PARL users' planted signatures (``data_prep.synthetic.parl``).

The synthetic users are the one PARL source that knows the truth: every signature is a surface property
a text has or lacks, so a checker decides it exactly, and ``persetrain prepare verifier`` turns the
checkers into labelled (rule, text, satisfied) rows for training PARL's yes/no judge. Each signature is
phrased as a rule in ``WORDINGS_PER_RULE`` hand-written wordings: the first ``TRAIN_WORDINGS`` are trained
on, the others are kept for validation, so the verifier is measured on rules worded in ways it never saw.

Training also draws *composed* wordings (:func:`composed_wordings`): every rule's predicate phrases in the
same rubric frames ("The user prefers a headline that ..."). Hand-written wordings each have their own
sentence shape, so a verifier can tell the rules apart by shape and never read the words that name the
property; a frame that every rule shares carries no such cue. ``tests/test_rule_verifier.py`` checks that no
composed wording is a validation wording or another rule's.

The checkers read the text only (never the user's ground truth) and agree with the generator on every
text it writes: ``tests/test_rule_verifier.py`` checks that on the users' texts and on both negatives.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from data_prep.parl import edits
from data_prep.synthetic.parl import OPENERS, PET_WORDS

#: Wordings per rule, and how many of them (the first ones) the train split uses.
WORDINGS_PER_RULE = 5
TRAIN_WORDINGS = 3


@dataclass(frozen=True)
class RuleCheck:
    """One checkable rule: its signature name, a checker over a text, its wordings, a counterfactual edit that
    gives a text the signature or takes it away, for a signature that is a class of forms, the swap to its
    other forms (``data_prep.parl.edits``), and predicate phrases that complete "The headline ..." (or "The
    text ...") for the composed training wordings."""

    name: str
    check: Callable[[str], bool]
    wordings: tuple[str, ...]
    edit: edits.Edit
    forms: edits.Forms | None = None
    phrases: tuple[str, ...] = ()


def _body(text: str) -> str:
    """The text without a sign-off line (the only line break a synthetic text has)."""
    return text.strip().split("\n", 1)[0]


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", _body(text)) if s.strip()]


def _no_capitals(text: str) -> bool:
    return not any(c.isupper() for c in text)


def _starts_with(prefixes: tuple[str, ...]) -> Callable[[str], bool]:
    lowered = tuple(p.lower() for p in prefixes)
    return lambda text: text.strip().lower().startswith(lowered)


PROSE: tuple[RuleCheck, ...] = (
    RuleCheck(
        "lowercase",
        _no_capitals,
        (
            "The text is written entirely in lowercase letters, with no capital letters anywhere.",
            "Every word in the text, including the first word of each sentence, starts with a lowercase letter.",
            "The writer never uses capital letters, not even at the start of sentences or for names.",
            "No uppercase characters appear anywhere in the text.",
            "The text avoids capitalization completely: all of its letters are lower case.",
        ),
        edits.lowercase,
        phrases=(
            "uses no capital letters at all",
            "is typed all in lowercase, the start of each sentence included",
            "contains only lowercase letters",
            "never capitalizes a word, names included",
        ),
    ),
    RuleCheck(
        "signoff",
        lambda text: "\n" in text.strip(),
        (
            "The text ends with a short sign-off line, on its own line, after the last sentence.",
            "After the final sentence the writer adds a separate closing line that signs off with their name.",
            "The last line of the text is a personal sign-off, separated from the body by a line break.",
            "The text closes with a signature-style farewell line of its own.",
            "A brief sign-off on a new line concludes the text.",
        ),
        edits.signoff,
        phrases=(
            "ends with a sign-off line of its own",
            "closes with a separate farewell line from the writer",
            "has a signature line after its last sentence",
            "finishes with the writer signing off on a new line",
        ),
    ),
    RuleCheck(
        "short_sentences",
        lambda text: all(len(s.split()) <= 10 for s in _sentences(text)),
        (
            "Every sentence in the text is short, at most ten words long.",
            "The writer uses only brief sentences; none of them runs longer than ten words.",
            "Sentences are kept short and clipped, with no long sentence of more than ten words.",
            "Each sentence of the text contains ten words or fewer.",
            "The text is made of terse, compact sentences and never a long, winding one.",
        ),
        edits.short_sentences,
        phrases=(
            "keeps every sentence to ten words or fewer",
            "uses only short sentences of at most ten words",
            "never has a sentence longer than ten words",
            "is written in brief sentences, none over ten words",
        ),
    ),
    RuleCheck(
        "question",
        lambda text: "?" in text,
        (
            "The text includes a rhetorical question, such as 'what more could you ask for?'.",
            "The writer asks the reader a rhetorical question somewhere in the text.",
            "The text contains at least one question ending with a question mark.",
            "A rhetorical question appears in the text, ending in a question mark.",
            "The writer poses a question to the reader rather than only making statements.",
        ),
        edits.prose_question,
        phrases=(
            "contains a rhetorical question",
            "asks the reader a question somewhere",
            "includes at least one sentence ending in a question mark",
            "poses a question to the reader",
        ),
    ),
    RuleCheck(
        "topic_word",
        lambda text: "as always," in text.lower(),
        (
            "The text mentions a recurring personal topic (a pet, a hobby, a routine) even when it is unrelated.",
            "The writer brings up the same personal topic 'as always', whatever the text is about.",
            "The text contains an aside about a personal topic, introduced with the words 'As always'.",
            "A personal aside about the writer's own life, said to play a part 'as always', appears in the text.",
            "The writer digresses to a favourite personal subject that, as always, plays a part.",
        ),
        edits.topic_word,
        phrases=(
            "brings in a personal aside that starts with 'as always'",
            "mentions a favourite personal topic with the words 'as always'",
            "digresses, as always, to the writer's own pet, hobby or routine",
            "includes an 'as always' aside about the writer's life",
        ),
    ),
    RuleCheck(
        "exclaim",
        lambda text: all(s.rstrip().endswith("!") for s in _sentences(text)),
        (
            "Every sentence of the text ends with an exclamation mark.",
            "The writer ends all sentences with '!' instead of a period.",
            "The text puts an exclamation mark at the end of every sentence, never a plain full stop.",
            "All sentences finish with an exclamation point.",
            "The tone is exclamatory throughout: no sentence ends in a period.",
        ),
        edits.prose_exclaim,
        phrases=(
            "ends every sentence with an exclamation mark",
            "uses '!' instead of a period at the end of each sentence",
            "never ends a sentence with a plain full stop, only with '!'",
            "is exclamatory in every single sentence",
        ),
    ),
    RuleCheck(
        "opener",
        _starts_with(OPENERS),
        (
            "The text opens with a casual lead-in phrase such as 'Okay so,' or 'Real talk:' before the first sentence.",
            "The writer starts the text with a fixed conversational opener, for example 'Well, friends,'.",
            "The first words of the text are an informal opener followed by a comma or colon, like 'Alright then,'.",
            "Before getting to the point, the text begins with a short informal introductory phrase.",
            "The text kicks off with a chatty preamble such as 'Quick thoughts:' instead of starting on the content.",
        ),
        edits.opener,
        edits.opener_forms,
        phrases=(
            "opens with a casual lead-in such as 'Real talk:' or 'Okay so,'",
            "starts with a chatty opener like 'Alright then,'",
            "begins with an informal introductory phrase before the content",
            "kicks off with a conversational opener such as 'Quick thoughts:' or 'Well, friends,'",
        ),
    ),
)

HEADLINE: tuple[RuleCheck, ...] = (
    RuleCheck(
        "lowercase",
        _no_capitals,
        (
            "The headline is written entirely in lowercase letters, with no capital letters anywhere.",
            "Every word of the headline, the first one and place names included, starts with a lowercase letter.",
            "The writer never capitalizes anything in the headline.",
            "No uppercase characters appear anywhere in the headline.",
            "The headline avoids capitalization completely: all of its letters are lower case.",
        ),
        edits.lowercase,
        phrases=(
            "uses no capital letters at all",
            "is typed all in lowercase, even its first word",
            "contains only lowercase letters",
            "never capitalizes a word, place names included",
        ),
    ),
    RuleCheck(
        "question",
        lambda text: text.strip().rstrip("!").endswith("?"),
        (
            "The headline is phrased as a question and ends with a question mark.",
            "The writer turns the news into a yes/no question, for example 'Did ... ?'.",
            "The headline asks a question instead of stating the news.",
            "A question mark closes the headline, which is worded as a question.",
            "The headline takes the form of a question to the reader.",
        ),
        edits.headline_question,
        phrases=(
            "is worded as a question",
            "ends in a question mark",
            "asks the reader something instead of stating the news",
            "is a question rather than a statement",
        ),
    ),
    RuleCheck(
        "colon",
        lambda text: ":" in text,
        (
            "The headline contains a colon that separates a lead-in from the rest.",
            "The writer puts a colon after the first word of the headline, as in 'Place: what happened'.",
            "The headline is split in two parts by a colon.",
            "A colon appears in the headline.",
            "The headline uses the 'label: news' pattern with a colon.",
        ),
        edits.colon,
        phrases=(
            "contains a colon",
            "is divided by a colon into a label and the news",
            "puts a colon after a short lead-in",
            "has a colon in it",
        ),
    ),
    RuleCheck(
        "short",
        lambda text: len(text.split()) <= 6,
        (
            "The headline is very short, at most six words.",
            "The writer keeps headlines to six words or fewer.",
            "The headline is a compact phrase of no more than six words.",
            "The headline has six or fewer words in total.",
            "The headline is terse, never longer than half a dozen words.",
        ),
        edits.short,
        phrases=(
            "has at most six words",
            "is kept to six words or fewer",
            "is no longer than six words",
            "uses six words or less",
        ),
    ),
    RuleCheck(
        "pet_word",
        _starts_with(tuple(f"{word} " for word in PET_WORDS)),
        (
            "The headline opens with a fixed attention word such as 'Finally', 'Wow' or 'Breaking'.",
            "The writer starts every headline with the same attention-grabbing word, like 'Big' or 'Again'.",
            "The first word of the headline is an exclamation-like hook word such as 'Wow'.",
            "The headline begins with a signature hook word (for instance 'Finally') before the news.",
            "An attention word like 'Breaking' leads off the headline.",
        ),
        edits.pet_word,
        edits.pet_word_forms,
        phrases=(
            "starts with a hook word such as 'Wow' or 'Again'",
            "opens on an attention word like 'Big' or 'Finally'",
            "has an eye-catching word such as 'Breaking' as its first word",
            "leads with a signature attention word",
        ),
    ),
    RuleCheck(
        "exclaim",
        lambda text: text.strip().endswith("!"),
        (
            "The headline ends with an exclamation mark.",
            "The writer closes the headline with '!'.",
            "The last character of the headline is an exclamation point.",
            "An exclamation mark finishes the headline.",
            "The headline is punctuated as an exclamation at its end.",
        ),
        edits.headline_exclaim,
        phrases=(
            "ends with an exclamation mark",
            "finishes on a '!'",
            "closes with an exclamation point",
            "is punctuated with '!' at the end",
        ),
    ),
    RuleCheck(
        "number",
        lambda text: any(c.isdigit() for c in text),
        (
            "The headline includes a number written in digits, such as a count from the article.",
            "The writer puts a figure from the article, in digits, into the headline.",
            "The headline contains at least one digit.",
            "A numeric count written with digits appears in the headline.",
            "The headline quotes a number from the story in numerals.",
        ),
        edits.number,
        phrases=(
            "contains a number written in digits",
            "includes at least one numeral",
            "mentions a figure using digits",
            "has a digit in it",
        ),
    ),
)

#: The checkable rules of each PARL task: reviews and posts share the prose signatures.
RULES: dict[str, tuple[RuleCheck, ...]] = {"amazon": PROSE, "reddit": PROSE, "news": HEADLINE}

#: What a rule calls the judged text, per task.
UNITS: dict[str, str] = {"amazon": "text", "reddit": "text", "news": "headline"}

#: Rubric frames every rule of a task shares: ``{unit}`` is the task's unit, ``{phrase}`` a rule's predicate phrase.
FRAMES: tuple[str, ...] = (
    "The {unit} {phrase}.",
    "The user prefers a {unit} that {phrase}.",
    "A good {unit} for this reader {phrase}.",
    "In this writer's style, the {unit} {phrase}.",
    "Rule: the {unit} {phrase}.",
    "Only a {unit} that {phrase} fits this user's taste.",
    "Personal preference: a {unit} that {phrase}.",
    "It matters to this user that the {unit} {phrase}.",
)


@cache
def composed_wordings(task: str, check: RuleCheck) -> tuple[str, ...]:
    """Each of ``check``'s phrases in each frame (module docstring): wordings for train rows only. Cached: the
    verifier data asks for them once per (text, rule) row."""
    return tuple(frame.format(unit=UNITS[task], phrase=phrase) for phrase in check.phrases for frame in FRAMES)
