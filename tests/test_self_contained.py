"""The repository is self-contained: no tracked file names a path outside it.

A clone has nothing beside it, so a test, benchmark, recipe or document that reads ``../something``, an
absolute path of the machine it was written on, or a folder above the checkout works only where it was written.
Three ways a file can name such a path are looked for, each resolved the way its reader would resolve it:

- an upward relative path (``../data/x``) that, taken from the file's own folder (a link in a document) and
  from the repository root (a command or a test run there), names nothing the repository tracks;
- an absolute path into a workspace or a home folder (``/work/...``, ``/home/NAME/...``);
- ``Path(__file__)`` climbed above the checkout (``parents[N]`` or ``.parent`` chains past the root), or
  ``Path("..")`` / ``os.path.join("..", ...)``.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
THIS_FILE = Path(__file__).resolve().relative_to(REPO).as_posix()

UPWARD = re.compile(r"(?<![\w.])((?:\.\./)+)([\w.-][\w./-]*)?")
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|mnt|scratch|home/[\w.-]+|Users/[\w.-]+|root)/[\w.-]+")
FILE_PARENTS = re.compile(r"__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]")
FILE_PARENT_CHAIN = re.compile(r"__file__\)(?:\.resolve\(\))?((?:\.parent\b)+)")
PARENT_DIR_CALL = re.compile(r"\b(?:Path|join)\(\s*[\"']\.\.[\"']")


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    return [name for name in listed.stdout.split("\0") if name]


def _inside(target: str, tracked: set[str], folders: set[str]) -> bool:
    """Whether a repository-relative, normalized path is a tracked file or folder."""
    return not target.startswith("..") and (target in tracked or target in folders)


def outside_references(name: str, text: str, tracked: set[str]) -> list[str]:
    """Every place in the tracked file ``name`` (repository-relative) that names a path outside the repository."""
    folders = {str(parent) for path in tracked for parent in Path(path).parents}
    depth = len(Path(name).parts)  # Path(__file__).parents[depth - 1] is the repository root
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        for match in UPWARD.finditer(line):
            relative = match.group(1) + (match.group(2) or "").rstrip(".,:;")
            from_file = posixpath.normpath(posixpath.join(posixpath.dirname(name), relative))
            from_root = posixpath.normpath(relative)
            if not (_inside(from_file, tracked, folders) or _inside(from_root, tracked, folders)):
                found.append(f"{where}: {match.group(0)} is outside the repository")
        for match in MACHINE_PATH.finditer(line):
            found.append(f"{where}: {match.group(0)} is a path of one machine")
        if name.endswith(".py"):
            climbs = [int(m.group(1)) + 1 for m in FILE_PARENTS.finditer(line)]
            climbs += [m.group(1).count(".parent") for m in FILE_PARENT_CHAIN.finditer(line)]
            for climb in climbs:
                if climb >= depth + 1:
                    found.append(f"{where}: Path(__file__) climbs {climb} folders, above the repository root")
            if PARENT_DIR_CALL.search(line):
                found.append(f"{where}: a path built from '..' leaves the folder it runs in")
    return found


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("tests/test_pref.py", 'PREFEVAL = Path("..") / "shared" / "data"'),
        ("tests/test_pref.py", "DATA = '" + "../" + "shared/data/prefeval-dev'"),
        ("benchmarks/run.py", "python x.py --data " + "../../" + "elsewhere/prefeval"),
        ("README.md", "persetrain evaluate --data " + "../" + "data/prefeval/dev"),
        ("docs/launch.md", "see [the notes](" + "../../" + "notes/x.md)"),
        ("docs/launch.md", "the design lives in " + "/" + "work/shared/design"),
        ("recipes/perse/x.yaml", "dataset_path: " + "/" + "home/someone/per_mpst_k3"),
        ("persetrain/demos/perse.py", "REPO = Path(__file__).resolve().parents[3]"),
        ("tests/test_x.py", "ROOT = Path(__file__).parent.parent.parent"),
    ],
)
def test_a_path_outside_the_repository_is_found(name, line):
    tracked = {"README.md", "docs/launch.md", "data/prefeval/dev/README.md", "persetrain/demos/perse.py"}
    assert outside_references(name, line, tracked), line


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("docs/launch.md", "the front page: [README](" + "../" + "README.md)"),
        ("data/prefeval/train/README.md", "the layout of `" + "../" + "dev/`"),
        ("tests/test_pref.py", 'PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"'),
        ("tests/test_x.py", "ROOT = Path(__file__).parent.parent"),
        ("docs/engine.md", 'the probabilities of "0".."10"'),
        ("persetrain/cli/x.py", "a path such as /tmp/out or ~/work/x is the user's"),
    ],
)
def test_a_path_inside_the_repository_is_not_flagged(name, line):
    tracked = {"README.md", "docs/launch.md", "data/prefeval/dev/README.md", "persetrain/cli/x.py"}
    assert outside_references(name, line, tracked) == []


def test_no_tracked_file_names_a_path_outside_the_repository():
    tracked = _tracked()
    names = set(tracked)
    found = []
    for name in tracked:
        path = REPO / name
        if not path.is_file() or name == THIS_FILE:  # deleted, not yet committed; this file's examples are the paths
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # a binary file names no path
            continue
        found += outside_references(name, text, names)
    assert not found, "\n".join(found)
