"""Every command the user guide shows parses against the real program, without running it.

README.md, benchmarks/README.md, docs/*.md and the studies in docs/findings/ show commands in fenced ``bash`` /
``sh`` / ``console`` blocks (in ``console`` blocks, the lines after ``$ ``). A command that no longer parses - a
renamed flag, a removed sub-command, a recipe that moved - is the first error a new user meets; this test meets it
first.
Each command is read the way its own program reads it:

- ``persetrain ...`` / ``python -m persetrain.cli ...``: click's parser of the real typer app, sub-command by
  sub-command; a command that passes its extra arguments to a trainer (``sft``, ``grpo``, ``rm``) has them
  parsed by that trainer's ``make_parser()``, recipe included, and ``launch`` by the trainer its recipe names;
- ``python -m persetrain.train.X ...`` and ``accelerate launch ... -m persetrain.train.X ...``: accelerate's
  own launch parser, then the trainer's ``make_parser()``;
- ``make X``: X is a target of the Makefile;
- ``python benchmarks/X.py ...``: the script's ``make_parser()`` (every benchmark script has one).

A recipe or config file a command names must exist. Nothing is trained, loaded or submitted.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from persetrain import resources
from persetrain.io import InputError

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
GUIDES = [
    README,
    REPO / "benchmarks" / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    *sorted((REPO / "docs" / "findings").glob("*.md")),
]
SHELL_FENCES = {"bash", "sh", "shell", "console"}
# click's base exception, from the click that typer runs on (recent typer releases vendor their own copy)
CLICK_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SEPARATORS = {"&&", "||", ";", "|"}
TRAINER_COMMANDS = ("sft", "grpo", "rm")  # their extra arguments are the trainer's, parsed by its make_parser()
README_SECTIONS = [
    "Status: what has run, where, at what scale",
    "Install",
    "Quickstart",
    "Concepts",
    "Data: where each data set comes from",
    "Train",
    "Evaluate and meta-evaluate",
    "Engine and server API",
    "Launch, Slurm and the Hub",
    "Documentation",
    "Layout",
    "Development",
]


@dataclass(frozen=True)
class Command:
    where: str  # file:line, for the failure message and the test id
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {shlex.join(self.argv)}"


def _is_documented_command(argv: list[str]) -> bool:
    head = argv[:3]
    return bool(head) and (
        head[0] in ("persetrain", "make")
        or head[:2] == ["accelerate", "launch"]
        or (head[:2] == ["python", "-m"] and len(head) > 2 and head[2].startswith("persetrain"))
        or (head[0] == "python" and len(head) > 1 and head[1].startswith("benchmarks/"))
    )


def _split(text: str) -> list[list[str]]:
    """Shell words of one command line, split at ``&&`` / ``;`` / pipes, without leading ``VAR=value``."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], []
    for token in lexer:
        if token in SEPARATORS:
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    for argv in commands:
        while argv and ENV_ASSIGNMENT.match(argv[0]):
            argv.pop(0)
    return [argv for argv in commands if argv]


def _shell_lines(path: Path) -> list[tuple[int, str]]:
    """(first line number, text) of every command line in the shell blocks, continuations joined."""
    found, fence, pending = [], None, None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip().lower()
            pending = None
            continue
        if fence not in SHELL_FENCES:
            continue
        if pending is not None:  # the line before ended with a backslash
            start, text = pending
            text = text + " " + line.strip()
        elif fence == "console" and not line.startswith("$ "):
            continue  # a program's output
        else:
            start, text = number, line.removeprefix("$ ").strip()
        if text.endswith("\\"):
            pending = (start, text[:-1])
        else:
            pending = None
            found.append((start, text))
    return found


def documented_commands(path: Path) -> list[Command]:
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    return [
        Command(f"{where}:{number}", tuple(argv))
        for number, text in _shell_lines(path)
        for argv in _split(text)
        if _is_documented_command(argv)
    ]


