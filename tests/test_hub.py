"""``persetrain push`` against a local double of the Hub's HTTP API, and wandb logging offline.

The Hub is the one boundary that cannot exist here, so the test serves exactly the endpoints a push uses
(create repo, create branch, README metadata check, preupload, commit) on 127.0.0.1 and checks the files
they received; everything on our side (card, folder, huggingface_hub's client) runs for real.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fastapi import FastAPI, Request, Response
from loopback_server import serving

from persetrain.hub import build_model_folder
from persetrain.io import InputError
from persetrain.models import ModelSpecError

REPO = Path(__file__).resolve().parents[1]
CPU_RECIPE = REPO / "recipes/perse/cpu_smollm2_per-mpst-k3.yaml"
TOKEN = "hf_persetrain_test_token_0123456789"
PREFEVAL = REPO / "data" / "prefeval" / "dev"


class HubDouble:
    """The Hub endpoints ``HfApi.create_repo``, ``create_branch`` and ``upload_folder`` call; it records them."""

    def __init__(self):
        self.repos: dict[str, dict] = {}
        self.branches: list[tuple[str, str]] = []
        self.commits: list[dict] = []
        self.auth: set[str] = set()
        self.app = FastAPI()
        app = self.app

        @app.middleware("http")
        async def record_auth(request: Request, call_next):
            self.auth.add(request.headers.get("authorization", ""))
            return await call_next(request)

        @app.post("/api/repos/create")
        async def create(request: Request):
            body = await request.json()
            repo_id = "/".join(filter(None, [body.get("organization"), body["name"]]))
            self.repos[repo_id] = body
            prefix = "" if body.get("type", "model") == "model" else f"{body['type']}s/"
            return {"url": f"{self.url}/{prefix}{repo_id}"}

        @app.head("/{namespace}/{name}/resolve/{revision}/{path:path}")
        async def resolve(namespace: str, name: str, revision: str, path: str):
            # The Hub's answer for a repository that does not exist (or that the token may not read).
            return Response(status_code=404, headers={"X-Error-Code": "RepoNotFound"})

        @app.post("/api/validate-yaml")
        async def validate_yaml(request: Request):
            return {"errors": [], "warnings": []}

        @app.post("/api/{repo_type}s/{namespace}/{name}/branch/{branch}")
        async def branch(repo_type: str, namespace: str, name: str, branch: str):
            self.branches.append((f"{namespace}/{name}", branch))
            return {}

        @app.post("/api/{repo_type}s/{namespace}/{name}/preupload/{revision}")
        async def preupload(repo_type: str, namespace: str, name: str, revision: str, request: Request):
            files = (await request.json())["files"]
            return {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}

        @app.post("/api/{repo_type}s/{namespace}/{name}/commit/{revision}")
        async def commit(repo_type: str, namespace: str, name: str, revision: str, request: Request):
            lines = [json.loads(line) for line in (await request.body()).decode().splitlines() if line]
            header = next(line["value"] for line in lines if line["key"] == "header")
            files = {
                line["value"]["path"]: base64.b64decode(line["value"]["content"])
                for line in lines
                if line["key"] == "file"
            }
            self.commits.append(
                {
                    "repo": f"{namespace}/{name}",
                    "type": repo_type,
                    "revision": revision,
                    "summary": header["summary"],
                    "files": files,
                }
            )
            oid = f"{len(self.commits):040x}"
            return {"commitUrl": f"{self.url}/{namespace}/{name}/commit/{oid}", "commitOid": oid}


@pytest.fixture
def hub():
    double = HubDouble()
    with serving(double.app) as double.url:
        yield double


def _push(hub: HubDouble | None, tmp_path: Path, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess:
    return _persetrain(tmp_path, "push", *args, endpoint=hub.url if hub is not None else None, token=token)


def _persetrain(
    tmp_path: Path, *args: str, endpoint: str | None = None, token: str | None = TOKEN, offline: bool = False
) -> subprocess.CompletedProcess:
    """The command line in its own process, with its own Hugging Face cache and the Hub at ``endpoint``."""
    env = {
        "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin",
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    if endpoint is not None:
        env["HF_ENDPOINT"] = endpoint
    if token:
        env["HF_TOKEN"] = token
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "persetrain.cli", "-q", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def adapter_checkpoint(tmp_path_factory, tiny_llama_dir) -> Path:
    """A PEFT LoRA checkpoint of the tiny LLaMA as a run leaves it: adapter, tokenizer, optimizer state, metrics."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tmp_path_factory.mktemp("run") / "checkpoint-2"
    torch.manual_seed(0)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir)),
        LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False),
    )
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(str(tiny_llama_dir)).save_pretrained(str(path))
    torch.save({"state": {}}, path / "optimizer.pt")
    (path / "metrics.json").write_text(
        json.dumps(
            {
                "kind": "scalar",
                "n_examples": 48,
                "systems": {
                    "perse-tiny": {"kendall": 0.426, "spearman": 0.5123, "parse_rate": 1.0},
                    "reviewer-avg": {"kendall": 0.122, "spearman": None, "parse_rate": 1.0},
                },
            }
        )
    )
    return path


