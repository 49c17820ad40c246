"""PerSE prompts: the scalar and pairwise judge, and the data-preparation steps (anonymize,
summarize, title probe).

The judge's structure follows the paper (Figure 9): a reviewer profile of K past items, then the
query; the scalar judge answers ``[Review] <text> [Score] <1-10>``, the pairwise judge answers
``Plot A`` or ``Plot B``. ``scalar_request`` / ``pairwise_request`` turn a typed example into the
engine request, and are the only place that does, so training rows (``data_prep.perse.builders``) and
judge calls (``evaluators``) see byte-identical prompts. Profile plots are cut to ``profile_words``
words to keep K-item prompts short; the query plot is never cut.
"""

from __future__ import annotations

from collections.abc import Sequence

from persetrain.engine.types import ChatRequest
from persetrain.prompts.template import PromptTemplate, register
from persetrain.schema import PairwiseExample, ProfileReview, ScalarExample, ten_point_score

#: The scalar judge's output is ``f"{REVIEW_MARKER} <review> {SCORE_MARKER} <n>"``; the judge's
#: parser and the training targets both read these constants.
REVIEW_MARKER = "[Review]"
SCORE_MARKER = "[Score]"
SCORE_MIN, SCORE_MAX = 1, 10

#: The pairwise judge's closed answer set (for ``engine.choice_probs`` and for training targets).
PAIRWISE_CHOICES: tuple[str, str] = ("Plot A", "Plot B")

#: Default number of words of each profile plot shown in a prompt: scalar profiles hold K plots,
#: a pairwise profile holds one pair whose preferences may hinge on its last sentence (the ending).
PROFILE_WORDS = 40
PAIRWISE_PROFILE_WORDS = 100

#: The five Per-DOC aspects and the survey question each one comes from (paper, Appendix B).
ASPECT_QUESTIONS: dict[str, str] = {
    "Interestingness": "Which story plot is more interesting to you?",
    "Adaptability": "In your opinion, which one of the plots above could generate a more interesting book "
    "or movie (when a full story is written based on it)?",
    "Surprise": "Which story plot created more suspense and surprise?",
    "Character Development": "Which story's characters or events do you identify with or care for more?",
    "Ending": "Which story has a better ending?",
}

SCALAR = register(
    PromptTemplate(
        method="perse",
        task="scalar",
        system=(
            "You will read several plot summaries, each followed by the review and the score that one "
            "critic gave it. Work out what this critic likes and dislikes. Then read a new plot and write "
            "the review this critic would write about it, with the score they would give."
        ),
        user=(
            "Reviewer profile\n\n{profile}\n\n"
            "Query\nWrite this critic's review of the following plot.\n"
            "[The Start of Plot] {plot} [The End of Plot]\n"
            f"Reply in the form: {REVIEW_MARKER} <the critic's review> {SCORE_MARKER} "
            f"<a whole number from {SCORE_MIN} to {SCORE_MAX}>"
        ),
    )
)

PAIRWISE = register(
    PromptTemplate(
        method="perse",
        task="pairwise",
        system=(
            "You will read examples from one reader: two story plots written from the same premise, and "
            "which plot the reader preferred on each question. Work out this reader's taste. Then compare "
            "a new pair of plots and choose the one this reader would prefer on the question asked."
        ),
        user=(
            "Reviewer profile\n\n{profile}\n\n"
            "Query\nBased on these preferences, compare the following two plots.\n"
            "[Premise] {premise}\n"
            "[The Start of Plot A] {plot_a} [The End of Plot A]\n"
            "[The Start of Plot B] {plot_b} [The End of Plot B]\n"
            "[Aspect] {aspect}: {question}\n"
            f'Answer with exactly "{PAIRWISE_CHOICES[0]}" or "{PAIRWISE_CHOICES[1]}".'
        ),
    )
)

ANONYMIZE = register(
    PromptTemplate(
        method="perse",
        task="anonymize",
        user=(
            "Here is a plot:\n{plot}\n\n"
            "List every character name and every place name in this plot, and invent a new, distinctive "
            "name for each one. Relatives who share a family name should still share one new family name. "
            'Reply in JSON as {{"names": [{{"name": "<name as written in the plot>", "new_name": "<new name>"}}]}}. '
            "For example, renaming 'Diego' to 'Sherry Evans' is the entry "
            '{{"name": "Diego", "new_name": "Sherry Evans"}}.'
        ),
    )
)

SUMMARIZE = register(
    PromptTemplate(
        method="perse",
        task="summarize",
        user="Here is a story:\n{plot}\n\nSummarize the key events of this story clearly and briefly.",
    )
)

TITLE = register(
    PromptTemplate(
        method="perse",
        task="title",
        user=(
            "Here is the plot of a movie:\n{plot}\n\n"
            'If you know which movie this is, give its title. Reply in JSON with the key "title"; '
            'if you cannot identify the movie, answer "N/A".'
        ),
    )
)


def truncate_words(text: str, words: int) -> str:
    """The first ``words`` words of ``text``, with an ellipsis when something was cut."""
    parts = text.split()
    return " ".join(parts) if len(parts) <= words else " ".join(parts[:words]) + " ..."


def scalar_completion(review: str, score: int) -> str:
    """The scalar judge's answer format, also the training target."""
    return f"{REVIEW_MARKER} {' '.join(review.split())} {SCORE_MARKER} {score}"


def scalar_profile(profile: Sequence[ProfileReview], score_max: int, profile_words: int = PROFILE_WORDS) -> str:
    """A reviewer's past plots (cut to ``profile_words``), each with their review and score on 1-10.

    The scalar judge's profile block; the preference datasets show a reviewer to a reward model the
    same way, so both judges read one wording.
    """
    return "\n\n".join(
        f"[The Start of Plot {n}] {truncate_words(item.plot, profile_words)} [The End of Plot {n}]\n"
        + scalar_completion(item.review, ten_point_score(item.score, score_max))
        for n, item in enumerate(profile, start=1)
    )


def scalar_request(example: ScalarExample, profile_words: int = PROFILE_WORDS) -> ChatRequest:
    """The judge's request for a scalar example; profile scores are shown on the judge's 1-10 scale."""
    return SCALAR.render(
        id=example.id,
        profile=scalar_profile(example.profile, example.score_max, profile_words),
        plot=example.query_plot,
    )


def pairwise_request(example: PairwiseExample, profile_words: int = PAIRWISE_PROFILE_WORDS) -> ChatRequest:
    """The judge's request for a pairwise example; profile answers on one plot pair are grouped."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for item in example.profile:
        groups.setdefault((item.premise, item.plot_a, item.plot_b), []).append(f"[{item.aspect}] Plot {item.preferred}")
    blocks = [
        f"[Premise] {premise}\n"
        f"[The Start of Plot A] {truncate_words(plot_a, profile_words)} [The End of Plot A]\n"
        f"[The Start of Plot B] {truncate_words(plot_b, profile_words)} [The End of Plot B]\n"
        "[Preferences] " + " ".join(answers)
        for (premise, plot_a, plot_b), answers in groups.items()
    ]
    return PAIRWISE.render(
        id=example.id,
        profile="\n\n".join(blocks),
        premise=example.premise,
        plot_a=example.plot_a,
        plot_b=example.plot_b,
        aspect=example.aspect,
        question=ASPECT_QUESTIONS[example.aspect],
    )


def pairwise_completion(preferred: str) -> str:
    """``"A"`` -> ``"Plot A"``: the pairwise judge's answer, also the training target."""
    return {"A": PAIRWISE_CHOICES[0], "B": PAIRWISE_CHOICES[1]}[preferred]
