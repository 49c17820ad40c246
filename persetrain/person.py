"""Who an example is about, and the two probes that test whether a judge reads it.

Every task kind keeps its person in one field: a stated preference (``mcq``), a profile of earlier
reviews, annotations or texts (``scalar``, ``pairwise``, ``reference``), a history (``rubric``), or a
preference row's person column (``pairwise`` from preference rows: a persona, a stated preference or a profile,
rendered by ``persetrain.prompts.preference.person_of``).

* ``blind_examples`` empties that field: the same judge, the same candidates, no person. A judge
  that beats its blind self by little has learned which answers the dataset likes, not the person.
* ``swapped_examples`` gives each example another example's person (a seeded derangement that
  avoids handing an example a person identical to its own where the data allows): a judge that reads
  the person now follows the wrong one and should fall toward chance.

The probed examples are copies that skip validation on purpose: a real record must name its person,
a probe's copy is the one place where the person is absent or belongs to someone else. Evaluators
that render a person show an absent one as ``NOT_STATED`` (``stated``); the learned judges switch to
their person-blind prompt instead.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from pydantic import BaseModel

from persetrain.schema import (
    McqExample,
    PairwiseExample,
    PreferencePairExample,
    ReferenceExample,
    RubricExample,
    ScalarExample,
)

#: The field that holds the person, by example type.
PERSON_FIELDS: dict[type[BaseModel], str] = {
    McqExample: "preference",
    ScalarExample: "profile",
    PairwiseExample: "profile",
    PreferencePairExample: "person",
    ReferenceExample: "profile",
    RubricExample: "history",
}

#: How a prompt shows a person the blind probe removed.
NOT_STATED = "(not stated)"


def person_field(example: BaseModel) -> str:
    try:
        return PERSON_FIELDS[type(example)]
    except KeyError:
        raise ValueError(f"a {type(example).__name__} names no person to probe") from None


def has_person(example: BaseModel) -> bool:
    """False for an example whose person the blind probe removed."""
    value = getattr(example, person_field(example))
    return bool(value.strip() if isinstance(value, str) else value)


def stated(person: str) -> str:
    """A person's text as a prompt shows it: ``NOT_STATED`` when the blind probe emptied it."""
    return person if person.strip() else NOT_STATED


def blind_examples(examples: Sequence[BaseModel]) -> list:
    """Every example with its person removed (an empty preference, profile or history)."""
    return [
        ex.model_copy(update={person_field(ex): "" if isinstance(getattr(ex, person_field(ex)), str) else []})
        for ex in examples
    ]


def _person_key(example: BaseModel) -> str:
    value = getattr(example, person_field(example))
    if isinstance(value, str):
        return value.strip()
    return json.dumps([v.model_dump() if isinstance(v, BaseModel) else v for v in value], sort_keys=True)


def derangement(keys: Sequence[str], seed: int = 0) -> list[int]:
    """``donor[i]``: whose person example i gets; never i itself, and a different key wherever one can be had.

    Sattolo's algorithm draws a random cyclic permutation (no fixed point); a receiver whose donor
    holds the same key (two questions of one preference) then trades donors with another receiver
    when the trade leaves both with a different key. Each trade fixes one receiver and breaks none.
    """
    n = len(keys)
    if n < 2:
        raise ValueError(f"the swap probe needs at least two examples to exchange persons, got {n}")
    rng = random.Random(seed)
    donor = list(range(n))
    for i in range(n - 1, 0, -1):
        j = rng.randrange(i)
        donor[i], donor[j] = donor[j], donor[i]
    for i in range(n):
        if keys[donor[i]] != keys[i]:
            continue
        for j in rng.sample(range(n), n):
            if keys[donor[j]] != keys[i] and keys[donor[i]] != keys[j]:
                donor[i], donor[j] = donor[j], donor[i]
                break
    return donor


def swapped_examples(examples: Sequence[BaseModel], seed: int = 0) -> list:
    """Every example with another example's person (``derangement`` of the persons, seeded)."""
    donor = derangement([_person_key(ex) for ex in examples], seed)
    return [
        ex.model_copy(update={person_field(ex): getattr(examples[d], person_field(examples[d]))})
        for ex, d in zip(examples, donor, strict=True)
    ]


def other_persons(persons: Sequence[str], topics: Sequence[str], seed: int, k: int = 1) -> list[list[str]]:
    """For each row, ``k`` persons other than its own: a seeded draw without replacement, from the row's *topic*
    first, then (where the topic has too few) from the others.

    Same-topic persons are the hard negatives: they share the topic's words (two diets, two hotel tastes), so
    only reading what this person wants tells them apart, where a person from another topic is told apart by
    its vocabulary alone. Used wherever a judge is trained to tell its own person from others (the reward
    model's person contrast, the verdict judge's swapped-person rows).
    """
    by_topic: dict[str, dict[str, None]] = {}  # each topic's distinct persons, in row order
    for person, topic in zip(persons, topics, strict=True):
        by_topic.setdefault(topic, {})[person] = None
    everyone = dict.fromkeys(persons)
    if len(everyone) <= k:
        raise ValueError(f"drawing {k} other person(s) needs at least {k + 1} different persons (has {len(everyone)})")
    rng = random.Random(seed)
    drawn = []
    for person, topic in zip(persons, topics, strict=True):
        near = [p for p in by_topic[topic] if p != person]
        mine = rng.sample(near, min(k, len(near)))
        if len(mine) < k:
            far = [p for p in everyone if p not in by_topic[topic]]
            mine += rng.sample(far, k - len(mine))
        drawn.append(mine)
    return drawn
