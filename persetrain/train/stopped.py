"""The exception a pipeline stops with when a signal stopped one of its training runs.

A module of its own, free of torch and TRL, so that the command line can catch it around every command without
importing the trainers (3.5 s) for commands that train nothing.
"""

from __future__ import annotations

from pathlib import Path


class TrainingStopped(RuntimeError):
    """A run that a pipeline goes on from (a demo's judge, its GRPO) was stopped by a signal after its checkpoint.

    Why an exception: the stopped run's directory holds a checkpoint, not a model, and a pipeline that went on
    from it would train or judge with an unfinished model and record the stage as done. Stopping the pipeline
    with the run's exit code (128 + signal, what a scheduler reads) lets the same command resume the run.
    """

    def __init__(self, output_dir: str | Path, signal: int, step: int, exit_code: int):
        super().__init__(
            f"{output_dir}: training stopped by signal {signal} at step {step}, after saving a checkpoint; "
            "run the same command again to resume it"
        )
        self.exit_code = exit_code