ALL_COMMANDS = [command for guide in GUIDES for command in documented_commands(guide)]


# ----------------------------------------------------------------------------------------------- checks
def _existing_file(path: str | os.PathLike, what: str) -> Path:
    """A file a command names: a path from the checkout's root, or a shipped recipe's or accelerate config's name."""
    if (REPO / path).is_file():
        return REPO / path
    shipped = {"recipe": resources.recipe_file, "accelerate config": resources.accelerate_config_file}.get(what)
    assert shipped is not None, f"{what} {path} does not exist"
    try:
        return shipped(path)
    except InputError as err:
        raise AssertionError(f"{what} {path} does not exist: {err}") from None


def _recipe(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def check_trainer_args(module_name: str, args: list[str]) -> None:
    """Parse ``args`` with the trainer's own ``make_parser()``, the recipe it names included."""
    module = importlib.import_module(module_name)
    assert hasattr(module, "make_parser"), f"{module_name} has no make_parser(): not a trainer entry point"
    recipe = _recipe(args)
    if recipe is not None:
        _existing_file(recipe, "recipe")
    try:
        module.make_parser().parse_args_and_config(list(args))
    except SystemExit as err:  # argparse has printed its usage error
        raise AssertionError(f"{module_name} refuses {shlex.join(args)} (argparse exited {err.code})") from None


def _persetrain_context(args: list[str]):
    """Click's parse of ``persetrain ARGS``, down to the leaf command's context; raises click's usage errors."""
    from persetrain.cli import app

    command = typer.main.get_command(app)
    name, parent = "persetrain", None
    while hasattr(command, "resolve_command"):  # a group (typer may vendor its own click: no isinstance)
        parent = command.make_context(name, list(args), parent=parent)
        protected = parent._protected_args if hasattr(parent, "_protected_args") else parent.protected_args
        name, command, args = command.resolve_command(parent, [*protected, *parent.args])
    return command.make_context(name, list(args), parent=parent)


def check_persetrain(args: list[str]) -> None:
    try:
        ctx = _persetrain_context(args)
    except typer.Exit as done:  # an eager option (``--version``) answered and exited
        assert done.exit_code == 0, f"persetrain {shlex.join(args)} exited {done.exit_code}"
        return
    if ctx.info_name == "launch":
        params = ctx.params
        if params["status"] or params["logs"]:
            return
        assert params["config"] is not None, "persetrain launch needs --config"
        from persetrain.config_files import read_yaml_mapping
        from persetrain.launch.plan import TRAINERS, infer_trainer

        recipe = _existing_file(params["config"], "recipe")
        if params["accelerate_config"] is not None:
            _existing_file(params["accelerate_config"], "accelerate config")
        trainer = params["trainer"] or infer_trainer(read_yaml_mapping(recipe, "recipe"))
        check_trainer_args(TRAINERS[trainer], ["--config", str(params["config"]), *ctx.args])
    elif ctx.info_name in TRAINER_COMMANDS:  # every other argument goes to the trainer's make_parser()
        check_trainer_args(f"persetrain.train.{ctx.info_name}", ctx.args)
    else:
        assert not ctx.args, f"unexpected arguments {ctx.args}"


def check_python_module(args: list[str]) -> None:
    module, *rest = args
    if module == "persetrain.cli":
        check_persetrain(rest)
    else:
        check_trainer_args(module, rest)


def check_accelerate(args: list[str]) -> None:
    from accelerate.commands.launch import launch_command_parser

    try:
        launch = launch_command_parser().parse_args(args)
    except SystemExit as err:
        raise AssertionError(f"accelerate launch refuses {shlex.join(args)} (argparse exited {err.code})") from None
    if launch.config_file:
        _existing_file(launch.config_file, "accelerate config")
    assert launch.module, "accelerate launch should run a persetrain module with -m"
    check_trainer_args(launch.training_script, launch.training_script_args)


def make_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        rule = re.match(r"^([A-Za-z0-9_.\-/ ]+):(?![:=])", line)
        if rule:
            targets.update(rule.group(1).split())
    return targets


def check_make(args: list[str]) -> None:
    wanted = [arg for arg in args if not arg.startswith("-") and "=" not in arg]
    missing = [target for target in wanted if target not in make_targets()]
    assert not missing, f"no Makefile target {missing}"


def check_benchmark(args: list[str]) -> None:
    """A benchmark script's flags through its ``make_parser()`` (every script has one, as the trainers do), in this
    process: a subprocess per documented command cost ~6 s of imports each."""
    script_arg, *flags = args
    script = _existing_file(script_arg, "benchmark script")
    tree = ast.parse(script.read_text(encoding="utf-8"))
    if not any(isinstance(node, ast.FunctionDef) and node.name == "make_parser" for node in tree.body):
        raise AssertionError(f"{script_arg} has no module-level make_parser()")
    sys.path.insert(0, str(script.parent))  # scripts import their neighbours
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass in the script looks its module up while it is built
    try:
        spec.loader.exec_module(module)
        try:
            module.make_parser().parse_args(flags)
        except SystemExit as err:
            raise AssertionError(f"{script_arg} refuses {shlex.join(flags)} (exit {err.code})") from None
    finally:
        sys.path.remove(str(script.parent))
        sys.modules.pop(spec.name, None)


def check(command: Command) -> None:
    argv = list(command.argv)
    if argv[0] == "persetrain":
        check_persetrain(argv[1:])
    elif argv[0] == "make":
        check_make(argv[1:])
    elif argv[:2] == ["accelerate", "launch"]:
        check_accelerate(argv[2:])
    elif argv[:2] == ["python", "-m"]:
        check_python_module(argv[2:])
    else:
        check_benchmark(argv[1:])


@pytest.fixture
def in_checkout(monkeypatch):
    """Commands run from the repository root; recipes export their ``env``, kept out of other tests."""
    monkeypatch.chdir(REPO)
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


# ----------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("command", ALL_COMMANDS, ids=str)
def test_documented_command_parses(command, in_checkout):
    check(command)


def test_readme_is_a_user_guide():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert [line[3:] for line in lines if line.startswith("## ")] == README_SECTIONS


MARKDOWN_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
GUIDE_MENTION = re.compile(r"`((?:docs|benchmarks|data|data_prep)/[\w./-]+\.md)`")


@pytest.mark.parametrize("guide", GUIDES, ids=lambda path: str(path.relative_to(REPO)))
def test_guides_name_only_files_that_exist(guide):
    """A link, or a guide named in backquotes, that leads nowhere is a dead end for the reader who follows it."""
    text = guide.read_text(encoding="utf-8")
    links = [target for target in MARKDOWN_LINK.findall(text) if ":" not in target]  # URLs and mailto: are not files
    missing = [target for target in links if not (guide.parent / target).exists()]
    missing += [name for name in GUIDE_MENTION.findall(text) if not (REPO / name).exists()]
    assert not missing, f"{guide.relative_to(REPO)} names files that do not exist: {missing}"


def test_every_study_is_in_the_findings_index():
    index = (REPO / "docs" / "findings" / "README.md").read_text(encoding="utf-8")
    studies = sorted(path.name for path in (REPO / "docs" / "findings").glob("*.md") if path.name != "README.md")
    assert studies, "docs/findings/ holds no study"
    missing = [name for name in studies if f"]({name})" not in index]
    assert not missing, f"docs/findings/README.md does not link {missing}"


def test_every_benchmark_script_is_in_the_table():
    """A script in benchmarks/ is a canonical benchmark: a row of the README's table, ``make_parser()`` for its
    documented commands, the shared timers of ``common.py`` and its closing JSON line from ``common.emit``."""
    lines = (REPO / "benchmarks" / "README.md").read_text(encoding="utf-8").splitlines()
    rows = " ".join(line.split("|")[1] for line in lines if line.startswith("| `"))  # the table's first column
    for script in sorted((REPO / "benchmarks").glob("*.py")):
        if script.name == "common.py":
            continue
        source = script.read_text(encoding="utf-8")
        assert f"`{script.name}" in rows, f"benchmarks/{script.name} has no row in benchmarks/README.md's table"
        assert "from common import" in source and "emit(" in source, f"{script.name} does not end with common.emit"
        assert "def make_parser(" in source, f"{script.name} has no make_parser()"


def test_readme_lists_exactly_the_named_rewards():
    """The README's ``reward_funcs`` names are the registry's, in its order (``persetrain.rewards.registry``)."""
    from persetrain.rewards.registry import REWARDS

    text = " ".join(README.read_text(encoding="utf-8").split())
    listed = re.search(r"`reward_funcs`: (.*?), dotted path\.", text)
    assert listed, "README.md has no `reward_funcs`: ..., dotted path. list"
    assert re.findall(r"`([\w-]+)`", listed.group(1)) == list(REWARDS)


def test_readme_shows_every_kind_of_command():
    argvs = [c.argv for c in documented_commands(README)]
    assert len(argvs) >= 25
    for leaf in ("sft", "grpo", "rm", "evaluate", "meta-eval", "launch", "push", "serve", "generate"):
        assert any(argv[:2] == ("persetrain", leaf) for argv in argvs), f"README shows no `persetrain {leaf}`"
    assert any(argv[:2] == ("accelerate", "launch") for argv in argvs)
    assert {"setup", "test", "lint"} <= {argv[1] for argv in argvs if argv[0] == "make"}


def test_extraction_reads_blocks_as_a_shell_would(tmp_path):
    guide = tmp_path / "guide.md"
    guide.write_text(
        "\n".join(
            [
                "```bash",
                "make setup && make test   # both",
                "persetrain sft --config a.yaml \\",
                "    --max_steps 2",
                "pip install -e .",
                "```",
                "persetrain evaluate --not-in-a-block",
                "```console",
                "$ ACCELERATE_USE_CPU=true python -m persetrain.train.sft --config 'b c.yaml'",
                "persetrain output line",
                "```",
            ]
        )
    )
    assert [(c.where, c.argv) for c in documented_commands(guide)] == [
        ("guide.md:2", ("make", "setup")),
        ("guide.md:2", ("make", "test")),
        ("guide.md:3", ("persetrain", "sft", "--config", "a.yaml", "--max_steps", "2")),
        ("guide.md:9", ("python", "-m", "persetrain.train.sft", "--config", "b c.yaml")),
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ("persetrain", "evaluate", "--data", "d", "--no-such-flag", "1"),
        ("persetrain", "no-such-command"),
        ("persetrain", "prepare", "sample"),  # --out is required
        ("persetrain", "sft", "--config", "recipes/perse/no-such-recipe.yaml"),
        ("persetrain", "sft", "--config", "recipes/perse/cpu_smollm2_per-mpst-k3.yaml", "--no_such_key", "1"),
        ("persetrain", "grpo", "--config", "recipes/parl/cpu_smollm2_news.yaml", "--learning_rate", "fast"),
        ("persetrain", "launch", "--config", "recipes/perse/cpu_smollm2_per-mpst-k3.yaml", "--", "--no_such_key", "1"),
        ("accelerate", "launch", "--config_file", "accelerate_configs/none.yaml", "-m", "persetrain.train.sft"),
        ("python", "-m", "persetrain.models", "info"),
        ("make", "no-such-target"),
        ("python", "benchmarks/engine.py", "--no-such-flag"),
        ("python", "benchmarks/parl.py", "--part", "no-such-part"),
    ],
    ids=shlex.join,
)
def test_a_wrong_command_is_caught(argv, in_checkout):
    with pytest.raises((AssertionError, CLICK_ERROR, ValueError)):
        check(Command("test", argv))
