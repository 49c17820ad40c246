"""How closely two computations of one number agree on the hardware the suite runs on.

The engine and the trainers compute in the dtype the hardware is fast in (``persetrain.models.best_dtype``):
fp32 on a CPU, where a fast path and its reference agree to ~1e-6, and bf16 on a GPU. bf16 keeps 8 bits of
mantissa (~4e-3 relative error in every activation), so two correct computations that differ only in
kernel, batch shape or accumulation order differ by up to ~1e-2 there (measured on an H100: reward-model
scores 4e-3 apart, choice probabilities 1e-4). Equivalence tests state their fp32 tolerance; ``close`` and
``tensor_tolerance`` widen it to what bf16 keeps. That still fails on the errors those tests exist to catch:
a wrong position, mask or token moves a value by far more on the tiny random-weight models. Tests that hold
exact numbers (golden metrics written on a CPU; a batched text equal to the one generated alone) take the
``fp32_compute`` fixture (``tests/conftest.py``) instead, and run in fp32 on every device.
"""

from __future__ import annotations

import pytest
import torch

from persetrain.models import best_device, best_dtype

DTYPE = best_dtype(best_device())
LOW_PRECISION = torch.float32 != DTYPE
# What two correct bf16/fp16 computations of one value may differ by, absolutely and relatively.
LOW_PRECISION_ABS = 2e-2
LOW_PRECISION_REL = 2e-2


def close(expected, abs: float = 1e-5, rel: float | None = None):  # noqa: A002 - pytest.approx's own names
    """``pytest.approx(expected, abs=abs, rel=rel)``, widened to bf16's precision where the device computes in it."""
    if LOW_PRECISION:
        return pytest.approx(expected, abs=max(abs, LOW_PRECISION_ABS), rel=max(rel or 0.0, LOW_PRECISION_REL))
    return pytest.approx(expected, abs=abs, rel=rel)


def tensor_tolerance(atol: float, rtol: float = 1e-5) -> dict[str, float]:
    """``atol``/``rtol`` keywords for ``torch.allclose`` and ``torch.testing.assert_close``, widened likewise."""
    if LOW_PRECISION:
        return {"atol": max(atol, LOW_PRECISION_ABS), "rtol": max(rtol, LOW_PRECISION_REL)}
    return {"atol": atol, "rtol": rtol}
