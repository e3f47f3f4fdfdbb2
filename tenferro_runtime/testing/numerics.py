"""Exact and widened arithmetic helpers shared by the reference implementations.

Integers are computed with Python ints (object arrays) and wrapped to the
output width, so overflow semantics are checked exactly. Floats are computed
in float64 / complex128 and rounded once to the output dtype, which is the
correctly rounded answer for + - * / and within an ulp or two elsewhere.
Python ints headed for a floating dtype go through float64 (Python's int to
float is correctly rounded), never straight from an object array: ml_dtypes'
bfloat16 refuses ints beyond int64 there.

ml_dtypes' bfloat16 has NumPy dtype kind 'V'; `kind` reads it as the float it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

QUIET = {"divide": "ignore", "invalid": "ignore", "over": "ignore", "under": "ignore"}


def full_power(x: Any, y: Any) -> np.ndarray:
    """np.power(x, y) computed elementwise as C's pow: NumPy takes a square root for a 0-d,
    one-element or broadcast exponent of 0.5, which gives NaN for -inf and -0.0 for -0.0
    where pow (and the array API standard) give +inf and +0.0."""
    a, b = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    out = np.power(a.reshape(-1).copy(), b.reshape(-1).copy())
    return out.reshape(a.shape)


def kind(npd: Any) -> str:
    """NumPy's dtype kind ('b', 'i', 'u', 'f', 'c'), with bfloat16 (kind 'V') as 'f'."""
    npd = np.dtype(npd)
    return "f" if npd.name == "bfloat16" else npd.kind


def wide(x: np.ndarray) -> np.ndarray:
    """Python ints (object array) for integers, float64/complex128 for inexact, bools as is."""
    k = kind(x.dtype)
    if k in "iu":
        return np.asarray(x).astype(object)
    if k == "f":
        return np.asarray(x, dtype=np.float64)
    if k == "c":
        return np.asarray(x, dtype=np.complex128)
    return np.asarray(x, dtype=bool)


def wrap_int(v: Any, npd: np.dtype) -> int:
    """A Python int reduced modulo 2**bits into the range of integer dtype `npd`."""
    bits = npd.itemsize * 8
    v = int(v) % (1 << bits)
    if npd.kind == "i" and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def narrow(values: Any, npd: np.dtype) -> np.ndarray:
    """Round widened values to dtype `npd`: wrap ints, round floats (the real part of complex
    values for a real dtype), test bools. Object arrays (Python ints, floats, complex numbers)
    reach a floating dtype through float64 / complex128."""
    npd = np.dtype(npd)
    arr = np.asarray(values)
    k = kind(npd)
    if k in "iu":
        flat = [wrap_int(v, npd) for v in arr.reshape(-1).tolist()]
        return np.array(flat, dtype=npd).reshape(arr.shape)
    if k == "b":
        return arr.astype(bool)
    if arr.dtype == object:
        is_complex = any(isinstance(v, (complex, np.complexfloating)) for v in arr.reshape(-1).tolist())
        arr = arr.astype(np.complex128 if is_complex else np.float64)
    with np.errstate(**QUIET):
        if k == "f" and arr.dtype.kind == "c":
            arr = arr.real
        return arr.astype(npd)


def elementwise(fn: Any, *arrays: np.ndarray) -> np.ndarray:
    """Apply a Python function element by element (object result, same shape)."""
    if not arrays[0].shape:
        return np.asarray(fn(*[a.item() if hasattr(a, "item") else a for a in arrays]), dtype=object)
    out = np.empty(arrays[0].shape, dtype=object)
    flats = [np.asarray(a, dtype=object).reshape(-1) for a in arrays]
    out.reshape(-1)[:] = [fn(*vals) for vals in zip(*flats)] if out.size else []
    return out


def bits_of(npd: np.dtype) -> int:
    return np.dtype(npd).itemsize * 8


def trunc_div(a: int, b: int) -> int:
    """Integer division rounding toward zero (C semantics) on Python ints; b != 0."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q
