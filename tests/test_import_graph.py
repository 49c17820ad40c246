"""No import circle in ``persetrain/`` or ``data_prep/``, counting imports inside functions too.

A circle dodged by an import inside a function still ties the modules together: neither can be read,
moved or tested without the other, and the dodge breaks as soon as someone hoists the import. The
graph is read from the source with ``ast`` (nothing is imported, so the test takes well under a
second): every ``import`` / ``from ... import`` node anywhere in a file is an edge, including those
under ``if TYPE_CHECKING:`` and inside functions. ``from pkg import name`` is an edge to ``pkg.name``
when that is a module, else to ``pkg``. ``import a.b.c`` is an edge to ``a.b.c`` only: that Python
also runs ``a/__init__.py`` on the way is what lets a package re-export its submodules, and an
``__init__`` that imports its own submodules is a circle only when a submodule imports the package
itself back (by ``from a import name`` or ``import a``). Imports through ``importlib`` are invisible here;
the one left between these modules (``persetrain.prompts`` loading its template modules) goes from a package
down to modules that never import it back.

The same graph also keeps the layers apart: no import points up (:data:`TOP`, :data:`PEERS`, :data:`BELOW`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("persetrain", "data_prep")

#: The command line and the demos stand on everything; nothing else of ``persetrain`` imports them.
TOP = ("persetrain.cli", "persetrain.demos")
#: A training run, a launch and a push each stand on the library below and never on each other: what two of
#: them share (the adapter merge, the stop signals) lives below all three.
PEERS = ("persetrain.train", "persetrain.launch", "persetrain.hub")
#: Library layers and what they must not import: the engine is below every user of a model's answers.
BELOW = {
    "persetrain.engine": (
        "persetrain.evaluators",
        "persetrain.evaluation",
        "persetrain.prompts",
        "persetrain.rewards",
        "persetrain.reward_model",
    ),
}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the checked packages (a package is its ``__init__``)."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _base(name: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` names, resolving a relative one against ``name``."""
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    anchor = package[: len(package) - node.level + 1]
    return ".".join([*anchor, node.module] if node.module else anchor)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The checked modules that ``name`` imports anywhere in its file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _base(name, path, node)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {target for target in found if target in modules and target != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path that ends where it starts, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            target = next(stack[-1], None)
            if target is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(target) == 1:
                return [*path[path.index(target) :], target]
            elif target not in state:
                state[target] = 1
                path.append(target)
                stack.append(iter(sorted(graph[target])))
    return None


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_no_import_circle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def _within(module: str, packages: tuple[str, ...] | str) -> str | None:
    """The one of ``packages`` that ``module`` is or lies in, or None."""
    for package in (packages,) if isinstance(packages, str) else packages:
        if module == package or module.startswith(package + "."):
            return package
    return None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every ``importer -> imported`` edge of ``persetrain`` that points up a layer (the constants above)."""
    found = []
    for importer, targets in sorted(graph.items()):
        if not _within(importer, "persetrain"):
            continue
        top, peer = _within(importer, TOP), _within(importer, PEERS)
        for target in sorted(targets):
            target_peer = _within(target, PEERS)
            up = (
                (not top and _within(target, TOP))
                or (not top and target_peer and target_peer != peer)
                or any(_within(importer, low) and _within(target, high) for low, high in BELOW.items())
            )
            if up:
                found.append(f"{importer} -> {target}")
    return found


def test_no_upward_import() -> None:
    assert upward_imports(import_graph()) == []


def test_upward_imports_are_found() -> None:
    """The rule catches the two the layers once had: training reaching into push, the launcher into training."""
    graph = {
        "persetrain.train.runner": {"persetrain.hub.checkpoint", "persetrain.adapters"},
        "persetrain.launch.accelerate": {"persetrain.train.signals"},
        "persetrain.cli.train": {"persetrain.train.runner", "persetrain.demos.parl"},
        "persetrain.engine.retry": {"persetrain.evaluators.base"},
        "persetrain.evaluation": {"persetrain.engine"},
    }
    assert upward_imports(graph) == [
        "persetrain.engine.retry -> persetrain.evaluators.base",
        "persetrain.launch.accelerate -> persetrain.train.signals",
        "persetrain.train.runner -> persetrain.hub.checkpoint",
    ]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
        ({"a": {"b"}, "b": {"b"}}, ["b", "b"]),
    ],
)
def test_find_cycle(graph: dict[str, set[str]], expected: list[str] | None) -> None:
    assert find_cycle(graph) == expected


def test_edges_resolve_relative_and_package_imports(tmp_path: Path) -> None:
    """The rules the module docstring states: relative imports, ``from pkg import`` a module or a name."""
    package = tmp_path / "pkg"
    package.mkdir()
    init = package / "__init__.py"
    init.write_text("from pkg import sub\n")
    sub = package / "sub.py"
    sub.write_text("def f():\n    from . import other\n    from .other import thing\n    from pkg import NAME\n")
    (package / "other.py").write_text("")
    modules = {"pkg": init, "pkg.sub": sub, "pkg.other": package / "other.py"}
    assert imports_of("pkg", init, modules) == {"pkg.sub"}
    assert imports_of("pkg.sub", sub, modules) == {"pkg.other", "pkg"}
