"""Generated programs for the control-flow tests: a body is a list of smooth unary steps,
applied the same way to tenferro tensors and to NumPy arrays (the Python reference)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from tenferro_runtime import array_api as xp

DEVICES = ["numpy:cpu", "torch:cpu"]

STEPS = [
    (xp.sin, np.sin),
    (xp.tanh, np.tanh),
    (xp.cos, np.cos),
    (lambda a: a * 0.7, lambda a: a * 0.7),
    (lambda a: a + 0.3, lambda a: a + 0.3),
    (lambda a: a * a * 0.5, lambda a: a * a * 0.5),
]

programs = st.lists(st.integers(0, len(STEPS) - 1), min_size=0, max_size=3)


def run(prog: list, a, ref: bool = False):
    """`prog` applied to `a` (a tensor, or a NumPy array with ref=True)."""
    for k in prog:
        a = STEPS[k][1 if ref else 0](a)
    return a


def values(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape)


def close(got, want, tol: float = 1e-10) -> None:
    got = got.numpy() if hasattr(got, "numpy") else got
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol)
