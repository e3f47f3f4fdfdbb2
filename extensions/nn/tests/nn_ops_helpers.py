"""Shared by the tests of tenferro-nn's ops: the float dtypes a device has, host copies, and
operands in a dtype and layout."""

from __future__ import annotations

import numpy as np

from tenferro_core import dtypes as D
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime

FLOATS = ("float16", "bfloat16", "float32", "float64")


def dtypes_of(device: str) -> list[str]:
    """The float dtypes `device` supports."""
    have = {d.name for d in default_runtime().device(device).dtypes}
    return [d for d in FLOATS if d in have]


def host(t) -> np.ndarray:
    """`t`'s values as float64 NumPy (exact for every float dtype, signed zeros kept)."""
    return np.asarray(xp.astype(t, D.float64).numpy())


def tensor(a: np.ndarray, dtype: str, transpose: bool):
    """`a` in `dtype` on the default device; with `transpose`, a non-contiguous (transposed)
    view holding `a`'s values."""
    if transpose and a.ndim >= 2:
        t = xp.asarray(np.ascontiguousarray(np.swapaxes(a, 0, 1)))
        t = xp.permute_dims(t, (1, 0) + tuple(range(2, a.ndim)))
    else:
        t = xp.asarray(a)
    return xp.astype(t, getattr(D, dtype))