@pytest.mark.slow
def test_push_adapter_with_card_private_on_a_branch(hub, tmp_path, adapter_checkpoint):
    result = _push(
        hub,
        tmp_path,
        str(adapter_checkpoint),
        "--repo-id",
        "alice/perse-tiny",
        "--private",
        "--revision",
        "v1",
        "--recipe",
        str(CPU_RECIPE),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert TOKEN not in result.stdout + result.stderr
    assert hub.auth == {f"Bearer {TOKEN}"}
    assert hub.repos["alice/perse-tiny"]["visibility"] == "private" and hub.branches == [("alice/perse-tiny", "v1")]

    [commit] = hub.commits
    assert commit["revision"] == "v1" and commit["type"] == "model"
    files = commit["files"]
    assert set(files) == {
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "metrics.json",
    }  # no optimizer state
    assert files["adapter_model.safetensors"] == (adapter_checkpoint / "adapter_model.safetensors").read_bytes()
    card = files["README.md"].decode()
    assert "library_name: peft" in card and "license: apache-2.0" in card
    assert "| system | kendall | spearman | parse_rate |" in card
    assert "| perse-tiny | 0.426 | 0.5123 | 1 |" in card and "| reviewer-avg | 0.122 | – | 1 |" in card
    assert "accelerate_config: accelerate_configs/cpu.yaml" in card and "arXiv:2310.03304" in card
    assert f"{commit['repo']}/commit/" in result.stdout


@pytest.mark.slow
def test_merge_pushes_full_weights_that_compute_what_the_adapter_does(
    hub, tmp_path, adapter_checkpoint, tiny_llama_dir
):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    result = _push(hub, tmp_path, str(adapter_checkpoint), "--repo-id", "alice/perse-tiny-merged", "--merge")
    assert result.returncode == 0, result.stdout + result.stderr
    received = tmp_path / "received"
    received.mkdir()
    for name, data in hub.commits[0]["files"].items():
        (received / name).write_bytes(data)
    assert "adapter_config.json" not in hub.commits[0]["files"]
    assert "library_name: transformers" in (received / "README.md").read_text()

    ids = torch.tensor([[1, 42, 7, 99, 5]])
    merged = AutoModelForCausalLM.from_pretrained(str(received)).eval()
    adapted = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir)), str(adapter_checkpoint)
    ).eval()
    base = AutoModelForCausalLM.from_pretrained(str(tiny_llama_dir)).eval()
    with torch.no_grad():
        expected, got, plain = adapted(ids).logits, merged(ids).logits, base(ids).logits
    assert torch.allclose(got, expected, atol=1e-4) and not torch.allclose(got, plain, atol=1e-2)


@pytest.mark.slow
def test_push_prepared_dataset_as_parquet(hub, tmp_path, prepared_root):
    from datasets import load_dataset, load_from_disk

    source = prepared_root / "data" / "perse" / "per_mpst_k3"
    result = _push(hub, tmp_path, str(source), "--dataset", "--repo-id", "alice/per-mpst-k3")
    assert result.returncode == 0, result.stdout + result.stderr
    [commit] = hub.commits
    assert commit["type"] == "dataset" and hub.repos["alice/per-mpst-k3"]["type"] == "dataset"
    received = tmp_path / "received"
    for name, data in commit["files"].items():
        (received / name).parent.mkdir(parents=True, exist_ok=True)
        (received / name).write_bytes(data)
    card = (received / "README.md").read_text()
    assert "path: data/train-00000-of-00001.parquet" in card and "task: scalar" in card and "- synthetic" in card
    assert "Nothing here is a real review" in card and "## Citation" in card  # prepare's card, kept and extended
    pushed = load_dataset(str(received))
    original = load_from_disk(str(source))
    assert {s: len(pushed[s]) for s in pushed} == {s: len(original[s]) for s in original}
    assert pushed["train"][0]["completion"] == original["train"][0]["completion"]


