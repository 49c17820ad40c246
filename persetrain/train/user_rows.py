"""A user's own rows as each trainer's rows, written with the same builders ``persetrain prepare`` uses.

Rows come from ``persetrain.rows`` (a file, a folder of split files, a saved ``datasets`` folder or a Hub id) in
TRL's layouts. A preference row (``prompt`` / ``chosen`` / ``rejected``, standard or conversational, the prompt
explicit or implicit) is read as a :class:`persetrain.rows.PreferencePair` and becomes a one-question group of two
options, the chosen one preferred, handed to the builder of the trainer's view:

- ``persetrain rm``: ``pair_rows`` of ``persetrain prepare preference``: ``prompt`` = ``rm_context(person,
  request)``, ``chosen`` / ``rejected`` the two responses, ``prompt_blind`` without the person;
- ``persetrain sft`` (the verifier): ``verifier_rows``: the ``VERIFIER`` question about each response, answered
  ``yes`` for the chosen one and ``no`` for the other;
- ``persetrain grpo`` (the verdict judge): ``choice_rows`` of ``persetrain prepare verdict`` in verdict mode, the two
  orders of the pair adjacent (what ``verdict-consistent`` compares).

So a trained model reads at evaluation (``persetrain evaluate --task pairwise``) the very text it was trained on.
Rows without a person column train the person-blind form, said once. Prompt-completion rows go to ``sft`` as they
are (TRL's own format); a person column, when there is one, enters their prompt through the same person line.
"""

from __future__ import annotations

from collections.abc import Callable

from datasets import Dataset

from data_prep.preference.prepare import pair_rows, verifier_rows
from data_prep.preference.sources import TRAIN, Group
from data_prep.verdict.prepare import choice_rows
from persetrain.io import InputError
from persetrain.prompts.preference import PERSON_LINE
from persetrain.rows import PreferencePair, Rows, is_preference, person_column_of, person_value, preference_pairs

#: Orders of a pair's two responses in the verdict judge's rows (both, adjacent).
VERDICT_ORDERS = 2
#: What ``Group.source`` says of a user's rows (the judge's prompt for a person shown by a label and a text).
SOURCE = "user"


def group_of(pair: PreferencePair) -> Group:
    """A preference pair as ``persetrain prepare preference``'s group: one request, two options, the first preferred."""
    return Group(
        id=pair.id,
        source=SOURCE,
        topic="",
        split=TRAIN,
        person=pair.person if pair.person is not None else "",
        person_label=pair.person_label,
        request=pair.prompt,
        options=(pair.chosen, pair.rejected),
        gold=0,
    )


def _blind(rows: list[dict]) -> list[dict]:
    """Rows of a plain preference (no person column): the person-blind prompt is the prompt."""
    return [{**row, "prompt": row["prompt_blind"]} for row in rows]


def _pairs_view(rows: Rows, split: str, person_column: str | None, build: Callable[[Group], list[dict]]) -> Dataset:
    pairs = preference_pairs(rows, split, person_column)
    personal = pairs[0].person is not None
    out = [row for pair in pairs for row in build(group_of(pair))]
    return Dataset.from_list(out if personal else _blind(out))


def reward_rows(rows: Rows, split: str, person_column: str | None) -> Dataset:
    """``persetrain rm``'s pairs: ``prompt`` (the person template and the request), ``chosen``, ``rejected``; rows in
    another layout (listwise ones) as they are."""
    if not is_preference(rows):
        return rows.data
    return _pairs_view(rows, split, person_column, pair_rows)


def verifier_view(rows: Rows, split: str, person_column: str | None) -> Dataset:
    """``persetrain sft``'s verifier rows from preference rows; prompt-completion rows as they are, the person
    line put before their prompt when a person column is there."""
    if is_preference(rows):
        return _pairs_view(rows, split, person_column, verifier_rows)
    column = person_column_of(rows, person_column)
    if column is None:
        return rows.data
    if not {"prompt", "completion"} <= set(rows.data.column_names):
        return rows.data  # load_splits names the missing columns

    def with_person(row: dict, i: int) -> dict:
        label, person = person_value(rows, i, column)
        line = PERSON_LINE.format(person_label=label, person=person)
        prompt = row["prompt"]
        if isinstance(prompt, str):
            return {"prompt": f"{line}\n\n{prompt}"}
        users = [k for k, m in enumerate(prompt) if m.get("role") == "user"]
        if not users:
            raise InputError(rows.where, "holds no user message to show the person in", rows.record(i), "prompt")
        first = users[0]
        shown = {**prompt[first], "content": f"{line}\n\n{prompt[first]['content']}"}
        return {"prompt": [*prompt[:first], shown, *prompt[first + 1 :]]}

    return rows.data.map(with_person, with_indices=True, desc="person into the prompt")


def verdict_view(rows: Rows, split: str, person_column: str | None, seed: int) -> Dataset:
    """``persetrain grpo``'s verdict judge rows (verdict mode, both orders of each pair adjacent) from preference rows;
    other rows (a conversational ``prompt`` and the reward's columns) as they are."""
    if not is_preference(rows):
        return rows.data
    return _pairs_view(rows, split, person_column, lambda group: choice_rows(group, "verdict", VERDICT_ORDERS, seed))
