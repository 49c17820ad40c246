"""The ``persetrain`` application object and what every command module shares: the one-line error handling,
the common options and the engine factory.

Each command module (``models``, ``prepare``, ``train``, ``evaluate``, ``launch``, ``hub``) registers its
commands on :data:`app`; :mod:`persetrain.cli` imports them in the order ``persetrain --help`` lists them.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from typer.core import TyperGroup

from persetrain.console import console, set_quiet
from persetrain.helptext import plain_text
from persetrain.io import InputError
from persetrain.models import ModelSpecError


class _ErrorsAsOneLine(TyperGroup):
    """Every command's expected failures - bad input, an unknown model, a model server that does not
    answer - end as one ``error:`` line and exit code 2, never a traceback; a command whose training run a
    signal stopped (``persetrain sft``, a demo) ends as one ``stopped:`` line and the run's exit code (128 + signal)."""

    def invoke(self, ctx):
        from persetrain.engine import EngineError
        from persetrain.launch.accelerate import LaunchStopped, RankFailed
        from persetrain.train.stopped import TrainingStopped

        try:
            return super().invoke(ctx)
        except (InputError, ModelSpecError, EngineError, ValueError) as err:
            _fail(err)
        except (TrainingStopped, LaunchStopped) as err:  # checkpointed on SIGTERM / SIGINT / SIGUSR1: rerun resumes
            console.print("[yellow]stopped:[/yellow]", escape(str(err)))
            raise typer.Exit(code=err.exit_code) from None
        except RankFailed as err:  # the rank's own error is in its output; this names which and how
            console.print("[red]error:[/red]", escape(str(err)))
            raise typer.Exit(code=err.exit_code) from None


app = typer.Typer(
    help="Train and run learned evaluators of personalized text.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    cls=_ErrorsAsOneLine,
)

ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="Model spec: embedded:NAME, a directory, a .gguf file or a Hub id.")
]
BackendOpt = Annotated[str, typer.Option(help="Engine backend: hf (local) or openai (a server).")]
BaseUrlOpt = Annotated[
    str | None, typer.Option(help="Server URL for the openai backend, e.g. http://127.0.0.1:8000/v1")
]
CacheOpt = Annotated[Path | None, typer.Option(help="SQLite request cache; a re-run skips finished calls.")]


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"persetrain {installed_version('persetrain')}")
        raise typer.Exit()


@app.callback()
def main(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the installed version and exit."),
    ] = False,
) -> None:
    set_quiet(quiet)


def plain_help(commands: typer.Typer) -> None:
    """Every command's help as plain text: docstrings are written for Sphinx (double backquotes, roles), which typer
    would show as they are. Called once every command module has registered its commands."""
    for info in commands.registered_commands:
        info.help = plain_text(info.help or inspect.getdoc(info.callback) or "")
    for group in commands.registered_groups:
        if isinstance(group.typer_instance.info.help, str):
            group.typer_instance.info.help = plain_text(group.typer_instance.info.help)
        plain_help(group.typer_instance)


def _fail(err: Exception) -> None:
    console.print("[red]error:[/red]", escape(str(err)))
    raise typer.Exit(code=2)


#: A renamed command takes any arguments, ``--help`` included: it refuses them all the same.
_ANY_ARGUMENTS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def renamed_command(group: typer.Typer, group_name: str, old: str, new: str) -> None:
    """Keep ``old``, a command's name before it was renamed ``new``, as a hidden command that fails in one line
    naming the new one (exit 2), so that a script written before the rename says what to type instead of
    "No such command"."""
    old_path, new_path = f"persetrain {group_name} {old}", f"persetrain {group_name} {new}"

    @group.command(old, hidden=True, context_settings=_ANY_ARGUMENTS, help=f"Renamed: {new_path}.")
    def refuse() -> None:
        raise ValueError(f"`{old_path}` is now `{new_path}`")


def make_engine(model: str, backend: str, base_url: str | None, cache: Path | None, **options):
    """The engine a command runs on; one place, so that every command passes backend, cache and server alike."""
    from persetrain.engine import load_engine

    return load_engine(model, backend=backend, cache_path=cache, base_url=base_url, **options)
