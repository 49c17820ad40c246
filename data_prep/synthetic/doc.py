"""SYNTHETIC DOC-like plot pairs and annotators (``data_prep.synthetic.perse``): each plot has a tone, setting,
twist, cast and ending; each annotator prefers one value per aspect and picks the plot that has it."""

from __future__ import annotations

import random

from data_prep.synthetic.names import family_name, first_name
from persetrain.prompts.perse import ASPECT_QUESTIONS

#: A DOC question outside the five PerSE aspects, planted so the builder's question filter has work.
EXTRA_QUESTION = "Which story plot is more coherent?"

# DOC-like plots: five attributes, one per aspect an annotator cares about.
_DOC_ATTRIBUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "Interestingness": ("tone", ("dark", "light")),
    "Adaptability": ("setting", ("city", "countryside", "sea", "space")),
    "Surprise": ("twist", ("twist", "straight")),
    "Character Development": ("cast", ("ensemble", "loner")),
    "Ending": ("ending", ("happy", "bittersweet", "tragic")),
}
_SETTINGS = {
    "city": "a crowded harbour city full of markets and tenements",
    "countryside": "a farming valley far from any town",
    "sea": "an old fishing boat at sea",
    "space": "a research station orbiting a cold planet",
}
_ROLES = (
    "retired teacher",
    "struggling artist",
    "young doctor",
    "ship's cook",
    "night-shift guard",
    "failed inventor",
    "village postmaster",
    "travelling musician",
)
_DISCOVERIES = (
    "a letter addressed to a stranger",
    "a door that was not there the day before",
    "an old photograph of themselves",
    "a debt their father never paid",
    "a child who already knows their name",
    "a diary written in their own hand",
)
_TONE_BEATS = {
    "dark": "{a} is haunted by an old crime and trusts no one, least of all {b}.",
    "light": "{a} throws themselves into the puzzle with cheerful curiosity, teasing {b} along the way.",
}
_TWIST_BEATS = {
    "twist": "Halfway through it turns out that {b} planned the whole thing from the start.",
    "straight": "{a} follows the trail step by step, and each clue leads plainly to the next.",
}
_CAST_BEATS = {
    "ensemble": "{a}, {b} and {c} share the work, and each of them changes because of the others.",
    "loner": "{a} faces every problem alone and learns to rely on no one but themselves.",
}
_ENDING_BEATS = {
    "happy": "In the end {a} sets everything right and is welcomed home.",
    "bittersweet": "In the end {a} succeeds, but has to leave {b} behind forever.",
    "tragic": "In the end {a} fails, and the cost falls on everyone {a} loved.",
}


def _doc_plot(rng: random.Random, attrs: dict[str, str]) -> str:
    names = [f"{first_name(rng)} {family_name(rng)}" for _ in range(3)]
    a, b, c = names
    fill = {"a": a.split()[0], "b": b.split()[0], "c": c.split()[0]}
    characters = f"{a}, {b} and {c}." if attrs["cast"] == "ensemble" else f"{a} and {b}."
    outline = [
        _TONE_BEATS[attrs["tone"]],
        _TWIST_BEATS[attrs["twist"]],
        _CAST_BEATS[attrs["cast"]],
        _ENDING_BEATS[attrs["ending"]],
    ]
    steps = " ".join(f"{n}. {beat.format(**fill)}" for n, beat in enumerate(outline, start=1))
    return f"Setting: The story is set in {_SETTINGS[attrs['setting']]}.\nCharacters: {characters}\nOutline: {steps}"


def doc_sample(
    rng: random.Random,
    n_premises: int,
    n_annotators: int,
    pairs_per_annotator: tuple[int, int],
    n_sparse_annotators: int,
) -> tuple[list[dict], dict]:
    pairs, truth_pairs = [], {}
    for p in range(n_premises):
        premise = (
            f"A {rng.choice(_ROLES)} stumbles upon {rng.choice(_DISCOVERIES)}, but following it will cost them dearly."
        )
        for q in range(rng.choice((1, 2))):
            pair_id = f"doc-{p:03d}-{q}"
            while True:
                attrs = [{name: rng.choice(values) for name, values in _DOC_ATTRIBUTES.values()} for _ in "AB"]
                if sum(attrs[0][k] != attrs[1][k] for k in attrs[0]) >= 2:
                    break
            pairs.append(
                {
                    "pair_id": pair_id,
                    "premise": premise,
                    "plot_a": _doc_plot(rng, attrs[0]),
                    "plot_b": _doc_plot(rng, attrs[1]),
                }
            )
            truth_pairs[pair_id] = {"A": attrs[0], "B": attrs[1]}
    rows, truth_annotators = [], {}
    for j in range(n_annotators + n_sparse_annotators):
        annotator_id = f"worker-{j:04d}"
        prefs = {aspect: rng.choice(values) for aspect, (_, values) in _DOC_ATTRIBUTES.items()}
        truth_annotators[annotator_id] = {"prefers": prefs, "sparse": j >= n_annotators}
        count = rng.randint(*pairs_per_annotator) if j < n_annotators else 1
        for pair in rng.sample(pairs, min(count, len(pairs))):
            truth = truth_pairs[pair["pair_id"]]
            for aspect, question in ASPECT_QUESTIONS.items():
                attribute = _DOC_ATTRIBUTES[aspect][0]
                match_a = truth["A"][attribute] == prefs[aspect]
                match_b = truth["B"][attribute] == prefs[aspect]
                if match_a != match_b:
                    answer = "A" if match_a else "B"
                    if rng.random() < 0.1:  # annotators are not perfectly consistent
                        answer = "B" if answer == "A" else "A"
                elif rng.random() < 0.6:
                    answer = "both" if match_a else "neither"
                else:
                    answer = rng.choice("AB")
                rows.append({**pair, "annotator_id": annotator_id, "question": question, "answer": answer})
            rows.append(
                {
                    **pair,
                    "annotator_id": annotator_id,
                    "question": EXTRA_QUESTION,
                    "answer": rng.choice(("A", "B", "both")),
                }
            )
    truth = {
        "rule": "an annotator prefers, per aspect, the plot whose attribute equals their preferred value "
        "(10% of answers flipped); when both or neither plot has it they answer both/neither "
        "60% of the time, else at random",
        "aspect_attribute": {a: attr for a, (attr, _) in _DOC_ATTRIBUTES.items()},
        "pairs": truth_pairs,
        "annotators": truth_annotators,
    }
    return rows, truth
