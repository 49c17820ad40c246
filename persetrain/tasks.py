"""Task kinds: what an example of a task is, and how judgments of it are scored and reported.

A dataset declares its task kind (``build_info.json`` of a prepared dataset, ``dataset.json`` beside
a JSONL dataset, or the reader of a foreign layout such as PrefEval's), so nothing guesses it from
column names. The runner looks the kind up here and hands each system's judgments to its metric
function; the numbers themselves come from the pure functions in ``persetrain.metrics``. A new task
kind is its record in ``schema.py``, its metric functions in ``metrics/`` and one ``register_task``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from persetrain.metrics import correlations, pairwise_accuracy
from persetrain.metrics.expert import per_target_means
from persetrain.metrics.mcq import mcq_metrics
from persetrain.metrics.pairwise import preference_accuracy
from persetrain.metrics.parl import parl_metrics, runs_from_checks
from persetrain.report import pairwise_report, scalar_report
from persetrain.schema import (
    Judgment,
    McqExample,
    PairwiseExample,
    PreferencePairExample,
    ReferenceExample,
    RubricExample,
    ScalarExample,
    uneven_outputs,
)

Metrics = Callable[[Sequence, list[Judgment]], dict]
Report = Callable[[Path, Sequence, Mapping[str, list[Judgment]], Mapping[str, dict]], dict[str, str]]


#: The first record of a dataset that breaks a rule across records: ``(index, field, problem)``, or None.
Agreement = Callable[[Sequence], tuple[int, str, str] | None]


@dataclass(frozen=True)
class TaskKind:
    """``metrics(examples, judgments)`` scores one system; ``report`` renders all systems' sections.

    ``agreement`` checks what no single record can show and the dataset readers apply to every file
    (a reference dataset's records all hold the same systems).
    """

    name: str
    example: type[BaseModel]
    metrics: Metrics
    report: Report | None = None
    agreement: Agreement | None = None
    #: Whether a row in TRL's preference layout (``prompt`` / ``chosen`` / ``rejected``, a person) is a record of
    #: this kind too, read as a ``PreferencePairExample``: the pairwise kind's, beside Per-DOC's own records.
    preference_rows: bool = False


_TASKS: dict[str, TaskKind] = {}


def register_task(kind: TaskKind) -> TaskKind:
    _TASKS[kind.name] = kind
    return kind


def get_task(name: str) -> TaskKind:
    if name not in _TASKS:
        raise ValueError(f"unknown task kind {name!r}; known task kinds: {', '.join(sorted(_TASKS))}")
    return _TASKS[name]


def by_example(examples: Sequence, judgments: Sequence[Judgment]) -> list[Judgment | None]:
    """The judgment of each example in the examples' order; None where a system gave none."""
    found = {j.example_id: j for j in judgments}
    return [found.get(ex.id) for ex in examples]


def scalar_metrics(examples: Sequence[ScalarExample], judgments: list[Judgment]) -> dict:
    """Pearson / Spearman / Kendall against the true scores; unparsed judgments counted, never dropped."""
    pred = [j.score if j is not None and j.parsed else None for j in by_example(examples, judgments)]
    top = max(ex.score_max for ex in examples)
    return correlations(pred, [ex.score for ex in examples], scale=(1, top))


def pairwise_metrics(examples: Sequence[PairwiseExample | PreferencePairExample], judgments: list[Judgment]) -> dict:
    """Per-DOC: accuracy per aspect and their macro average (PerSE Table 3). Preference rows: the share of pairs
    whose chosen response wins, ties (a judgment that prefers neither) counted apart from unreadable ones."""
    found = by_example(examples, judgments)
    if examples and isinstance(examples[0], PreferencePairExample):
        parsed = [j is not None and j.parsed for j in found]
        choices = [j.choice if ok else None for j, ok in zip(found, parsed, strict=True)]
        return preference_accuracy(choices, parsed, [ex.preferred for ex in examples])
    pred = [j.choice if j is not None and j.parsed else None for j in found]
    return pairwise_accuracy(pred, [ex.preferred for ex in examples], [ex.aspect for ex in examples])


def one_pair_layout(examples: Sequence) -> tuple[int, str, str] | None:
    """The first record of a pairwise dataset in the other layout than the first record's (Per-DOC's plots, or a
    preference row): one dataset, one layout, so that one metric reads it."""
    first = type(examples[0]) if examples else None
    for i, ex in enumerate(examples):
        if type(ex) is not first:
            layout = "a preference row (chosen / rejected)" if first is PairwiseExample else "a Per-DOC record"
            field = "chosen" if first is PreferencePairExample else "plot_a"
            return i, field, f"missing: the first record is {layout}, and every record must be laid out as it is"
    return None


def pairwise_sections(
    out: Path, examples: Sequence, judgments: Mapping[str, list[Judgment]], metrics: Mapping[str, dict]
) -> dict[str, str]:
    """Per-DOC's accuracy per aspect, or for preference rows one line per system: accuracy, ties, unreadable."""
    if not (examples and isinstance(examples[0], PreferencePairExample)):
        return pairwise_report(out, examples, judgments, metrics)
    lines = ["| system | accuracy (chosen wins) | n | ties | unparsed |", "|---|---|---|---|---|"]
    lines += [
        f"| {system} | {m['accuracy']:.3f} | {m['n']} | {m['n_ties']} | {m['n_unparsed']} |"
        for system, m in metrics.items()
    ]
    return {"Preference accuracy": "\n".join(lines)}


register_task(TaskKind("scalar", ScalarExample, scalar_metrics, scalar_report))
register_task(
    TaskKind("pairwise", PairwiseExample, pairwise_metrics, pairwise_sections, one_pair_layout, preference_rows=True)
)


def reference_metrics(examples: Sequence[ReferenceExample], judgments: list[Judgment]) -> dict:
    """Per generator system (``Judgment.target``): the mean score and, for ExPerT, the mean of its 15 numbers."""
    targets = per_target_means(
        [j.target for j in judgments],
        [j.score if j.parsed else None for j in judgments],
        [(j.details or {}).get("scores") for j in judgments],
    )
    return {"targets": targets, "n": len(judgments), "n_unparsed": sum(not j.parsed for j in judgments)}


def reference_report(
    out: Path,
    examples: Sequence[ReferenceExample],
    judgments: Mapping[str, list[Judgment]],
    metrics: Mapping[str, dict],
) -> dict[str, str]:
    """One row per (evaluator system, generator system) with its mean score; none for pairwise-only judges (AuPEL)."""
    rows = [
        f"| {system} | {target} | {t['score']:.3f} | {t['n']} | {t['n_unparsed']} |"
        for system, m in metrics.items()
        for target, t in (m.get("targets") or {}).items()
    ]
    if not rows:
        return {}
    lines = ["| evaluator | generator | mean score | n | unparsed |", "|---|---|---|---|---|", *rows]
    return {"Mean score per generator": "\n".join(lines)}


register_task(TaskKind("reference", ReferenceExample, reference_metrics, reference_report, uneven_outputs))


def mcq_metrics_of(examples: Sequence[McqExample], judgments: list[Judgment]) -> dict:
    """Accuracy, MSE and nDCG (PREF Table 2) of the per-option 0..10 scores in ``details["scores"]``."""
    scores = [
        (j.details or {}).get("scores") if j is not None and j.parsed else None for j in by_example(examples, judgments)
    ]
    return mcq_metrics(scores, [ex.gold for ex in examples], [len(ex.options) for ex in examples])


register_task(TaskKind("mcq", McqExample, mcq_metrics_of))


def rubric_runs(examples: Sequence[RubricExample], judgments: list[Judgment]) -> list[list[dict]]:
    """The judgments as PARL runs (``persetrain.metrics.parl.Run``), one per ``Judgment.details["run"]``."""
    checks = [
        (
            j.example_id,
            j.target or "gt",
            (j.details or {}).get("run", 0),
            (j.details or {}).get("satisfied") if j.parsed else None,
        )
        for j in judgments
    ]
    return runs_from_checks([ex.id for ex in examples], checks)


def rubric_metrics(examples: Sequence[RubricExample], judgments: list[Judgment]) -> dict:
    """PARL: coverage, rules per user, user- and rubric-level accuracy per target, Max-Diff, paired t-tests;
    mean and std over runs (``Judgment.details["run"]``). An unparsed rubric set leaves its user uncovered."""
    return {
        **parl_metrics(rubric_runs(examples, judgments)),
        "n_unparsed": sum(not j.parsed for j in judgments),
    }


register_task(TaskKind("rubric", RubricExample, rubric_metrics))


#: Two records of each layout a task kind reads, the one place they are written: ``docs/formats.md`` shows them
#: (``tests/test_formats.py`` checks that it does, and that each validates as its kind's record) and ``persetrain
#: evaluators NAME`` prints those of the kinds an evaluator judges. ``(kind, layout) -> two JSON objects``.
RECORD_EXAMPLES: dict[tuple[str, str], tuple[dict, dict]] = {
    ("scalar", "Per-MPST / Amazon"): (
        {
            "id": "r1:p3",
            "reviewer_id": "r1",
            "profile": [{"plot_id": "p1", "plot": "A keeper tends a remote light.", "review": "Calm.", "score": 8}],
            "query_plot_id": "p3",
            "query_plot": "A crew races a dust storm across Mars.",
            "review": "Too rushed.",
            "score": 3,
        },
        {
            "id": "c7:b2",
            "reviewer_id": "c7",
            "profile": [{"plot_id": "b1", "plot": "A cookbook of vegetable dishes.", "review": "Lovely.", "score": 5}],
            "query_plot_id": "b2",
            "query_plot": "A thriller set on a night train.",
            "review": "Gripping.",
            "score": 4,
            "score_max": 5,
        },
    ),
    ("pairwise", "Per-DOC"): (
        {
            "id": "a1:s9:Ending",
            "annotator_id": "a1",
            "aspect": "Ending",
            "profile": [
                {
                    "premise": "A storm.",
                    "plot_a": "They drown.",
                    "plot_b": "They sail home.",
                    "aspect": "Ending",
                    "preferred": "B",
                }
            ],
            "premise": "A lost dog.",
            "plot_a": "The dog is never found.",
            "plot_b": "The dog walks home at dawn.",
            "preferred": "B",
        },
        {
            "id": "a2:s4:Surprise",
            "annotator_id": "a2",
            "aspect": "Surprise",
            "profile": [
                {
                    "premise": "A heist.",
                    "plot_a": "The thief is caught.",
                    "plot_b": "The guard was the thief.",
                    "aspect": "Surprise",
                    "preferred": "B",
                }
            ],
            "premise": "A locked room.",
            "plot_a": "The butler did it.",
            "plot_b": "The victim staged it all.",
            "preferred": "B",
        },
    ),
    ("pairwise", "preference rows, standard (TRL)"): (
        {
            "prompt": "Suggest a dinner.",
            "chosen": "A lentil curry.",
            "rejected": "A beef steak.",
            "person": "I am vegan.",
        },
        {
            "prompt": "Plan my Saturday.",
            "chosen": "A long easy run.",
            "rejected": "Sleep in.",
            "person": "I run marathons.",
        },
    ),
    ("pairwise", "preference rows, conversational with an implicit prompt (TRL)"): (
        {
            "chosen": [{"role": "user", "content": "Name a film."}, {"role": "assistant", "content": "Alien."}],
            "rejected": [{"role": "user", "content": "Name a film."}, {"role": "assistant", "content": "Cars."}],
            "person": ["Loved The Thing.", "Hated musicals."],
        },
        {
            "chosen": [{"role": "user", "content": "Name a song."}, {"role": "assistant", "content": "Blue Monday."}],
            "rejected": [{"role": "user", "content": "Name a song."}, {"role": "assistant", "content": "Let It Go."}],
            "person": ["Collects synth-pop records."],
        },
    ),
    ("mcq", "PrefEval multiple choice"): (
        {
            "id": "travel:3",
            "preference": "I avoid long flights.",
            "question": "Where should I go this spring?",
            "options": ["A train tour of the Alps.", "A week in Sydney."],
            "gold": 0,
            "topic": "travel",
        },
        {
            "id": "food:8",
            "preference": "I am allergic to nuts.",
            "question": "What snack should I pack?",
            "options": ["Trail mix.", "Apple slices.", "Peanut butter crackers."],
            "gold": 1,
            "topic": "food",
        },
    ),
    ("reference", "a user's text and generators' outputs"): (
        {
            "id": "amazon:u1",
            "user_id": "u1",
            "input": "Review a kettle, 5 stars.",
            "reference": "Boils fast and looks great.",
            "profile": ["Sturdy and cheap.", "Arrived late but works."],
            "outputs": {"rag": "Quick to boil, lovely design.", "non": "This is a kettle."},
        },
        {
            "id": "amazon:u2",
            "user_id": "u2",
            "input": "Review a lamp, 2 stars.",
            "reference": "Flickers after a week.",
            "profile": ["Broke in a month."],
            "outputs": {"rag": "It flickers a lot.", "non": "This is a lamp."},
        },
    ),
    ("rubric", "PARL"): (
        {
            "id": "news:u1",
            "task": "news",
            "user_id": "u1",
            "history": [{"input": "Rain floods the valley.", "output": "Valley Under Water"}],
            "input": "Snow closes the pass.",
            "output": "Pass Shut By Snow",
            "baselines": {"non": "Snow Closes Mountain Pass"},
        },
        {
            "id": "news:u2",
            "task": "news",
            "user_id": "u2",
            "history": [{"input": "Team wins the cup.", "output": "cup glory for the team"}],
            "input": "Team loses the final.",
            "output": "final heartbreak",
        },
    ),
}


def record_examples(kind: str) -> dict[str, tuple[dict, dict]]:
    """``{layout: two records}`` of one task kind (:data:`RECORD_EXAMPLES`)."""
    get_task(kind)
    return {layout: records for (name, layout), records in RECORD_EXAMPLES.items() if name == kind}
