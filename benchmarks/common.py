"""What every benchmark script shares, written once: its timers, the matmul ceiling and its closing JSON line.

A script imports these as a neighbour (``from common import best_of, emit``; ``python benchmarks/X.py`` puts
``benchmarks/`` on the path), so that every figure in ``benchmarks/README.md`` is timed the same way:

- ``best_of``: the fastest of N calls, as ``timeit`` takes it. On a shared machine other jobs only ever slow a
  call down, so the fastest is the one least disturbed, and the only one that two runs can agree on.
- ``StepTimer``: a trainer callback with each optimizer step's wall time and the tokens TRL counted for it.
- ``matmul_rate``: the rate of ``torch.mm`` at given shapes, best of N, the ceiling that a utilization figure
  (tokens/s x FLOPs per token / ceiling) divides by. Measured in the same run as the figure, because on a shared
  machine the ceiling itself moves from run to run.
- ``emit``: the one JSON line a script ends with, the line the README's table quotes.

On a GPU the timers synchronise the device at both ends of what they time: kernels run asynchronously, and an
unsynchronised timer would stop when they were queued, not when they ran.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback


def synchronize() -> None:
    """Wait for the GPU's queued kernels (nothing to wait for on a CPU)."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The shortest wall time in seconds of ``repeats`` calls of ``fn``, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        result = fn()
        synchronize()
        best = min(best, time.perf_counter() - start)
    return best, result


class StepTimer(TrainerCallback):
    """Wall time of each optimizer step, and the tokens it trained (from the ``num_tokens`` TRL logs every step
    when ``logging_steps`` is 1)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.tokens: list[int] = []
        self._start = 0.0
        self._seen = 0

    def on_step_begin(self, args, state, control, **kwargs):
        synchronize()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        synchronize()
        self.seconds.append(time.perf_counter() - self._start)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "num_tokens" in logs:
            self.tokens.append(int(logs["num_tokens"]) - self._seen)
            self._seen = int(logs["num_tokens"])


def step_shapes(config, tokens: int) -> list[tuple[int, int, int]]:
    """The projection matmuls ``(m, k, n)`` of one training step over ``tokens`` tokens of a decoder with the
    transformers ``config``: attention and MLP projections forward, and the MLP's weight-gradient products."""
    hidden, inner = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    kv = config.num_key_value_heads * head_dim
    return [
        (tokens, hidden, hidden),
        (tokens, hidden, kv),
        (tokens, hidden, inner),
        (tokens, inner, hidden),
        (hidden, tokens, inner),
        (inner, tokens, hidden),
    ]


def matmul_rate(
    shapes: list[tuple[int, int, int]],
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    repeats: int = 5,
    products: int = 1,
) -> float:
    """FLOP/s of ``torch.mm`` over ``shapes``: their FLOPs over the sum of each shape's best time.

    Each shape is warmed up, then timed ``repeats`` times, ``products`` products a sample (on a GPU, several, so
    that a sample outlasts a kernel launch). The rate is what a step made only of these products would reach.
    """
    flops = seconds = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, device=device, dtype=dtype)
        b = torch.randn(k, n, device=device, dtype=dtype)
        for _ in range(2):
            torch.mm(a, b)

        def run(a=a, b=b) -> None:
            for _ in range(products):
                torch.mm(a, b)

        best, _ = best_of(run, repeats)
        flops += 2 * m * k * n
        seconds += best / products
    return flops / seconds


def emit(figures: dict[str, Any]) -> None:
    """Print the script's closing JSON line (the last line of its output)."""
    print(json.dumps(figures), flush=True)
