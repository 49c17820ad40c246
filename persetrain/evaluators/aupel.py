"""AuPEL: pairwise LLM comparisons of personalized text on three dimensions, rated with Elo.

For every test case (a record) and every pair of systems (generators) whose outputs the record
holds, the judge compares the two outputs on quality (no context), relevance (given the task input)
and personalization (given samples of the user's earlier writing). Each comparison is repeated
``repeats`` times, half of them with the two outputs swapped, so a position bias cancels instead of
deciding the outcome; the tally of the repeats' votes gives the first system a win, a tie or a loss
for that test case. ``repeats`` must be even (an odd number cannot be split evenly between orders).

The vote of one repeat is read from ``choice_probs`` over "A" / "B". With ``vote = "argmax"`` it is
the more probable label, so all repeats of one order agree (the deterministic protocol); with
``vote = "sample"`` each repeat draws its vote from the two probabilities with a seeded generator,
which is what sampling the judge's one-letter answer at temperature 1 would give, without calling
the model again for every repeat. With ``scorer`` (``rm:PATH`` or ``verifier:MODEL``) a trained judge
scores each output on its own instead, and P(first) is its share of the two scores.

Each (test case, pair, dimension) is one judgment (``target`` = first system, ``choice`` =
win / tie / loss, ``details`` = opponent, dimension, votes and probabilities) and one Elo game.
``metrics`` adds Elo ratings per dimension and overall (all three dimensions' games), bootstrapped
over game orders, the win / tie / loss table, and consistency / sensitivity curves; ``report`` shows
them with plots.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from persetrain.engine import Cost, Engine
from persetrain.evaluators.base import EvaluatorConfig, JudgeContext, register
from persetrain.evaluators.expert import check_reference_examples
from persetrain.evaluators.learned import Item
from persetrain.evaluators.pairs import is_pairs, judge_pairs_as_cases, refuse_plot_pairs
from persetrain.evaluators.scorers import WithTrainedScorer, grouped_scores
from persetrain.metrics.elo import LOSS, TIE, WIN, bootstrap_elo, consistency_sensitivity
from persetrain.prompts.aupel import CHOICES, DIMENSIONS, comparison_request
from persetrain.prompts.preference import PERSON_LABELS, texts_person
from persetrain.report import pyplot, save_png
from persetrain.schema import Judgment, ReferenceExample

OUTCOME_SCORE = {"win": WIN, "tie": TIE, "loss": LOSS}
#: One comparison: a record, its two systems (first, second) and the dimension.
Case = tuple[ReferenceExample, str, str, str]


@dataclass
class AuPELConfig(EvaluatorConfig):
    #: Comparisons per test case, pair and dimension; even, half of them with the outputs swapped.
    repeats: int = 2
    #: How a repeat votes: the more probable label (``argmax``) or a draw from the probabilities (``sample``).
    vote: Literal["argmax", "sample"] = "argmax"
    #: Dimensions to judge (any of personalization, quality, relevance).
    dimensions: tuple[str, ...] = DIMENSIONS
    #: Writing samples of the user shown for personalization, and the words kept of each.
    max_samples: int = 4
    sample_words: int = 80
    #: Outputs are cut to this many words in a comparison.
    max_output_words: int = 300
    #: Bootstrapped game orders for the Elo ratings, and the seed of the bootstrap and the votes.
    n_boot: int = 1000
    seed: int = 0
    #: Random draws of two disjoint samples per size N for consistency and sensitivity.
    draws: int = 5000
    #: Significance level of the binomial test behind consistency and sensitivity.
    alpha: float = 0.05
    #: A trained judge in place of the model's A/B answer: ``rm:PATH`` or ``verifier:MODEL``. It scores each output
    #: on its own - personalization with the user's samples as the person and the input as the request, relevance
    #: with the input only, quality with neither - and P(first) is its share of the two scores (for a reward
    #: model, sigmoid(r_first - r_second)); the order of the two cannot matter.
    scorer: str | None = None


def _cut(text: str, words: int) -> str:
    parts = text.split()
    return " ".join(parts) if len(parts) <= words else " ".join(parts[:words]) + " ..."


def _vote(p_first: float, rng: np.random.Generator | None) -> str:
    """One repeat's vote: a draw from the probabilities, or the more probable label ("even" at 0.5)."""
    if rng is not None:
        return "first" if rng.random() < p_first else "second"
    return "first" if p_first > 0.5 else "second" if p_first < 0.5 else "even"


def tally(votes: Sequence[str]) -> str:
    """Win / tie / loss of the first system from its repeats' votes ("first" / "second")."""
    first, second = votes.count("first"), votes.count("second")
    return "win" if first > second else "loss" if second > first else "tie"


def check_config(config: AuPELConfig) -> None:
    if config.repeats < 2 or config.repeats % 2:
        raise ValueError(
            f"repeats must be a positive even number (half of the comparisons swap the order); got {config.repeats}"
        )
    unknown = [d for d in config.dimensions if d not in DIMENSIONS]
    if unknown or not config.dimensions:
        raise ValueError(f"unknown dimension(s) {unknown}; AuPEL judges {', '.join(DIMENSIONS)}")


