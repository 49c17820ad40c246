"""Polarity-flipped PrefEval questions: the same options under the opposite preference, for training only.

On PrefEval the preference-following option usually stands apart from three distractors that share what
the person avoids, so a judge can rank most questions from the options alone and never read the person
(``benchmarks/README.md``: the person-blind ablation scores as well as the judge). A flipped copy of a
question says the opposite ("I dislike X" -> "I love X") and keeps the options: under it a distractor,
which has the X the person now wants, is preferred to the original gold option. The two copies share
every option word and differ only in the person, so the options alone cannot fit both; only a judge that
reads the preference's polarity can.

The flip is a fixed list of word swaps (``SWAPS``), applied once, left to right, to every polarity phrase
of the preference. A preference is not flipped when it holds none, or when it states a fact about the
person that a swap would contradict (a diet, an allergy, a fear: ``FIXED_FACTS``); reasons
("due to ...", "because ...") are dropped, since they argue for the original side. On the 8 given topics
263 of 391 preferences flip. Validation topics are never flipped: this is training data only.
"""

from __future__ import annotations

import random
import re
from dataclasses import replace

from data_prep.preference_sources import TRAIN, Group
from data_prep.prefeval import shuffle_options

#: Polarity phrases and their opposites; where two match at one place, the earlier in the list wins.
SWAPS: tuple[tuple[str, str], ...] = (
    (r"have an? (?:strong |extreme |intense )?(?:aversion|dislike) (?:to|for)", "have a strong liking for"),
    (r"am not a (?:big )?fan of", "am a big fan of"),
    (r"(?:strongly |really |absolutely )?(?:dislike|despise|hate|detest)", "love"),
    (r"(?:can't|cannot|can’t) (?:stand|handle)", "love"),
    (r"prefer to avoid", "prefer"),
    (r"(?:strictly |strongly |absolutely )?avoid", "seek out"),
    (r"avoiding", "seeking out"),
    (r"(?:absolutely )?refuse to", "always choose to"),
    (r"prefer not to", "prefer to"),
    (r"prefer not", "prefer"),
    (r"(?:do not|don't|don’t|never) (like|enjoy|wear|use|eat|play|want|stay|consume)", r"always \1"),
    (r"(?:much |strongly |strictly )?prefer", "dislike"),
    (r"only (eat|wear|consume|dine|buy|stay|play|use|purchase)", r"never \1"),
    (r"(?:really )?(?:love|enjoy)", "dislike"),
)
_PATTERN = re.compile("|".join(rf"(?P<s{i}>\b{p}\b)" for i, (p, _) in enumerate(SWAPS)), re.IGNORECASE)

#: Facts about the person that flipping the verbs would contradict ("I am vegan ... I love meat").
FIXED_FACTS = re.compile(
    r"\b(vegan|vegetarian|allerg|intoleran|gluten|lactose|diet|buddhist|muslim|jewish|hindu|kosher|halal|"
    r"phobia|afraid|fear|scared|nause|injur|issues|condition|religio|comfortable|uncomfortable)",
    re.IGNORECASE,
)
#: Reasons for the original side, dropped from the flip.
_REASON = re.compile(
    r",?\s+(?:due to|because|as I|since|for (?:my|their|its)|and find (?:them|it)|they make me|which make)"
    r".*?(?=[.;]|$)",
    re.IGNORECASE,
)


def _swap(match: re.Match) -> str:
    pattern, replacement = SWAPS[int(match.lastgroup[1:])]
    return re.match(pattern, match.group(0), re.IGNORECASE).expand(replacement)


def flip_preference(preference: str) -> str | None:
    """The preference with every polarity phrase reversed, or ``None`` when it cannot be flipped safely."""
    if FIXED_FACTS.search(preference):
        return None
    flipped, swaps = _PATTERN.subn(_swap, _REASON.sub("", preference))
    return flipped if swaps else None


def flipped_groups(groups: list[Group], seed: int) -> list[Group]:
    """A flipped copy of every train PrefEval group whose preference flips: two options, one seeded
    distractor (preferred now) and the original gold option, in a seeded order; id ``<id>:flipped``."""
    out = []
    for group in groups:
        if group.source != "prefeval" or group.split != TRAIN:
            continue
        person = flip_preference(group.person)
        if person is None:
            continue
        group_id = f"{group.id}:flipped"
        distractors = [o for k, o in enumerate(group.options) if k != group.gold]
        chosen = random.Random(f"{seed}-{group_id}").choice(distractors)
        options, gold = shuffle_options([chosen, group.options[group.gold]], f"{seed}-{group_id}")
        out.append(replace(group, id=group_id, person=person, options=tuple(options), gold=gold, explanation=""))
    return out
