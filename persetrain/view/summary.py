"""A run's summary as the page shows it: one metrics table (every number of ``metrics.json``, nested keys joined
with '.') and the report's plots."""

from __future__ import annotations

import math
from collections.abc import Mapping

from persetrain.view.runs import Run

#: Keys whose numbers are bookkeeping, not results: left out of the table.
SKIPPED = ("_p", "n_unparsed")


def flat_numbers(metrics: Mapping, prefix: str = "", depth: int = 3) -> dict[str, float]:
    """Every number of a system's metrics, nested keys joined with '.', at most ``depth`` levels down."""
    found: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            if not name.endswith(SKIPPED):
                found[name] = float(value)
        elif isinstance(value, Mapping) and depth > 1:
            found.update(flat_numbers(value, f"{name}.", depth - 1))
    return found


def metrics_table(run: Run) -> dict:
    """``{"columns": [...], "rows": [{"system", "values"}]}``; a value the system lacks is None."""
    systems = run.metrics.get("systems") or {}
    flat = {name: flat_numbers(m) for name, m in systems.items()}
    columns = list(dict.fromkeys(k for numbers in flat.values() for k in numbers))
    return {
        "columns": columns,
        "rows": [
            {
                "system": name,
                "values": [None if math.isnan(v := numbers.get(c, math.nan)) else v for c in columns],
            }
            for name, numbers in flat.items()
        ],
    }


def run_summary(run: Run, name: str, plot_url: str) -> dict:
    """What the page's summary shows of a run; ``plot_url`` formats a plot's address (``{path}`` in it)."""
    return {
        "name": name,
        "path": str(run.path),
        "title": run.title or run.path.name,
        "kind": run.kind,
        "n_examples": len(run.examples),
        "systems": run.systems,
        "probes": sorted(run.probes),
        "metrics": metrics_table(run),
        "plots": [{"name": p, "url": plot_url.format(path=p)} for p in run.plots],
    }
