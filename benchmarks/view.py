"""``persetrain view`` on a run of 10,000 judgments: the time to its first page against the time to read the run.

The run is written by ``persetrain evaluate`` itself (the odd-one-out baseline, which needs no model) on PrefEval's
dev questions repeated under new ids until there are ``--examples`` of them, so its files are the real layout:
``examples.jsonl``, ``judgments/*.jsonl`` with gold, correctness and details. Timed, best of ``--repeats``:

* ``read_seconds``: reading the run's files and parsing every line (``json.loads``), nothing else: the floor any
  viewer of these files pays;
* ``first_page_seconds``: what ``persetrain view`` does before the browser shows something: read the run
  (records, examples, metrics), join the rows, then answer ``/api/summary`` and the first ``/api/rows`` page
  over HTTP (FastAPI's in-process client);
* ``first_search_seconds``: the first text search once the server is up (it builds every row's search text, kept
  for the next), and ``filtered_page_seconds`` a later one, with the "wrong only" filter and a text search over
  every row.

The ratio ``first_page_seconds / read_seconds`` is the figure; the last line printed is one JSON object.

    python benchmarks/view.py [--examples 10000] [--repeats 3] [--out runs/bench-view]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from common import best_of, emit  # beside this script
from fastapi.testclient import TestClient

from persetrain.console import set_quiet
from persetrain.data import read_split
from persetrain.evaluation import EvaluationConfig, evaluate
from persetrain.evaluators.registry import SystemSpec
from persetrain.view.app import Viewed, build_app

DEV = Path(__file__).resolve().parent.parent / "data" / "prefeval" / "dev"


def write_run(out: Path, n: int) -> Path:
    """A run of ``n`` judgments by ``persetrain evaluate`` (dev questions repeated under new ids)."""
    _, questions = read_split(DEV, "test")
    examples = [
        questions[i % len(questions)].model_copy(update={"id": f"{questions[i % len(questions)].id}~{i}"})
        for i in range(n)
    ]
    shutil.rmtree(out, ignore_errors=True)
    config = EvaluationConfig(data=str(DEV), out=str(out), systems=[SystemSpec("odd-one-out", "odd-one-out")])
    evaluate(config, examples=examples)
    return out


def read_files(run: Path) -> int:
    """Every line of the run's files parsed; the number of records."""
    lines = 0
    for path in [run / "examples.jsonl", *sorted((run / "judgments").rglob("*.jsonl"))]:
        with path.open(encoding="utf-8") as f:
            lines += sum(1 for line in f if json.loads(line))
    json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    return lines


def first_page(run: Path) -> tuple[TestClient, dict]:
    client = TestClient(build_app(Viewed.load([run])))
    client.get("/api/summary").raise_for_status()
    page = client.get("/api/rows", params={"offset": 0, "limit": 20})
    page.raise_for_status()
    return client, page.json()


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=10_000, help="Judgments in the run.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed repeats; the fastest counts.")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-view"), help="Where the run is written.")
    return parser


def main() -> None:
    args = make_parser().parse_args()
    set_quiet(True)
    run = write_run(args.out, args.examples)
    read_seconds, lines = best_of(lambda: read_files(run), args.repeats)
    first_seconds, (client, page) = best_of(lambda: first_page(run), args.repeats)
    word = page["rows"][0]["example"]["fields"]["question"].split()[0]

    def filtered() -> dict:
        response = client.get("/api/rows", params={"wrong": "true", "q": word, "offset": 0, "limit": 20})
        response.raise_for_status()
        return response.json()

    first_search_seconds, _ = best_of(filtered, 1)
    filtered_seconds, found = best_of(filtered, args.repeats)
    run_bytes = sum(p.stat().st_size for p in [run / "examples.jsonl", *(run / "judgments").rglob("*.jsonl")])
    emit(
        {
            "benchmark": "view",
            "examples": args.examples,
            "lines_read": lines,
            "run_mb": round(run_bytes / 1e6, 2),
            "page_rows": len(page["rows"]),
            "page_kb": round(len(json.dumps(page)) / 1e3, 1),
            "read_seconds": round(read_seconds, 3),
            "first_page_seconds": round(first_seconds, 3),
            "first_page_over_read": round(first_seconds / read_seconds, 2),
            "first_search_seconds": round(first_search_seconds, 3),
            "filtered_page_seconds": round(filtered_seconds, 4),
            "filtered_total": found["total"],
            "view_html_mb": round((run / "view.html").stat().st_size / 1e6, 2),
        }
    )


if __name__ == "__main__":
    main()