@pytest.mark.slow
def test_synthetic_dataset_whose_card_has_no_tags_gets_the_tag(hub, tmp_path, prepared_root):
    import shutil

    source = tmp_path / "plain"
    shutil.copytree(prepared_root / "data" / "perse" / "per_mpst_k3", source)
    (source / "README.md").write_text("# A card without metadata\n")
    out = tmp_path / "upload"
    result = _push(hub, tmp_path, str(source), "--dataset", "--repo-id", "alice/x", "--dry-run", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    card = (out / "README.md").read_text()
    assert "- synthetic" in card and "# A card without metadata" in card


@pytest.mark.slow
def test_dry_run_writes_the_folder_and_sends_nothing(hub, tmp_path, adapter_checkpoint):
    out = tmp_path / "upload"
    result = _push(
        hub, tmp_path, str(adapter_checkpoint), "--repo-id", "alice/x", "--dry-run", "--out", str(out), token=None
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert hub.repos == {} and hub.commits == []
    assert (out / "README.md").is_file() and (out / "adapter_model.safetensors").is_file()
    assert "dry run:" in result.stdout
    # The weights are linked, not copied: a dry run of a 7B checkpoint costs no gigabytes.
    assert os.path.samefile(out / "adapter_model.safetensors", adapter_checkpoint / "adapter_model.safetensors")


@pytest.mark.slow
def test_no_token_and_no_weights_are_one_line_errors(hub, tmp_path, adapter_checkpoint):
    result = _push(hub, tmp_path, str(adapter_checkpoint), "--repo-id", "alice/x", token=None)
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2 and output.startswith("error: no Hugging Face token") and "\n" not in output

    empty = tmp_path / "checkpoint-9"
    empty.mkdir()
    (empty / "trainer_state.json").write_text("{}")
    result = _push(hub, tmp_path, str(empty), "--repo-id", "alice/x")
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 2 and "\n" not in output
    assert output.startswith(f"error: {empty}: no model weights to push")
    assert hub.commits == []


@pytest.mark.slow
def test_an_upload_folder_never_replaces_what_it_is_built_from(hub, tmp_path, adapter_checkpoint):
    """The upload folder is replaced whole: one that is the checkpoint, or holds it, is refused before anything is
    written (one line from `push`), and a build that fails (a merge into a base that does not exist) leaves the
    previous folder."""
    for out in (adapter_checkpoint, adapter_checkpoint.parent):
        refused = (
            f"{out}: the upload folder would replace {adapter_checkpoint}, which it is built from; give another --out"
        )
        with pytest.raises(InputError) as err:
            build_model_folder(adapter_checkpoint, out)
        assert str(err.value) == refused
    result = _push(hub, tmp_path, str(adapter_checkpoint), "--repo-id", "alice/x", "--dry-run", "--out", str(out))
    assert result.returncode == 2 and (result.stdout + result.stderr).strip() == f"error: {refused}"
    assert {"adapter_model.safetensors", "optimizer.pt"} <= {p.name for p in adapter_checkpoint.iterdir()}

    out = tmp_path / "upload"
    build_model_folder(adapter_checkpoint, out)
    before = sorted(p.name for p in out.iterdir())
    config = json.loads((adapter_checkpoint / "adapter_config.json").read_text())
    moved = tmp_path / "checkpoint-3"
    shutil.copytree(adapter_checkpoint, moved)
    gone = str(tmp_path / "gone")
    (moved / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": gone}))
    with pytest.raises(ModelSpecError, match=f"unknown model spec '{gone}'"):
        build_model_folder(moved, out, merge=True)
    assert sorted(p.name for p in out.iterdir()) == before and not list(tmp_path.glob(".upload.*"))


@pytest.mark.slow
def test_report_to_wandb_logs_offline(tiny_llama_dir, prepared_root, tmp_path):
    """A recipe's `report_to: wandb` works without a wandb account or network: the run is written offline."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "persetrain.train.sft",
            "--config",
            str(CPU_RECIPE),
            "--model_name_or_path",
            str(tiny_llama_dir),
            "--dataset_path",
            str(prepared_root / "data" / "perse" / "per_mpst_k3"),
            "--output_dir",
            str(out),
            "--max_steps",
            "2",
            "--logging_steps",
            "1",
            "--report_to",
            "wandb",
            "--merge_adapter",
            "false",
            "--disable_tqdm",
            "true",
            "--save_strategy",
            "no",
        ],
        cwd=tmp_path,
        env={**env, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [run_dir] = (out / "wandb").glob("offline-run-*")
    assert list(run_dir.glob("run-*.wandb"))


def _closed_url() -> str:
    """An endpoint on 127.0.0.1 that nothing listens on: a port bound once to be free, then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _one_error(result: subprocess.CompletedProcess) -> str:
    """A refused command: a non-zero exit, at most 3 lines on stderr, no traceback and no retry storm."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and 1 <= len(lines) <= 3, result.stderr
    assert "Traceback" not in result.stderr and "Retrying" not in result.stderr, result.stderr
    return result.stderr


@pytest.mark.slow
def test_a_hub_id_that_cannot_be_read_fails_at_once_saying_offline_or_missing(hub, tmp_path, adapter_checkpoint):
    """One request without retries decides (huggingface_hub would retry a refused connection 5 times per file):
    offline by HF_HUB_OFFLINE, an endpoint that refuses the connection, and a Hub that answers that there is no
    such repository are each one line, before any data is judged; a push to an unreachable endpoint too."""
    evaluate = ("evaluate", "--data", str(PREFEVAL), "--out", str(tmp_path / "run"), "--evaluator", "mcq-letter")
    evaluate += ("--model", "alice/absent")
    error = _one_error(_persetrain(tmp_path, *evaluate, offline=True))
    assert (
        "alice/absent: offline (HF_HUB_OFFLINE is set) and this Hub id is not in the local Hugging Face cache" in error
    )
    closed = _closed_url()
    error = _one_error(_persetrain(tmp_path, *evaluate, endpoint=closed))
    assert f"alice/absent: offline: the Hugging Face Hub at {closed} cannot be reached" in error
    error = _one_error(_persetrain(tmp_path, *evaluate, endpoint=hub.url))
    assert f"alice/absent: no such model on {hub.url}" in error
    assert not (tmp_path / "run").exists()

    error = _one_error(_persetrain(tmp_path, "push", str(adapter_checkpoint), "--repo-id", "alice/x", endpoint=closed))
    assert f"to model repo alice/x failed: offline: {closed} cannot be reached" in error


@pytest.mark.slow
def test_a_dataset_card_carries_its_sources_licence(hub, tmp_path, prepared_root):
    """Amazon's reviews are not Apache-2.0, PrefEval is CC BY-NC 4.0 and only the SYNTHETIC samples are the
    project's own: prepare's card says so, push keeps it, and --license cannot relicense the data."""
    from typer.testing import CliRunner

    from persetrain.cli import app

    def prepare(*args: str) -> None:
        result = CliRunner().invoke(app, ["-q", "prepare", *args])
        assert result.exit_code == 0, result.output

    def pushed_card(dataset: Path) -> str:
        out = tmp_path / "upload" / dataset.name
        result = _push(hub, tmp_path, str(dataset), "--dataset", "--repo-id", "alice/x", "--dry-run", "--out", str(out))
        assert result.returncode == 0, result.stderr
        return (out / "README.md").read_text()

    card = pushed_card(prepared_root / "data" / "perse" / "per_mpst_k3")
    assert "license: apache-2.0" in card and "SYNTHETIC data generated by" in card

    # Amazon 2018 files as a user downloads them (no ground_truth.json of the synthetic sample beside them).
    raw = tmp_path / "raw"
    shutil.copytree(prepared_root / "data" / "raw" / "amazon", raw / "amazon")
    prepare("perse", "--raw", str(raw), "--out", str(tmp_path / "perse"), "--no-llm", "--no-probe")
    amazon = tmp_path / "perse" / "amazon_books"
    for card in ((amazon / "README.md").read_text(), pushed_card(amazon)):
        assert "license: other" in card and "license_name: amazon-reviews" in card and "apache" not in card
        assert "## License\n\nAmazon reviews: the terms of Amazon" in card
    relicensed = _push(hub, tmp_path, str(amazon), "--dataset", "--repo-id", "a/x", "--dry-run", "--license", "mit")
    error = _one_error(relicensed)
    assert f"{amazon / 'build_info.json'}: field 'license': the data is under other" in error

    prepare("preference", "--out", str(tmp_path / "preference"), "--prefeval", str(PREFEVAL))
    listwise = tmp_path / "preference" / "listwise"
    for card in ((listwise / "README.md").read_text(), pushed_card(listwise)):
        assert "license: cc-by-nc-4.0" in card and "apache" not in card
    assert hub.commits == []


@pytest.mark.slow
def test_a_cached_hub_id_is_read_from_the_cache_when_the_hub_cannot_be_reached(tmp_path, tiny_llama_dir):
    """The Hugging Face cache's own layout (refs/main naming a snapshot), as a download leaves it: an unreachable
    Hub falls back to it after one request, with no retries, and the model judges."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf-home" / "hub" / "models--alice--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny_llama_dir, repo / "snapshots" / commit)
    out = tmp_path / "run"
    args = ("evaluate", "--data", str(PREFEVAL), "--out", str(out), "--max-examples", "2")
    result = _persetrain(tmp_path, *args, "--evaluator", "mcq-letter", "--model", "alice/tiny", endpoint=_closed_url())
    assert result.returncode == 0 and "Retrying" not in result.stderr, result.stderr
    assert json.loads((out / "metrics.json").read_text())["systems"]["alice/tiny"]["n"] == 2
