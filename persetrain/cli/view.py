"""``persetrain view`` and ``compare``: reading the judgments of runs, in a browser or as paired statistics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from persetrain.cli.common import app
from persetrain.console import console

RunsArg = Annotated[list[Path], typer.Argument(help="Run directories that `persetrain evaluate` or `meta-eval` wrote.")]


@app.command()
def view(
    runs: RunsArg,
    host: Annotated[str, typer.Option(help="Address to listen on (the page is for this machine: 127.0.0.1).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(help="Port to listen on; 0 takes any free one.")] = 7575,
    export: Annotated[
        Path | None, typer.Option("--export", help="Write the page as one self-contained HTML file and exit.")
    ] = None,
) -> None:
    """Browse runs' examples in a local web page: person, candidates, gold, each system's verdict, rationale,
    details and probe outcomes, with filters; several runs on the same data side by side."""
    from persetrain.evaluation import examples_of_config
    from persetrain.view.app import Viewed, export_html, serve

    viewed = Viewed.load(runs, examples_of_config)
    if export is not None:
        console.print(f"wrote {export_html(viewed, export)} ({len(viewed.rows)} examples)")
        return
    serve(viewed, host=host, port=port, on_ready=lambda url: console.print(f"persetrain view: {url}", soft_wrap=True))


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="The first run directory (the baseline).")],
    run_b: Annotated[Path, typer.Argument(help="The second run directory; differences are B - A.")],
    resamples: Annotated[int, typer.Option(min=100, help="Paired bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999, help="Level of the intervals.")] = 0.95,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON (for scripts).")] = False,
) -> None:
    """Per metric and per system, B - A on the examples both runs judged, with a paired bootstrap interval and a
    paired test, by topic or person where the data has them; and the examples whose verdict changed."""
    from persetrain.evaluation import examples_of_config
    from persetrain.view.compare import compare_runs, render_comparison
    from persetrain.view.runs import load_run

    result = compare_runs(
        load_run(run_a, "A", examples_of_config),
        load_run(run_b, "B", examples_of_config),
        resamples=resamples,
        seed=seed,
        confidence=confidence,
    )
    if as_json:
        typer.echo(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        console.print(render_comparison(result), soft_wrap=True, markup=False)
