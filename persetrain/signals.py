"""A process's stop signals, read by the trainer that checkpoints on them and by the launcher that forwards them.

Below both ``persetrain.train`` (``persetrain.train.signals.CheckpointOnSignal`` acts on them) and
``persetrain.launch`` (which passes them to its ranks and reads their exit codes), and free of torch, so that a
launcher plans and prints a command without loading it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: Signals that make a run checkpoint and stop: a scheduler's (TERM, USR1) and Ctrl-C's (INT), which torch
#: elastic passes on to every rank (``persetrain launch``).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def exit_code(signum: int) -> int:
    """The shell's exit status of a process ended by ``signum`` (128 + n), so schedulers read it as such."""
    return 128 + signum


#: prctl(2) option: the signal this process gets when its parent exits
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Under torch elastic, let this rank be killed when its launcher process exits.

    Why: elastic starts each rank in a session of its own, so a launcher killed outright (SIGKILL, a scheduler's
    hard time limit, an OOM kill) would leave its ranks running, holding their memory and, with a peer gone,
    waiting in a collective until its timeout. Linux's parent-death signal ends them with it. Elsewhere, and
    outside elastic (one process), nothing changes.
    """
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the launcher died before the call: nothing will send the signal
        os._exit(exit_code(signal.SIGKILL))
