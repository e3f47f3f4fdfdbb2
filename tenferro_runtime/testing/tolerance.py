"""Dtype-aware comparison of a backend's result with the reference.

Integers and bools must match exactly. Floating results must put NaNs in the
same places, match infinities exactly, and elsewhere satisfy
``|actual - expected| <= mult * (atol + rtol * |expected|) + 2 * eps * bound``
where `bound` is an optional per-element error scale supplied by the case
(for sums and contractions: terms x sum of |terms|). Tolerances are per float
width; float16 and bfloat16 are loose. Signed zeros are not distinguished.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tenferro_core.dtypes import DType


@dataclass(frozen=True)
class Tol:
    """rtol/atol for one float width, and its machine epsilon."""

    rtol: float
    atol: float
    eps: float


_BY_BITS = {
    "float16": Tol(rtol=1e-2, atol=1e-3, eps=2.0**-10),
    "bfloat16": Tol(rtol=4e-2, atol=1e-2, eps=2.0**-7),
    "float32": Tol(rtol=2e-5, atol=1e-6, eps=2.0**-23),
    "float64": Tol(rtol=1e-12, atol=1e-14, eps=2.0**-52),
}


def tolerance(dtype: DType) -> Tol:
    """The tolerance of a floating or complex dtype (complex: that of its components)."""
    name = {"complex64": "float32", "complex128": "float64"}.get(dtype.name, dtype.name)
    return _BY_BITS[name]


def _describe(actual: np.ndarray, expected: np.ndarray, bad: np.ndarray, limit: int = 6) -> str:
    where = np.argwhere(bad)[:limit]
    rows = [f"  at {tuple(int(i) for i in w)}: got {actual[tuple(w)]!r}, expected {expected[tuple(w)]!r}"
            for w in where]
    return f"{int(bad.sum())} of {bad.size} element(s) differ:\n" + "\n".join(rows)


def assert_close(actual: np.ndarray, expected: np.ndarray, dtype: DType, *, mult: float = 1.0,
                 bound: np.ndarray | None = None, what: str = "") -> None:
    """Assert a backend result equals the reference within the dtype's tolerance."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    prefix = f"{what}: " if what else ""
    if actual.shape != expected.shape:
        raise AssertionError(f"{prefix}shape {actual.shape} differs from expected {expected.shape}")
    if dtype.kind in "biu":
        bad = actual != expected
        if bad.any():
            raise AssertionError(prefix + _describe(actual, expected, bad))
        return
    tol = tolerance(dtype)
    wide = np.complex128 if dtype.kind == "c" else np.float64
    a, e = actual.astype(wide), expected.astype(wide)
    nan_a, nan_e = np.isnan(a), np.isnan(e)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = mult * (tol.atol + tol.rtol * np.abs(e))
        if bound is not None:
            allowed = allowed + 2 * tol.eps * np.asarray(bound, dtype=np.float64)
        finite = np.isfinite(a) & np.isfinite(e)
        near = finite & (np.abs(a - e) <= allowed)
    bad = (nan_a != nan_e) | (~nan_e & ~(a == e) & ~near)
    if bad.any():
        raise AssertionError(prefix + _describe(actual, expected, bad))


def assert_identical(actual: np.ndarray, expected: np.ndarray, what: str = "") -> None:
    """Bit-exact equality (for bitcast and pure data movement), NaN payloads included."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    prefix = f"{what}: " if what else ""
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise AssertionError(
            f"{prefix}got {actual.dtype}{list(actual.shape)}, expected {expected.dtype}{list(expected.shape)}"
        )
    raw = np.dtype(f"V{actual.dtype.itemsize}")
    bad = np.ascontiguousarray(actual).view(raw) != np.ascontiguousarray(expected).view(raw)
    bad = np.asarray(bad).reshape(actual.shape)
    if bad.any():
        raise AssertionError(prefix + _describe(actual, expected, bad))
