"""``persetrain models``, ``generate`` and ``serve``: model specs and the inference engine, from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from persetrain.cli.common import BackendOpt, BaseUrlOpt, CacheOpt, ModelOpt, app, make_engine
from persetrain.console import console
from persetrain.io import InputError
from persetrain.models import DEFAULT_MODEL, ModelSpecError

models_app = typer.Typer(help="Resolve, convert and inspect model specs.", no_args_is_help=True)
app.add_typer(models_app, name="models")


@models_app.command("fetch")
def models_fetch(
    spec: Annotated[str, typer.Argument(help="Model spec to make available locally.")] = DEFAULT_MODEL,
) -> None:
    """Download (Hub ids) or convert (GGUF, embedded) a model so later loads are fast and offline."""
    from persetrain.models import hub_cache_only, local_weights_dir, resolve

    resolved = resolve(spec)
    if resolved.kind == "hub":
        from huggingface_hub import snapshot_download

        cache_only = hub_cache_only(spec)  # offline or missing: one line now, not a download's retries
        try:
            path = snapshot_download(resolved.location, local_files_only=cache_only)
        except Exception as err:  # the hub client raises many transport-specific types
            raise ModelSpecError(
                f"could not download {spec!r} from the Hugging Face Hub: {err.__class__.__name__}. "
                "Check the network and HF_TOKEN (gated models such as LLaMA-2 need an accepted "
                "licence), or copy an HF cache that holds it into $HF_HOME."
            ) from err
    else:
        path = local_weights_dir(spec)
    console.print(f"{spec} -> {path}")


@models_app.command("info")
def models_info(spec: Annotated[str, typer.Argument(help="Model spec.")] = DEFAULT_MODEL) -> None:
    """Show where a spec points, its architecture and the device/dtype it would run with."""
    from persetrain.models import describe

    info = describe(spec)
    typer.echo(json.dumps(info, indent=2))


@models_app.command("soup")
def models_soup(
    judges: Annotated[
        list[Path], typer.Argument(help="Two or more model folders trained whole from one start (a recipe's seeds).")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="The soup's model folder, written whole.")],
) -> None:
    """Average judges trained from one start into one (a uniform model soup): what to keep of several seeds."""
    from persetrain.soup import make_soup

    make_soup(judges, out)
    console.print(f"wrote the mean of {len(judges)} judges to {out}")


@app.command()
def generate(
    input: Annotated[Path, typer.Option("--input", "-i", help="JSONL of requests: {id, messages, assistant_prefix}.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="JSONL of results, written atomically.")],
    model: ModelOpt = DEFAULT_MODEL,
    backend: BackendOpt = "hf",
    base_url: BaseUrlOpt = None,
    cache: CacheOpt = None,
    choices: Annotated[
        str | None, typer.Option(help="Comma-separated closed answer set: write choice probabilities instead of text.")
    ] = None,
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

    requests = read_jsonl(input, ChatRequest)
    schema = None
    if json_schema is not None:
        try:
            schema = json.loads(json_schema.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise InputError(json_schema, f"not a readable JSON schema ({err})") from None
    engine = make_engine(model, backend, base_url, cache)
    if choices:
        results = engine.choice_probs(requests, [c for c in choices.split(",")])
    else:
        params = GenerationParams(
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            stop=tuple(stop or ()),
            json_schema=schema,
            regex=regex,
        )
        results = engine.generate(requests, params)
    write_jsonl(output, results)
    console.print(
        f"wrote {len(results)} results to {output}; cost: {engine.cost.model_dump()}, cache hits: {engine.cache_hits}"
    )


@app.command()
def serve(
    model: ModelOpt = DEFAULT_MODEL,
    host: str = "127.0.0.1",
    port: int = 8000,
    served_model_name: Annotated[str | None, typer.Option(help="Name clients use; default: the spec.")] = None,
) -> None:
    """Serve a model (e.g. a trained judge) over an OpenAI-compatible HTTP API with logprobs."""
    from persetrain.engine.server import serve as run_server

    run_server(model, host=host, port=port, served_model_name=served_model_name)
