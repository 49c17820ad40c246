"""One console and one kind of progress bar for the whole project.

Every loop over data shows a rich progress bar; ``--quiet`` on the CLI (or ``set_quiet``) turns
them all off at once, which is why loops call ``track`` here instead of building their own bars.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

T = TypeVar("T")

#: soft_wrap: a message is never hard-wrapped at the terminal width (80 columns when output is not a
#: terminal), so an error stays one line that a user can grep a log for.
console = Console(stderr=True, soft_wrap=True)
_quiet = False


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    """Whether progress is off: for the loops that draw their own bars (a Trainer's ``disable_tqdm``)."""
    return _quiet


def progress() -> Progress:
    """A progress display that is disabled when quiet; use ``add_task``/``advance`` for manual steps."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=_quiet,
        transient=False,
    )


def track(items: Iterable[T], description: str, total: int | None = None, disable: bool = False) -> Iterator[T]:
    """Iterate with a progress bar; ``disable`` hides it for loops too short to need one."""
    if disable or _quiet:
        yield from items
        return
    with progress() as bar:
        yield from bar.track(items, total=total, description=description)


def warn(message: str) -> None:
    """Warnings are shown even when quiet: quiet silences progress, not problems."""
    console.print(f"[yellow]warning:[/yellow] {message}")
