"""The wheel alone runs persetrain's commands: built from the sdist of the tracked files, installed into a new
virtual environment, run from an empty folder, with no source tree on the path.

The new environment reaches the suite's own environment's dependencies (torch, TRL, ...) through a ``.pth`` file
that names its site-packages folder, so nothing is downloaded. A ``.pth`` line that names a folder puts it on the
path without running the ``.pth`` files inside it, so the suite's editable install of persetrain (a finder a
``.pth`` file there installs) stays out: ``persetrain`` is the wheel's copy, which the first test checks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here builds the package and installs it into a new environment

REPO = Path(__file__).resolve().parents[1]
SHIPPED_FOLDERS = ("recipes", "accelerate_configs", "launch")  # what persetrain.resources finds in the wheel


def _checkout_files() -> list[str]:
    """The files of the checkout as a build sees them: tracked or new, not ignored (in a clone: the tracked ones)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return [name for name in listed.stdout.split("\0") if name and (REPO / name).is_file()]


def _run(argv: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{argv}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
    return result


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> dict[str, Path]:
    """The sdist of a copy of the checkout (what a clone holds), and the wheel ``pip wheel`` builds from it."""
    root = tmp_path_factory.mktemp("dist")
    source = root / "clone"
    for name in _checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    out = root / "out"
    build_sdist = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    sdist = out / _run([sys.executable, "-c", build_sdist, out], cwd=source).stdout.split()[-1]
    # No build isolation: the suite's setuptools builds it, nothing is downloaded.
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", out, sdist], cwd=root)
    (wheel,) = out.glob("persetrain-*.whl")
    return {"sdist": sdist, "wheel": wheel}


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> Path:
    """A new virtual environment holding the wheel, its dependencies borrowed from the suite's environment."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", dist["wheel"]])
    # Only now: with the suite's environment visible, pip would take its editable persetrain for an installed one.
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    borrowed = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (Path(site) / "suite_dependencies.pth").write_text("".join(f"{path}\n" for path in borrowed))
    return venv


@pytest.fixture(scope="module")
def empty_folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stranger")


def _persetrain(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The installed console script, from ``cwd``, with nothing of the source tree in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return _run([venv / "bin" / "persetrain", "-q", *args], cwd=cwd, env=env)


def test_the_wheel_and_the_sdist_carry_the_shipped_folders(dist):
    shipped = {name for name in _checkout_files() if name.split("/", 1)[0] in SHIPPED_FOLDERS}
    assert "recipes/perse/llama2-7b-chat_per-mpst-k3.yaml" in shipped and "launch/multi_node.sbatch.j2" in shipped
    in_wheel = set(zipfile.ZipFile(dist["wheel"]).namelist())
    assert {name.removeprefix("persetrain/_shipped/") for name in in_wheel if "/_shipped/" in name} == shipped
    with tarfile.open(dist["sdist"]) as sdist:
        top = sdist.getnames()[0].split("/", 1)[0]
        in_sdist = {name.removeprefix(f"{top}/") for name in sdist.getnames()}
    assert shipped <= in_sdist and {"setup.py", "MANIFEST.in", "pyproject.toml"} <= in_sdist


def test_persetrain_and_its_files_come_from_the_new_environment(venv, empty_folder):
    """The package, the shipped folders and the demos' recipes are the wheel's copies, not the checkout's."""
    where = _run(
        [
            venv / "bin" / "python",
            "-c",
            "import persetrain, persetrain.resources as r; from persetrain.demos import parl, perse; "
            "print(persetrain.__file__, r.shipped_root(), perse.CPU_RECIPE, parl.GRPO_RECIPE, sep='\\n')",
        ],
        cwd=empty_folder,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    ).stdout.split()
    package, root, *recipes = (Path(line) for line in where)
    assert package.is_relative_to(venv) and root == package.parent / "_shipped"
    assert all(recipe.is_relative_to(root / "recipes") and recipe.is_file() for recipe in recipes)


def test_recipes_and_demo_help_from_an_empty_folder(venv, empty_folder):
    listed = _persetrain(venv, empty_folder, "recipes").stdout
    assert "perse/llama2-7b-chat_per-mpst-k3" in listed and "8 GPUs, DeepSpeed ZeRO-3, global batch 32" in listed
    demo_help = _persetrain(venv, empty_folder, "demo", "--help").stdout
    assert "Usage: persetrain demo" in demo_help and re.search(r"^\W*parl\s", demo_help, re.M)  # its subcommand


def test_prepare_evaluate_and_launch_from_an_empty_folder(venv, empty_folder):
    """The README's data step on SYNTHETIC samples, a baseline judged on it, then the launch examples by name and by
    the README's paths, which a wheel finds in its shipped folders."""

    def persetrain(command: str) -> str:
        return _persetrain(venv, empty_folder, *command.split()).stdout

    persetrain("prepare sample --out data/raw")
    persetrain("prepare perse --raw data/raw --out data/perse --no-llm --no-probe")
    persetrain("evaluate --data data/perse/per_mpst_k3 --out runs/eval --baseline reviewer-avg --max-per-reviewer 1")
    assert (empty_folder / "runs/eval/metrics.json").is_file()

    shipped_root = "import persetrain.resources as r; print(r.shipped_root())"
    shipped = Path(_run([venv / "bin" / "python", "-c", shipped_root], cwd=empty_folder).stdout.strip())
    lines = persetrain(
        "launch --config perse/llama2-7b-chat_per-mpst-k3 --accelerate-config deepspeed_zero3 --num-processes 4 "
        "--dry-run"
    ).splitlines()
    assert lines[0] == "note: gradient_accumulation_steps 1 -> 2: 4 processes keep the global batch 32 tuned on 8"
    assert lines[1].startswith(
        f"accelerate launch --config_file {shipped}/accelerate_configs/deepspeed_zero3.yaml --num_processes 4 "
        f"--deepspeed_config_file {shipped}/accelerate_configs/deepspeed/zero3.json -m persetrain.train.sft "
        f"--config {shipped}/recipes/perse/llama2-7b-chat_per-mpst-k3.yaml"
    )

    wrote = persetrain(
        "launch --slurm --config recipes/perse/llama2-13b-chat_per-mpst-k3.yaml --partition gpu --time 2-00:00:00 "
        "--nodes 2 --dry-run"
    )
    assert "wrote runs/slurm/llama2-13b-chat_per-mpst-k3.sbatch (not submitted)" in wrote
    script = empty_folder / "runs/slurm/llama2-13b-chat_per-mpst-k3.sbatch"
    _run(["bash", "-n", script])
    text = script.read_text()
    assert f"--config_file {shipped}/accelerate_configs/deepspeed_zero3.yaml" in text
    assert f"source {venv}/bin/activate" in text and "#SBATCH --nodes=2" in text
