"""End a rank of a multi-process run that makes no progress for ``ddp_timeout`` seconds, with one line naming it.

Why: a rank whose peer stopped (frozen, deadlocked, a node gone quiet) waits in its next collective, and on this
machine gloo's all-gather waited there for minutes past the process group's timeout, silently. torch elastic
only acts when a rank *exits*; so each rank watches its own progress (a step, a micro-batch, a log, a save), and
one that has made none for ``ddp_timeout`` seconds prints which rank and step it is and exits, and the agent then
ends the others. The default ``ddp_timeout`` (1800 s) is far above any step or checkpoint save of the recipes.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from transformers import TrainerCallback


class HangWatchdog(TrainerCallback):
    """Exit this rank (code 1) after ``args.ddp_timeout`` seconds without training progress; one process is left
    alone (nothing can make it wait on another)."""

    def __init__(self) -> None:
        self._last = time.monotonic()
        self._step = 0
        self._done = threading.Event()

    def _beat(self, state) -> None:
        self._last, self._step = time.monotonic(), state.global_step

    def on_train_begin(self, args, state, control, **kwargs):
        self._beat(state)
        if args.world_size > 1:
            where = f"{args.output_dir}: rank {args.process_index} of {args.world_size}"
            threading.Thread(target=self._watch, args=(args.ddp_timeout, where), daemon=True).start()

    def on_step_begin(self, args, state, control, **kwargs):
        self._beat(state)

    def on_substep_end(self, args, state, control, **kwargs):
        self._beat(state)

    def on_step_end(self, args, state, control, **kwargs):
        self._beat(state)

    def on_log(self, args, state, control, **kwargs):
        self._beat(state)

    def on_save(self, args, state, control, **kwargs):
        self._beat(state)

    def on_prediction_step(self, args, state, control, **kwargs):
        self._beat(state)

    def on_train_end(self, args, state, control, **kwargs):
        self._done.set()

    def _watch(self, timeout: float, where: str) -> None:
        while not self._done.wait(min(5.0, timeout / 10)):
            if time.monotonic() - self._last > timeout:
                sys.stderr.write(
                    f"error: {where}: no progress for {timeout:.0f} s (ddp_timeout) after step {self._step}: "
                    "a collective is waiting on a rank that stopped, died or is stuck; ending this rank\n"
                )
                sys.stderr.flush()
                os._exit(1)
