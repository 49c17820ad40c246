"""Sending an upload folder to the Hub: the token check, one ``HfApi.upload_folder`` commit, and ``push``.

The card travels as the folder's ``README.md`` rather than through ``ModelCard.push_to_hub``: that method
validates the card against the public Hub whatever endpoint the client is given, while ``upload_folder``
talks only to ``HfApi(endpoint=...)`` / ``HF_ENDPOINT``, so the same code pushes to a private Hub mirror.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError

from persetrain.adapters import is_reward_model
from persetrain.hub.errors import HubError
from persetrain.hub.folders import build_dataset_folder, build_model_folder
from persetrain.models import hub_unreachable


@dataclass
class PushResult:
    folder: Path
    repo_id: str
    repo_type: str
    commit_url: str | None  # None for a dry run


def require_token() -> str:
    token = get_token()
    if not token:
        raise HubError(
            "no Hugging Face token: set HF_TOKEN or run `hf auth login` (persetrain reads it from "
            "huggingface_hub's standard locations and never prints it)"
        )
    return token


def push_folder(
    folder: Path,
    repo_id: str,
    *,
    repo_type: str = "model",
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    commit_message: str = "Upload with persetrain push",
) -> str:
    """Create the repository (and branch) when missing and upload ``folder`` as one commit; return its URL."""
    token = token or require_token()
    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
        if revision:
            api.create_branch(repo_id, branch=revision, repo_type=repo_type, exist_ok=True)
        commit = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type=repo_type,
            revision=revision,
            commit_message=commit_message,
        )
    except HfHubHTTPError as err:
        # The client's message spans several lines (URL, request id, server text); the first says what failed.
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise HubError(
            f"pushing {folder} to {repo_type} repo {repo_id} on {api.endpoint} failed: {first_line}"
        ) from None
    except Exception as err:
        if not hub_unreachable(err):
            raise
        raise HubError(
            f"pushing {folder} to {repo_type} repo {repo_id} failed: offline: {api.endpoint} cannot be reached ({err})"
        ) from None
    return commit.commit_url


def push(
    path: str | os.PathLike,
    repo_id: str,
    *,
    dataset: bool = False,
    merge: bool = False,
    metrics: str | os.PathLike | None = None,
    recipe: str | os.PathLike | None = None,
    private: bool = False,
    revision: str | None = None,
    license: str | None = None,
    method: str | None = None,
    out: str | os.PathLike | None = None,
    dry_run: bool = False,
    endpoint: str | None = None,
) -> PushResult:
    """Build the upload folder for a checkpoint or a prepared dataset and (unless ``dry_run``) push it.

    The token is checked before any work, so a push without one fails at once; a dry run needs none.
    """
    path = Path(path)
    token = None if dry_run else require_token()
    repo_type = "dataset" if dataset else "model"
    folder = Path(out) if out is not None else Path("runs/push") / repo_id.replace("/", "__")
    if dataset:
        build_dataset_folder(path, folder, license=license, method=method)
    else:
        default = "rm" if is_reward_model(path if path.is_dir() else Path(".")) else "perse"
        build_model_folder(
            path,
            folder,
            merge=merge,
            metrics=metrics,
            recipe=recipe,
            license=license or "apache-2.0",
            method=method or default,
        )
    url = (
        None
        if dry_run
        else push_folder(
            folder, repo_id, repo_type=repo_type, private=private, revision=revision, token=token, endpoint=endpoint
        )
    )
    return PushResult(folder=folder, repo_id=repo_id, repo_type=repo_type, commit_url=url)


def describe_folder(folder: Path) -> list[str]:
    """``path  size`` lines for every file of an upload folder, for the command's output."""
    return [f"{p.relative_to(folder)}  {p.stat().st_size:,} bytes" for p in sorted(folder.rglob("*")) if p.is_file()]
