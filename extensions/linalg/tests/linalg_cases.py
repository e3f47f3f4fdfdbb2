"""Random inputs shared by the tenferro-linalg tests."""

from __future__ import annotations

import numpy as np


def rand(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Standard normal entries (complex: independent real and imaginary parts) of `dtype`."""
    a = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)
