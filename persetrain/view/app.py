"""``persetrain view``: the page, its JSON API on the FastAPI / uvicorn stack ``persetrain serve`` uses, and
``--export``.

The page is plain HTML, CSS and JavaScript shipped in ``persetrain/view/static`` (no CDN: it works offline).
Served, it asks the API for one page of rows at a time (``/api/rows?offset=&limit=&...filters``), so a run of
10,000 judgments never becomes a 10,000-row page; exported, the same page carries its data in one JSON
``<script>`` element and pages and filters it in the browser. As in Inspect AI's ``inspect view``: one command
on the run directories, the URL printed, a local server on 127.0.0.1 until interrupted.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, HTTPException, Query
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from persetrain.io import atomic_write
from persetrain.view.rows import Filters, Row, build_rows, facets, matches
from persetrain.view.runs import ExamplesOf, Run, load_run, run_names
from persetrain.view.summary import run_summary

#: Rows per page unless the page asks for another number; never more than MAX_PAGE.
PAGE, MAX_PAGE = 20, 200
STATIC = ("index.html", "app.js", "style.css")


def static_text(name: str) -> str:
    return resources.files("persetrain.view").joinpath("static", name).read_text(encoding="utf-8")


@dataclass
class Viewed:
    """Runs read once, and their joined rows."""

    runs: list[Run]
    names: list[str]
    rows: list[Row]

    @classmethod
    def load(cls, paths: Sequence[str | Path], examples_of: ExamplesOf | None = None) -> Viewed:
        paths = [Path(p) for p in paths]
        names = run_names(paths)
        runs = [load_run(p, n, examples_of) for p, n in zip(paths, names, strict=True)]
        return cls(runs, names, build_rows(runs, names))

    def summary(self, plot_url: str) -> dict:
        return {
            "runs": [
                run_summary(run, name, plot_url.replace("{run}", str(i)))
                for i, (run, name) in enumerate(zip(self.runs, self.names, strict=True))
            ],
            "facets": facets(self.rows, self.runs, self.names),
        }

    def page(self, filters: Filters, offset: int, limit: int) -> dict:
        found = [row for row in self.rows if matches(row, filters)]
        shown = found[offset : offset + limit]
        return {"total": len(found), "offset": offset, "rows": [row.as_json(self.names) for row in shown]}


def build_app(viewed: Viewed) -> FastAPI:
    """The page, its static files, ``/api/summary``, ``/api/rows`` and each run's plots."""
    app = FastAPI(title="persetrain view", docs_url=None, redoc_url=None)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return static_text("index.html")

    @app.get("/static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC:
            raise HTTPException(404)
        kind = {"js": "text/javascript", "css": "text/css", "html": "text/html"}[name.rsplit(".", 1)[1]]
        return Response(static_text(name), media_type=kind)

    @app.get("/api/summary")
    def summary() -> JSONResponse:
        return JSONResponse(viewed.summary("/runs/{run}/{path}"))

    @app.get("/api/rows")
    def rows(
        offset: int = Query(0, ge=0),
        limit: int = Query(PAGE, ge=1, le=MAX_PAGE),
        wrong: bool = False,
        disagree: bool = False,
        flipped: bool = False,
        topic: str = "",
        person: str = "",
        system: str = "",
        q: str = "",
    ) -> JSONResponse:
        filters = Filters(wrong, disagree, flipped, topic, person, system, q)
        return JSONResponse(viewed.page(filters, offset, limit))

    @app.get("/runs/{run}/{path:path}")
    def plot(run: int, path: str) -> FileResponse:
        if not 0 <= run < len(viewed.runs) or path not in viewed.runs[run].plots:
            raise HTTPException(404)
        return FileResponse(viewed.runs[run].path / path)

    return app


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def export_html(viewed: Viewed, out: str | Path) -> Path:
    """The page as one self-contained file: styles, script, plots (as data URIs) and every row inside it."""
    summary = viewed.summary("{run}\n{path}")
    for run, shown in zip(viewed.runs, summary["runs"], strict=True):
        for plot in shown["plots"]:
            plot["url"] = _data_uri(run.path / plot["name"])
    data = {"summary": summary, "rows": [row.as_json(viewed.names) for row in viewed.rows]}
    # "</" inside a <script> element would end it: JSON allows the escaped form.
    payload = json.dumps(data, ensure_ascii=False, allow_nan=False, default=str).replace("</", "<\\/")
    page = static_text("index.html")
    style = f"<style>\n{static_text('style.css')}</style>"
    page = page.replace('<link rel="stylesheet" href="/static/style.css">', style)
    page = page.replace(
        '<script src="/static/app.js"></script>',
        f'<script id="persetrain-data" type="application/json">{payload}</script>\n'
        f"<script>\n{static_text('app.js')}</script>",
    )
    out = Path(out)
    with atomic_write(out) as f:
        f.write(page)
    return out


def serve(viewed: Viewed, host: str = "127.0.0.1", port: int = 7575, on_ready=None) -> None:
    """Serve the page until interrupted; ``on_ready(url)`` gets its address (port 0: any free one) once the
    socket listens, so the URL printed is one that answers."""
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port} ({err.strerror}); give another --port") from None
    sock.listen(128)
    if on_ready is not None:
        on_ready(f"http://{host}:{sock.getsockname()[1]}/")
    server = uvicorn.Server(uvicorn.Config(build_app(viewed), log_level="warning"))
    server.run(sockets=[sock])
