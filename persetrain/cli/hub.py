"""``persetrain push``: a checkpoint or a prepared dataset to the Hugging Face Hub, with its card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from persetrain.cli.common import app


@app.command()
def push(
    path: Annotated[Path, typer.Argument(help="A checkpoint / run directory, or (--dataset) a prepared dataset.")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Hub repository, e.g. user/perse-7b.")],
    dataset: Annotated[bool, typer.Option(help="PATH is a dataset written by `persetrain prepare`.")] = False,
    merge: Annotated[bool, typer.Option(help="Fold a PEFT adapter into its base and push full weights.")] = False,
    metrics: Annotated[
        Path | None,
        typer.Option(
            help="metrics.json of its evaluation, tabled in the card; default: PATH/metrics.json when present."
        ),
    ] = None,
    recipe: Annotated[Path | None, typer.Option(help="The recipe it was trained with, quoted in the card.")] = None,
    private: Annotated[bool, typer.Option(help="Create the repository private.")] = False,
    revision: Annotated[str | None, typer.Option(help="Branch to push to (created when missing).")] = None,
    license: Annotated[
        str | None,
        typer.Option(
            help="License in the card (a Hub license id). A model's defaults to apache-2.0; a dataset's is the one "
            "its sources' build_info.json records, which this cannot change."
        ),
    ] = None,
    method: Annotated[
        str | None,
        typer.Option(
            help="Method cited in the card: perse, parl, rm or verifier; default: rm for a reward model, else perse."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Where the upload folder is built; default runs/push/REPO.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Build the exact upload folder and stop.")] = False,
) -> None:
    """Push a checkpoint (full, adapter or --merge) or a prepared dataset to the Hub with a generated card.

    The token comes from HF_TOKEN or `hf auth login` and is never printed; HF_ENDPOINT points elsewhere.
    """
    from persetrain.hub import describe_folder
    from persetrain.hub import push as push_to_hub

    result = push_to_hub(
        path,
        repo_id,
        dataset=dataset,
        merge=merge,
        metrics=metrics,
        recipe=recipe,
        private=private,
        revision=revision,
        license=license,
        method=method,
        out=out,
        dry_run=dry_run,
    )
    for line in describe_folder(result.folder):
        typer.echo(f"  {line}")
    if result.commit_url is None:
        typer.echo(f"dry run: {result.folder} is what {result.repo_type} repo {repo_id} would receive")
    else:
        typer.echo(f"pushed {result.folder} to {result.repo_type} repo {repo_id}: {result.commit_url}")
