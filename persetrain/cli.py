"""The ``persetrain`` command. Each command parses its options and calls library code; no logic lives here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from persetrain.console import console, set_quiet
from persetrain.io import InputError
from persetrain.models import DEFAULT_MODEL, ModelSpecError

app = typer.Typer(help="Train and run learned evaluators of personalized text.", no_args_is_help=True,
                  pretty_exceptions_enable=False, add_completion=False)
models_app = typer.Typer(help="Resolve, convert and inspect model specs.", no_args_is_help=True)
app.add_typer(models_app, name="models")

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model spec: embedded:NAME, a directory, "
                                                             "a .gguf file or a Hub id.")]
BackendOpt = Annotated[str, typer.Option(help="Engine backend: hf (local) or openai (a server).")]
BaseUrlOpt = Annotated[str | None, typer.Option(help="Server URL for the openai backend, e.g. "
                                                     "http://127.0.0.1:8000/v1")]
CacheOpt = Annotated[Path | None, typer.Option(help="SQLite request cache; a re-run skips finished calls.")]


@app.callback()
def main(quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False) -> None:
    set_quiet(quiet)


def _fail(err: Exception) -> None:
    console.print(f"[red]error:[/red] {err}")
    raise typer.Exit(code=2)


def _engine(model: str, backend: str, base_url: str | None, cache: Path | None, **options):
    from persetrain.engine import load_engine

    if backend == "openai":
        if not base_url:
            raise typer.BadParameter("--base-url is required with --backend openai")
        options["base_url"] = base_url
    return load_engine(model, backend=backend, cache_path=cache, **options)


@models_app.command("fetch")
def models_fetch(spec: Annotated[str, typer.Argument(help="Model spec to make available locally.")]
                 = DEFAULT_MODEL) -> None:
    """Download (Hub ids) or convert (GGUF, embedded) a model so later loads are fast and offline."""
    from persetrain.models import local_weights_dir, resolve

    try:
        resolved = resolve(spec)
        if resolved.kind == "hub":
            from huggingface_hub import snapshot_download

            try:
                path = snapshot_download(resolved.location)
            except Exception as err:  # the hub client raises many transport-specific types
                raise ModelSpecError(
                    f"could not download {spec!r} from the Hugging Face Hub: {err.__class__.__name__}. "
                    "Check the network and HF_TOKEN (gated models such as LLaMA-2 need an accepted "
                    "licence), or copy an HF cache that holds it into $HF_HOME."
                ) from err
        else:
            path = local_weights_dir(spec)
    except ModelSpecError as err:
        _fail(err)
    console.print(f"{spec} -> {path}")


@models_app.command("info")
def models_info(spec: Annotated[str, typer.Argument(help="Model spec.")] = DEFAULT_MODEL) -> None:
    """Show where a spec points, its architecture and the device/dtype it would run with."""
    from persetrain.models import describe

    try:
        info = describe(spec)
    except ModelSpecError as err:
        _fail(err)
    typer.echo(json.dumps(info, indent=2))


@app.command()
def generate(
    input: Annotated[Path, typer.Option("--input", "-i", help="JSONL of requests: {id, messages, "
                                                                "assistant_prefix}.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="JSONL of results, written atomically.")],
    model: ModelOpt = DEFAULT_MODEL,
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    cache: CacheOpt = None,
    choices: Annotated[str | None, typer.Option(help="Comma-separated closed answer set: write "
                                                     "choice probabilities instead of text.")] = None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    stop: Annotated[list[str] | None, typer.Option(help="Stop string (repeatable).")] = None,
    json_schema: Annotated[Path | None, typer.Option(help="JSON schema file the output must follow.")] = None,
    regex: Annotated[str | None, typer.Option(help="Regex the output must match.")] = None,
) -> None:
    """Run requests from a JSONL file through the engine and write one result per line."""
    from persetrain.engine import ChatRequest, GenerationParams
    from persetrain.io import read_jsonl, write_jsonl

    try:
        requests = read_jsonl(input, ChatRequest)
        schema = None
        if json_schema is not None:
            try:
                schema = json.loads(json_schema.read_text())
            except (OSError, json.JSONDecodeError) as err:
                raise InputError(json_schema, f"not a readable JSON schema ({err})") from None
        engine = _engine(model, backend, base_url, cache)
        if choices:
            results = engine.choice_probs(requests, [c for c in choices.split(",")])
        else:
            params = GenerationParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                      seed=seed, stop=tuple(stop or ()), json_schema=schema, regex=regex)
            results = engine.generate(requests, params)
    except (InputError, ModelSpecError, ValueError) as err:
        _fail(err)
    write_jsonl(output, results)
    console.print(f"wrote {len(results)} results to {output}; cost: {engine.cost.model_dump()}, "
                  f"cache hits: {engine.cache_hits}")


@app.command()
def serve(
    model: ModelOpt = DEFAULT_MODEL,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients use; default: the spec.")] = None,
) -> None:
    """Serve a model (e.g. a trained judge) over an OpenAI-compatible HTTP API with logprobs."""
    from persetrain.engine.server import serve as run_server

    try:
        run_server(model, host=host, port=port, served_model_name=served_model_name)
    except ModelSpecError as err:
        _fail(err)


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Run directory.")] = Path("runs/demo"),
    model: ModelOpt = DEFAULT_MODEL,
) -> None:
    """Run the main job end to end on the embedded model and write its results to the run directory."""
    from persetrain.demo import run_demo

    try:
        run_demo(out, model=model)
    except (InputError, ModelSpecError) as err:
        _fail(err)


if __name__ == "__main__":
    sys.exit(app())
