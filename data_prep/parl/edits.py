"""Counterfactual edits of a text for the SYNTHETIC PARL signatures: give a text a signature, or take it away.

Why: each synthetic user writes with the same few signatures, so in a user's texts the signatures travel
together and with the user's wording. A verifier trained on those texts alone learns the users (measured: a
SmolLM2 verifier at 0.93 on its training checks answered 0.64 on held-out users' texts, with the training
wordings) instead of the property a rule names. An edited copy of a training text that differs in one
signature only is a minimal pair: the answer changes and nothing else does, so only reading the property
explains it. ``persetrain prepare verifier --counterfactuals`` adds them to the train split; the labels come
from the checkers (``data_prep.parl.signatures``), never from what an edit meant to do, and an edit that
leaves its signature unchanged is dropped.

Every edit is ``edit(text, want, rng) -> text``: the text with (``want``) or without the signature.

Some signatures are a class of forms (five pet words, five openers) and each user writes one of them, so a
verifier sees most forms only in a few users' texts. Measured on the 1,350-step news verifier: it accepted
held-out headlines opening with 'Big' under the one training wording that names 'Big' (26 of 26) and under
no other wording (0-4 of 26). A *form swap* (``forms(text) -> [text, ...]``) keeps the signature and changes
its form: the same text with each of the class's other forms, labelled by the same checker.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from data_prep.synthetic.parl import OPENERS, PET_WORDS, QUESTIONS, SIGNOFFS, TOPICS

Edit = Callable[[str, bool, random.Random], str]
Forms = Callable[[str], list[str]]

_END = "!?."
_SENTENCE_END = re.compile(r"([.!?]+)(?=\s|$)")
_NAMES = ("Mara", "Tobin", "Ilse", "Ravi", "June")


def _split_end(text: str) -> tuple[str, str]:
    """``text`` without its closing punctuation, and that punctuation."""
    body = text.rstrip()
    stripped = body.rstrip(_END)
    return stripped, body[len(stripped) :]


def _split_signoff(text: str) -> tuple[str, str]:
    body, newline, signoff = text.strip().partition("\n")
    return body, newline + signoff


def _capitalize_sentences(text: str) -> str:
    return re.sub(r"(^|[.!?]\s+)([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)


# ------------------------------------------------------------------------------------ headlines
def lowercase(text: str, want: bool, rng: random.Random) -> str:
    return text.lower() if want else _capitalize_sentences(text)


def headline_question(text: str, want: bool, rng: random.Random) -> str:
    body, end = _split_end(text)
    if want:
        return body + "?" + ("!" if "!" in end else "")
    return body + end.replace("?", "")


def colon(text: str, want: bool, rng: random.Random) -> str:
    if not want:
        return text.replace(":", "")
    first, _, rest = text.partition(" ")
    return f"{first}: {rest}" if rest else f"{first}:"


def short(text: str, want: bool, rng: random.Random) -> str:
    body, end = _split_end(text)
    words = body.split()
    if want:
        return " ".join(words[: rng.randint(2, 6)]) + end
    filler = ("after", "a", "long", "local", "debate", "this", "week")
    return " ".join([*words, *filler[: max(0, 7 - len(words))]]) + end


def _swap_prefix(text: str, prefixes: tuple[str, ...]) -> list[str]:
    """``text`` with its leading prefix (one of ``prefixes``, any case) replaced by each other one, cased like it."""
    body = text.strip()
    for prefix in prefixes:
        found = body[: len(prefix)]
        if found.lower() == prefix.lower():
            case = str.lower if found.islower() else str.upper if found.isupper() and len(found) > 1 else str
            return [case(other) + body[len(prefix) :] for other in prefixes if other != prefix]
    return []


def pet_word_forms(text: str) -> list[str]:
    return _swap_prefix(text, tuple(f"{word} " for word in PET_WORDS))


def opener_forms(text: str) -> list[str]:
    return _swap_prefix(text, OPENERS)


def pet_word(text: str, want: bool, rng: random.Random) -> str:
    first, _, rest = text.strip().partition(" ")
    if want:
        return f"{rng.choice(PET_WORDS)} {text.strip()}"
    return rest if rest and first.lower() in {w.lower() for w in PET_WORDS} else text


def headline_exclaim(text: str, want: bool, rng: random.Random) -> str:
    body = text.rstrip()
    return body.rstrip(".") + "!" if want else body.rstrip("!")


def number(text: str, want: bool, rng: random.Random) -> str:
    if not want:
        return re.sub(r"\s*\(?\d+\)?", "", text)
    body, end = _split_end(text)
    return f"{body} ({rng.randint(2, 40)}){end}"


# ----------------------------------------------------------------------------- reviews and posts
def signoff(text: str, want: bool, rng: random.Random) -> str:
    body, _ = _split_signoff(text)
    return f"{body}\n{rng.choice(SIGNOFFS).format(name=rng.choice(_NAMES))}" if want else body


def short_sentences(text: str, want: bool, rng: random.Random) -> str:
    body, tail = _split_signoff(text)
    parts = _SENTENCE_END.split(body)  # sentence, its end, sentence, its end, ..., rest
    sentences = [(parts[i].strip(), parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
    if want:
        body = " ".join(" ".join(s.split()[: rng.randint(4, 10)]) + end for s, end in sentences)
    else:
        s, end = sentences[0] if sentences else (body, ".")
        long = f"{s}, which I keep coming back to again and again after all these years{end}"
        body = " ".join([long, *(f"{t}{e}" for t, e in sentences[1:])])
    return body + tail


def prose_question(text: str, want: bool, rng: random.Random) -> str:
    body, tail = _split_signoff(text)
    if want:
        return f"{body} {rng.choice(QUESTIONS).capitalize()}{tail}"
    kept = [s for s in re.split(r"(?<=[.!?])\s+", body) if "?" not in s]
    return " ".join(kept) + tail


def topic_word(text: str, want: bool, rng: random.Random) -> str:
    body, tail = _split_signoff(text)
    sentences = re.split(r"(?<=[.!?])\s+", body)
    if want:
        sentences.insert(1, f"As always, {rng.choice(TOPICS)} plays a part.")
    else:
        sentences = [s for s in sentences if "as always," not in s.lower()]
    return " ".join(sentences) + tail


def prose_exclaim(text: str, want: bool, rng: random.Random) -> str:
    body, tail = _split_signoff(text)
    if want:  # a question keeps its mark and gains "!", as the synthetic users write it
        body = _SENTENCE_END.sub(
            lambda m: m.group(1) if m.group(1).endswith("!") else m.group(1).replace(".", "") + "!", body
        )
    else:
        body = _SENTENCE_END.sub(lambda m: "?" if "?" in m.group(1) else ".", body)
    return body + tail


def opener(text: str, want: bool, rng: random.Random) -> str:
    if want:
        return f"{rng.choice(OPENERS)} {text.strip()}"
    for prefix in OPENERS:
        if text.strip().lower().startswith(prefix.lower()):
            rest = text.strip()[len(prefix) :].strip()
            return rest[:1].upper() + rest[1:]
    return text
