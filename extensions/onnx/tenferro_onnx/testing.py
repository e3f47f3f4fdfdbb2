"""Test helpers of tenferro-onnx (also for other packages testing their exports): compare an
the reference evaluator) with tenferro's eager results at the task's tolerances."""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_core import dtypes as D

# (rtol, atol) per float dtype: elementwise, and reductions/contractions
TOL = {
    "float16": ((1e-2, 1e-3), (1e-2, 1e-3)),
    "float32": ((1e-5, 1e-6), (1e-4, 1e-5)),
    "float64": ((1e-12, 1e-14), (1e-10, 1e-12)),
    # 1 ulp (both compute in float32, round once) plus float32's atol (onnxruntime's float32
    # kernels, e.g. Sigmoid, lose relative accuracy near 0); a few ulp where they accumulate
    "bfloat16": ((2.0 ** -7, 1e-6), (2.0 ** -5, 1e-5)),
}
EPS = {"float16": 2.0 ** -10, "float32": 2.0 ** -23, "float64": 2.0 ** -52, "bfloat16": 2.0 ** -7}


def assert_matches(got: Any, want: Any, *, accumulates: bool = False, mult: float = 1.0,
                   bound: Any = None, what: str = "", rtol: float | None = None) -> None:
    """Exact for ints and bools; floats: NaNs and infinities in the same places, elsewhere
    |got - want| <= mult*atol + rtol*|want| (+ 2 eps * bound for accumulations)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind in "biu":
        bad = got != want
        assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ: got {got[bad][:5]}, "
                               f"want {want[bad][:5]}")
        return
    name = want.dtype.name
    r, atol = TOL[name][accumulates]
    rtol = r if rtol is None else rtol
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{what}: NaNs differ: got {got}, want {want}"
    inf = np.isinf(w) | np.isinf(g)
    assert np.array_equal(g[inf], w[inf]), f"{what}: infinities differ: got {got}, want {want}"
    fin = np.isfinite(w) & np.isfinite(g)
    tol = mult * atol + rtol * np.abs(w)
    if bound is not None:
        tol = tol + 2 * EPS[name] * np.broadcast_to(np.asarray(bound, np.float64), w.shape)
    with np.errstate(invalid="ignore"):  # inf - inf where not finite (masked by `fin`)
        bad = fin & (np.abs(g - w) > tol)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ beyond rtol={rtol}: "
                           f"got {got[bad][:5]}, want {want[bad][:5]}")


def assert_same_bits(got: Any, want: Any, what: str = "") -> None:
    """Bit for bit equal (signed zeros included), NaNs (any payload) in the same places: data
    movement, and conversions both sides round correctly."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    g, w = np.ascontiguousarray(got).reshape(-1), np.ascontiguousarray(want).reshape(-1)
    n = got.dtype.itemsize
    bad = (g.view(np.uint8).reshape(-1, n) != w.view(np.uint8).reshape(-1, n)).any(axis=1)
    if want.dtype.kind not in "biu":
        wide = np.complex128 if want.dtype.kind == "c" else np.float64
        bad &= ~(np.isnan(g.astype(wide)) & np.isnan(w.astype(wide)))
    bad = bad.reshape(got.shape)
    assert not np.any(bad), (f"{what}: {int(np.sum(bad))} of {got.size} differ in bits: got "
                             f"{got[bad][:5]}, want {want[bad][:5]}")


def host(x: Any) -> np.ndarray:
    return np.asarray(x)


__all__ = ["D", "TOL", "assert_matches", "assert_same_bits", "host"]