def comparisons(
    engine: Engine, cases: Sequence[Case], c: AuPELConfig, system: str
) -> tuple[list[list[float]], list[Cost]]:
    """P(first system chosen) as listed and swapped, and the cost, of every case: the model's A/B answer."""
    requests = []
    for ex, a, b, dim in cases:
        out_a, out_b = _cut(ex.outputs[a], c.max_output_words), _cut(ex.outputs[b], c.max_output_words)
        for first, second in ((out_a, out_b), (out_b, out_a)):  # as listed, then swapped
            requests.append(comparison_request(dim, first, second, ex.input, ex.profile, c.max_samples, c.sample_words))
    probs = engine.choice_probs(requests, list(CHOICES), description=f"{system}: comparisons")
    forward, swapped = probs[0::2], probs[1::2]
    return (
        [[f.probs[CHOICES[0]], s.probs[CHOICES[1]]] for f, s in zip(forward, swapped, strict=True)],
        [f.cost + s.cost for f, s in zip(forward, swapped, strict=True)],
    )


@register("aupel")
class AuPEL(WithTrainedScorer):
    #: ``pairwise``: preference rows, each a test case of two systems judged on personalization (the dimension that
    #: reads the person; the first configured dimension without it), its outcome the pair's choice.
    tasks = ("reference", "pairwise")
    Config = AuPELConfig

    def judge(
        self, examples: Sequence[ReferenceExample], engine: Engine | None, context: JudgeContext
    ) -> list[Judgment]:
        c = self.config
        if is_pairs(examples):
            dimension = "personalization" if "personalization" in c.dimensions else c.dimensions[0]
            return judge_pairs_as_cases(lambda cases: self.judge(cases, engine, context), examples, dimension)
        refuse_plot_pairs(examples, "aupel")
        check_config(c)
        systems = check_reference_examples(examples, context.data, need_reference=False)
        if len(systems) < 2:
            raise ValueError(
                f"AuPEL compares systems and rates them with Elo, which needs at least two; "
                f"{context.data} holds outputs of {len(systems)} ({', '.join(systems)})"
            )
        cases = [
            (ex, a, b, dim) for ex in examples for a, b in itertools.combinations(systems, 2) for dim in c.dimensions
        ]
        if c.scorer:
            p_firsts, costs = self._trained_comparisons(cases, context)
        else:
            p_firsts, costs = comparisons(engine, cases, c, context.system)
        rng = np.random.default_rng(c.seed)
        judgments = []
        for (ex, a, b, dim), p_first, cost in zip(cases, p_firsts, costs, strict=True):
            votes = []
            for p in p_first:
                for _ in range(c.repeats // 2):
                    votes.append(_vote(p, rng if c.vote == "sample" else None))
            outcome = tally(votes)
            judgments.append(
                Judgment(
                    example_id=ex.id,
                    evaluator=context.system,
                    target=a,
                    choice=outcome,
                    score=OUTCOME_SCORE[outcome],
                    probs={a: float(np.mean(p_first)), b: 1 - float(np.mean(p_first))},
                    explanation=(
                        f"{dim}: {a} vs {b}: P({a}) = {p_first[0]:.3f} shown first, {p_first[1]:.3f} shown "
                        f"second; votes {votes.count('first')}-{votes.count('second')} -> {outcome}"
                    ),
                    details={"dimension": dim, "opponent": b, "votes": votes, "p_first": p_first},
                    cost=cost,
                )
            )
        return judgments

    def _trained_comparisons(
        self, cases: Sequence[Case], context: JudgeContext
    ) -> tuple[list[list[float]], list[Cost]]:
        """P(first system chosen), the same in both orders, from the configured trained judge (``scorer``)."""
        c, groups = self.config, []
        for ex, a, b, dim in cases:
            person = (
                texts_person(ex.profile[: c.max_samples], c.sample_words)
                if dim == "personalization" and ex.profile
                else None
            )
            request = "" if dim == "quality" else ex.input
            groups.append(
                [
                    Item(
                        ex.id,
                        system,
                        person,
                        PERSON_LABELS["profile"],
                        request,
                        _cut(ex.outputs[system], c.max_output_words),
                    )
                    for system in (a, b)
                ]
            )
        scorer = self.trained_scorer()
        raw, costs = grouped_scores(scorer, groups, context)
        return [[scorer.judge.share(r)[0]] * 2 for r in raw], costs

    def metrics(self, task, examples: Sequence, judgments: list[Judgment]) -> dict:
        if is_pairs(examples):
            return task.metrics(examples, judgments)
        return aupel_metrics(judgments, self.config)

    def report(
        self, out: Path, examples: Sequence, judgments: Mapping[str, list[Judgment]], metrics: Mapping[str, dict]
    ) -> dict[str, str]:
        if is_pairs(examples):
            return {}
        sections = {}
        for name, m in metrics.items():
            sections[f"AuPEL Elo ratings: {name}"] = elo_table(m)
            sections[f"AuPEL win / tie / loss: {name}"] = record_table(m)
            plot = curves_plot(out / f"aupel-{name}-consistency.png", m)
            sections[f"AuPEL consistency and sensitivity: {name}"] = (
                f"![consistency and sensitivity]({plot.name})\n\nShare of {self.config.draws:,} draws of two "
                f"disjoint samples of N test cases whose binomial tests (p < {self.config.alpha}) both name the "
                "same winner (consistency), and share of single samples that name one (sensitivity)."
            )
        return sections


def games(judgments: Sequence[Judgment], dimension: str | None = None) -> list[tuple[str, str, float]]:
    """(first system, second system, first system's score) of each judgment, of one dimension or all."""
    return [
        (j.target, j.details["opponent"], OUTCOME_SCORE[j.choice])
        for j in judgments
        if j.parsed and (dimension is None or j.details["dimension"] == dimension)
    ]


def aupel_metrics(judgments: Sequence[Judgment], config: AuPELConfig) -> dict:
    """Elo (median and 95% interval) per dimension and overall, win / tie / loss per pair, and the
    consistency / sensitivity curves of each pair and dimension."""
    dimensions = list(dict.fromkeys(j.details["dimension"] for j in judgments))
    systems = sorted({j.target for j in judgments} | {j.details["opponent"] for j in judgments})
    index = {s: i for i, s in enumerate(systems)}
    result: dict = {
        "n": len(judgments),
        "n_unparsed": sum(not j.parsed for j in judgments),
        "systems": systems,
        "elo": {},
        "record": {},
        "consistency": {},
    }
    for dim in [*dimensions, "overall"]:
        played = games(judgments, None if dim == "overall" else dim)
        boot = bootstrap_elo(
            [index[a] for a, _, _ in played],
            [index[b] for _, b, _ in played],
            [s for _, _, s in played],
            len(systems),
            n_boot=config.n_boot,
            seed=config.seed,
        )
        result["elo"][dim] = {
            s: {"median": float(boot["median"][i]), "low": float(boot["low"][i]), "high": float(boot["high"][i])}
            for s, i in index.items()
        }
    for dim in dimensions:
        pairs: dict[str, list[float]] = {}
        for a, b, s in games(judgments, dim):
            pairs.setdefault(f"{a} vs {b}", []).append(s)
        result["record"][dim] = {
            pair: {
                "win": outcomes.count(WIN) / len(outcomes),
                "tie": outcomes.count(TIE) / len(outcomes),
                "loss": outcomes.count(LOSS) / len(outcomes),
                "n": len(outcomes),
            }
            for pair, outcomes in pairs.items()
        }
        half = max(len(o) for o in pairs.values()) // 2
        sizes = sorted({int(x) for x in np.linspace(1, half, 12)}) if half else []
        result["consistency"][dim] = {
            pair: consistency_sensitivity(outcomes, sizes, draws=config.draws, alpha=config.alpha, seed=config.seed)
            for pair, outcomes in pairs.items()
        }
    overall = result["elo"]["overall"]
    result["ranking"] = sorted(systems, key=lambda s: -overall[s]["median"])
    return result


def elo_table(metrics: Mapping) -> str:
    dims = list(metrics["elo"])
    lines = ["| system | " + " | ".join(f"{d} Elo [95% interval]" for d in dims) + " |", "|---|" + "---|" * len(dims)]
    for s in sorted(metrics["systems"], key=lambda s: -metrics["elo"]["overall"][s]["median"]):
        cells = [
            f"{metrics['elo'][d][s]['median']:.1f} [{metrics['elo'][d][s]['low']:.1f}, "
            f"{metrics['elo'][d][s]['high']:.1f}]"
            for d in dims
        ]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def record_table(metrics: Mapping) -> str:
    lines = ["| pair | dimension | win | tie | loss | n |", "|---|---|---|---|---|---|"]
    for dim, pairs in metrics["record"].items():
        for pair, r in pairs.items():
            lines.append(f"| {pair} | {dim} | {r['win']:.2f} | {r['tie']:.2f} | {r['loss']:.2f} | {r['n']} |")
    return "\n".join(lines)


def curves_plot(path: Path, metrics: Mapping) -> Path:
    """Consistency (top) and sensitivity (bottom) over N, one panel per dimension, one line per pair."""
    plt = pyplot()
    dims = list(metrics["consistency"])
    fig, axes = plt.subplots(2, len(dims), figsize=(4 * len(dims), 6), squeeze=False)
    for col, dim in enumerate(dims):
        for pair, curve in metrics["consistency"][dim].items():
            for row, key in enumerate(("consistency", "sensitivity")):
                axes[row][col].plot(curve["n"], curve[key], marker="o", markersize=3, label=pair)
        for row, key in enumerate(("consistency", "sensitivity")):
            axes[row][col].set(title=f"{dim}: {key}", xlabel="test cases N", ylabel=key, ylim=(-0.02, 1.02))
    axes[0][0].legend(fontsize=7)
    return save_png(fig, path, dpi=100)
