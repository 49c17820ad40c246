"""Stop a training run cleanly on SIGTERM / SIGUSR1: finish the step, save a checkpoint, exit.

Why: a scheduler that preempts or times out a job (Slurm sends SIGTERM, or SIGUSR1 some minutes
before the limit with ``--signal=B:USR1@120``) gives the job a grace period and then kills it. A
checkpoint taken at the signal loses at most the step in flight, and ``auto_resume`` continues from
it with the same data order and optimizer state when the job is requeued.

The handler only records the signal; the callback acts at the end of the optimizer step, where the
Trainer can save a consistent checkpoint. Under DDP every rank must stop at the same step (a rank
that stops alone leaves the others waiting in their next all-reduce), so the flag is all-reduced
across ranks at each step end: a signal that reaches any rank stops them all. A second signal while
the checkpoint is being written restores the default action, so it kills the process as usual.
"""

from __future__ import annotations

import signal
import threading

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from persetrain.signals import STOP_SIGNALS


class CheckpointOnSignal(TrainerCallback):
    """Save a checkpoint and stop training when one of ``signals`` arrives.

    ``received`` is the signal number that stopped the run, or None. Handlers are installed at
    ``on_train_begin`` and the previous ones restored at ``on_train_end`` (only in the main thread,
    the only place Python delivers signals).
    """

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS):
        self.signals = signals
        self.received: int | None = None
        self._pending: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame):
        if self._pending is not None:  # the second signal: stop waiting for the checkpoint
            signal.signal(signum, signal.SIG_DFL if signum != signal.SIGINT else signal.default_int_handler)
            signal.raise_signal(signum)
        self._pending = signum

    def on_train_begin(self, args, state, control, **kwargs):
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.signals}

    def _agreed_signal(self, device: torch.device) -> int:
        """The signal any rank received (0 for none)."""
        flag = torch.tensor(self._pending or 0, device=device)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag)

    def on_step_end(self, args, state, control, **kwargs):
        signum = self._agreed_signal(args.device)
        # At the last step the run is ending anyway: it saves its final model instead. (A checkpoint of the
        # last step would also resume wrongly: transformers trains one step past max_steps from it.)
        if signum and state.global_step < state.max_steps:
            self.received = signum
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}
