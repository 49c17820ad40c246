"""The FastAPI application: error handlers, the model-listing routes and the chat route, and ``serve``.

A lock serialises model access: one request at a time, which is what a CPU can do anyway.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from persetrain.engine.hf import HFBackend
from persetrain.engine.server.completion import complete
from persetrain.engine.server.logprobs import Scorer
from persetrain.engine.server.schemas import APIError, ChatCompletionIn, error_response
from persetrain.engine.server.translate import chat_request, check_supported, constraint


def add_error_handlers(app: FastAPI) -> None:
    """Every failure answers as ``{"error": {...}}``: refusals, invalid bodies, HTTP errors, crashes."""

    @app.exception_handler(APIError)
    async def _refused(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            where = ".".join(str(part) for part in err.get("loc", ())[1:])  # drop the leading "body"
            problems.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
        first = exc.errors()[0].get("loc", ()) if exc.errors() else ()
        return error_response(400, "; ".join(problems) or "invalid request", str(first[1]) if len(first) > 1 else None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")


def add_info_routes(app: FastAPI, backend: HFBackend, served_model_name: str) -> None:
    """``/health`` and ``/v1/models``, as vLLM answers them."""

    @app.get("/health")
    def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    def models() -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": served_model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "persetrain",
                    "root": served_model_name,
                    "max_model_len": backend.context_window,
                }
            ],
        }


def add_chat_route(app: FastAPI, backend: HFBackend, served_model_name: str) -> None:
    """``/v1/chat/completions``: checks and translation outside the lock, the model call inside it."""
    lock = threading.Lock()
    scorer = Scorer(backend)

    @app.post("/v1/chat/completions")
    def chat_completions(body: ChatCompletionIn) -> dict:
        check_supported(body)
        if body.model is not None and body.model != served_model_name:
            raise APIError(f"The model `{body.model}` does not exist.", status=404, param="model")
        request = chat_request(body)
        json_schema, regex = constraint(body)
        with lock:
            try:
                return complete(backend, scorer, served_model_name, body, request, json_schema, regex)
            except ValueError as err:  # the backend's way of refusing an input (pydantic's errors included)
                raise APIError(str(err)) from err


def build_app(backend: HFBackend, served_model_name: str) -> FastAPI:
    """The FastAPI application serving ``backend`` under the model name ``served_model_name``."""
    app = FastAPI(title="persetrain serve", description=f"OpenAI-compatible server for {served_model_name}")
    add_error_handlers(app)
    add_info_routes(app, backend, served_model_name)
    add_chat_route(app, backend, served_model_name)
    return app


def serve(
    model_spec: str, host: str = "127.0.0.1", port: int = 8000, served_model_name: str | None = None, **hf_options: Any
) -> None:
    """Load ``model_spec`` with the ``hf`` backend and serve it until interrupted.

    The served name defaults to the spec itself, as vLLM's does, so that
    ``load_engine(spec, backend="openai", base_url=...)`` names the same model either way.
    """
    backend = HFBackend(model_spec, **hf_options)
    uvicorn.run(build_app(backend, served_model_name or model_spec), host=host, port=port, log_level="info")
