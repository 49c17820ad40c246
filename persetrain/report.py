"""Human-readable reports of an evaluation run: a metrics table, plots and example explanations.

Inputs are the metrics dict and judgments an evaluation already computed; nothing here computes
a metric or calls a model, so a report can be re-rendered from a run directory at any time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import quote

from persetrain.io import atomic_write
from persetrain.records import chosen
from persetrain.schema import Judgment

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SCALAR_COLUMNS = ("pearson", "spearman", "kendall")


def _fmt(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"  # undefined; the system's note says why
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def scalar_table(metrics: Mapping[str, Mapping[str, object]]) -> str:
    """Markdown table: one row per system, correlations with p-values, counts of unparsed outputs."""
    lines = ["| system | Pearson | Spearman | Kendall | n | unparsed |", "|---|---|---|---|---|---|"]
    for system, m in metrics.items():
        cells = [f"{_fmt(m[c])} (p={_fmt(m[c + '_p'])})" for c in SCALAR_COLUMNS]
        lines.append(f"| {system} | " + " | ".join(cells) + f" | {m['n']} | {m['n_unparsed']} |")
    notes = [f"- {system}: {m['note']}" for system, m in metrics.items() if m.get("note")]
    return "\n".join(lines + ([""] + notes if notes else []))


def pairwise_table(metrics: Mapping[str, Mapping[str, object]]) -> str:
    aspects = sorted({a for m in metrics.values() for a in m["per_aspect"]})
    header = "| system | " + " | ".join(aspects) + " | average | unparsed |"
    lines = [header, "|" + "---|" * (len(aspects) + 3)]
    for system, m in metrics.items():
        cells = [_fmt(m["per_aspect"][a]["accuracy"]) if a in m["per_aspect"] else "-" for a in aspects]
        lines.append(f"| {system} | " + " | ".join(cells) + f" | {_fmt(m['macro_accuracy'])} | {m['n_unparsed']} |")
    return "\n".join(lines)


def metrics_table(metrics: Mapping[str, Mapping[str, object]]) -> str:
    """Markdown table of every top-level number of each system's metrics (for tasks without their own table)."""
    columns = list(
        dict.fromkeys(
            k for m in metrics.values() for k, v in m.items() if isinstance(v, int | float) and not isinstance(v, bool)
        )
    )
    lines = ["| system | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1)]
    for system, m in metrics.items():
        lines.append(f"| {system} | " + " | ".join(_fmt(m.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend: a run writes its plots to files and never opens a window (imported
    where a plot is drawn, so that a run without plots does not load matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Figure, path: Path, dpi: int) -> Path:
    """Lay ``fig`` out, write it to ``path`` as a PNG (atomically: a reader never finds half a plot), close it."""
    fig.tight_layout()
    with atomic_write(path, mode="wb") as f:
        fig.savefig(f, format="png", dpi=dpi)
    pyplot().close(fig)
    return path


def scatter_plot(path: Path, gold: Sequence[float], systems: Mapping[str, Sequence[float | None]]) -> Path:
    """Predicted vs. true score, one panel per system, with a little jitter so ties stay visible."""
    import numpy as np

    plt = pyplot()

    rng = np.random.default_rng(0)
    fig, axes = plt.subplots(1, len(systems), figsize=(4 * len(systems), 4), squeeze=False)
    for ax, (name, pred) in zip(axes[0], systems.items(), strict=True):
        pairs = [(g, p) for g, p in zip(gold, pred, strict=True) if p is not None]
        if pairs:
            g, p = (np.array(v, dtype=float) for v in zip(*pairs, strict=True))
            ax.scatter(g + rng.uniform(-0.15, 0.15, len(g)), p, s=14, alpha=0.6)
        ax.plot([1, 10], [1, 10], color="grey", linewidth=0.8, linestyle="--")
        ax.set(title=name, xlabel="true score", ylabel="predicted score", xlim=(0.5, 10.5), ylim=(0.5, 10.5))
    return save_png(fig, path, dpi=110)


def explanation_samples(judgments: Sequence[Judgment], gold_reviews: Mapping[str, str], k: int = 3) -> str:
    blocks = []
    for j in list(judgments)[:k]:
        blocks.append(
            f"**{j.example_id}** — predicted {_fmt(j.score)}\n\n> judge: {j.explanation[:400]}\n>\n"
            f"> reviewer: {gold_reviews.get(j.example_id, '')[:400]}"
        )
    return "\n\n".join(blocks)


def scalar_report(
    out: Path,
    examples: Sequence,
    judgments: Mapping[str, Sequence[Judgment]],
    metrics: Mapping[str, Mapping[str, object]],
) -> dict[str, str]:
    """Correlation table, predicted-vs-true scatter (``scatter.png``) and sample explanations."""
    sections = {"Correlation with the reviewers' true scores": scalar_table(metrics)}
    preds = {}
    for name, found in judgments.items():
        by_id = {j.example_id: j for j in found}
        preds[name] = [by_id[ex.id].score if ex.id in by_id and by_id[ex.id].parsed else None for ex in examples]
    scatter_plot(out / "scatter.png", [ex.score for ex in examples], preds)
    sections["Predicted vs. true scores"] = "![scatter](scatter.png)"
    reviews = {ex.id: ex.review for ex in examples}
    for name, found in judgments.items():
        if any(j.raw for j in found):
            sections[f"Explanations: {name}"] = explanation_samples(found, reviews)
    return sections


def pairwise_report(
    out: Path,
    examples: Sequence,
    judgments: Mapping[str, Sequence[Judgment]],
    metrics: Mapping[str, Mapping[str, object]],
) -> dict[str, str]:
    return {"Pairwise accuracy per aspect": pairwise_table(metrics)}


def wrong_examples(records: Mapping[str, Sequence[Mapping]], k: int = 3) -> dict[str, str]:
    """A few examples each system got wrong (its records with ``correct`` false): the gold, its choice, the start
    of its rationale; none for tasks without a gold choice. The rest are one filter away in ``view.html``."""
    blocks = []
    for system, found in records.items():
        wrong = [r for r in found if r.get("correct") is False]
        if not wrong:
            continue
        lines = [f"**{system}**: {len(wrong)} of {len(found)} wrong; the first {min(k, len(wrong))}:", ""]
        for r in wrong[:k]:
            rationale = " ".join((r.get("explanation") or "").split())[:240]
            page = f"view.html#{quote(r['example_id'])}"  # the page opens on this example
            gold = r.get("gold_label") or r.get("gold")
            lines.append(f"- [`{r['example_id']}`]({page}): gold {gold}, chose {chosen(r)}. {rationale}")
        blocks.append("\n".join(lines))
    return {"Wrong examples": "\n\n".join(blocks)} if blocks else {}


#: The report's pointer to its run's page (``persetrain view``'s export, written beside it).
BROWSE = (
    "Every example with its person, candidates, gold and each system's verdict, rationale, details and probe "
    "outcomes, with filters (wrong only, systems disagree, flipped by a probe): [view.html](view.html), one "
    "self-contained file; `persetrain view RUN_DIR` serves the same page, `persetrain compare RUN_A RUN_B` compares "
    "two runs."
)


def write_markdown(path: Path, title: str, sections: Mapping[str, str]) -> Path:
    body = [f"# {title}", ""]
    for heading, text in sections.items():
        body += [f"## {heading}", "", text, ""]
    with atomic_write(path) as f:
        f.write("\n".join(body))
    return path
