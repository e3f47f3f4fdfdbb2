"""NumPy reference implementations of every core primitive.

`REFERENCE[name](*host_arrays, **params)` (params as `check_params` returns them)
returns the exact expected result as a NumPy array of the primitive's output dtype. These are written from the
semantics in docs/primitives.md, independently of any backend's kernels:
integer arithmetic runs on Python ints and wraps, floating point runs in
float64/complex128 and rounds once, and the structural primitives use
explicit index arithmetic (see reference_structural and reference_reductions).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .numerics import QUIET, bits_of, elementwise, full_power, narrow, trunc_div, wide
from .reference_reductions import REDUCTION_REFERENCE
from .reference_structural import STRUCTURAL_REFERENCE

# ---- unary ------------------------------------------------------------------


def _float_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def ref(x):
        with np.errstate(**QUIET):
            return narrow(fn(wide(x)), x.dtype)

    return ref


def _log1p(x):
    """log1p; complex near 0 as log1p(x(2 + x) + y^2) / 2 + i atan2(y, 1 + x) in long double
    (NumPy's complex log1p is log(1 + z), which loses the real part there)."""
    out = np.log1p(wide(x))
    if x.dtype.kind != "c":
        return out
    z = x.astype(np.clongdouble)
    re, im = z.real, z.imag
    real = np.log1p(re * (2 + re) + im * im) / 2
    near = (real + 1j * np.arctan2(im, 1 + re)).astype(np.complex128)
    return np.where(np.abs(z) < 0.5, near, out)


def _neg(x):
    if x.dtype.kind == "b":
        return x.copy()
    return narrow(-wide(x), x.dtype)


def _abs(x):
    if x.dtype.kind == "c":
        w = wide(x)
        out = np.hypot(w.real, w.imag)
        return narrow(out, np.zeros((), x.dtype).real.dtype)
    return narrow(elementwise(abs, x) if x.dtype.kind in "iu" else np.abs(wide(x)), x.dtype)


def _sign(x):
    k = x.dtype.kind
    w = wide(x)
    if k in "iu":
        return narrow(elementwise(lambda v: (v > 0) - (v < 0), x), x.dtype)
    if k == "c":
        with np.errstate(**QUIET):
            mag = np.hypot(w.real, w.imag)
            out = np.where(mag == 0, 0, w / np.where(mag == 0, 1, mag))
        return narrow(out, x.dtype)
    out = np.where(np.isnan(w), np.nan, np.where(w > 0, 1.0, np.where(w < 0, -1.0, 0.0)))
    return narrow(out, x.dtype)


def _real(x):
    return narrow(wide(x).real, x.real.dtype) if x.dtype.kind == "c" else x.copy()


def _imag(x):
    if x.dtype.kind == "c":
        return narrow(wide(x).imag, x.real.dtype)
    return np.zeros(x.shape, x.dtype)


def _conj(x):
    return narrow(np.conjugate(wide(x)), x.dtype) if x.dtype.kind == "c" else x.copy()


def _rounding(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def ref(x):
        return x.copy() if x.dtype.kind in "iu" else narrow(fn(wide(x)), x.dtype)

    return ref


def _half_even(w: np.ndarray) -> np.ndarray:
    """Round half to even written out: floor, then up past the half, or at it when odd."""
    with np.errstate(**QUIET):
        r = np.floor(w)
        frac = w - r  # exact for every finite float
        odd = np.mod(r, 2) == 1
        out = np.where((frac > 0.5) | ((frac == 0.5) & odd), r + 1, r)
        return np.where(np.isfinite(w), out, w)


def _logistic(w):
    if w.dtype.kind == "c":
        return 1 / (1 + np.exp(-w))
    return np.where(w >= 0, 1 / (1 + np.exp(-np.abs(w))), np.exp(-np.abs(w)) / (1 + np.exp(-np.abs(w))))


def _classify(kind: str) -> Callable[[np.ndarray], np.ndarray]:
    def ref(x):
        if x.dtype.kind in "biu":
            return np.full(x.shape, kind == "isfinite", dtype=bool)
        w = wide(x)
        parts = (w.real, w.imag) if x.dtype.kind == "c" else (w,)
        if kind == "isnan":
            return np.logical_or.reduce([np.isnan(p) for p in parts])
        if kind == "isinf":
            return np.logical_or.reduce([np.isinf(p) for p in parts])
        return np.logical_and.reduce([np.isfinite(p) for p in parts])

    return ref


def _not(x):
    if x.dtype.kind == "b":
        return ~np.asarray(x, dtype=bool)
    return narrow(elementwise(lambda v: ~v, x), x.dtype)


# ---- binary -----------------------------------------------------------------


def _arith(int_fn: Callable[[int, int], int], float_fn: Callable) -> Callable:
    def ref(x, y):
        if x.dtype.kind in "iu":
            return narrow(elementwise(int_fn, x, y), x.dtype)
        with np.errstate(**QUIET):
            return narrow(float_fn(wide(x), wide(y)), x.dtype)

    return ref


def _int_div(a: int, b: int) -> int:
    return 0 if b == 0 else trunc_div(a, b)


def _int_rem(a: int, b: int) -> int:
    return 0 if b == 0 else a - b * trunc_div(a, b)


def _pow(x, y):
    if x.dtype.kind in "iu":
        mod = 1 << bits_of(x.dtype)

        def ipow(a: int, b: int) -> int:
            if b < 0:
                return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0
            return pow(a, b, mod)

        return narrow(elementwise(ipow, x, y), x.dtype)
    with np.errstate(**QUIET):
        return narrow(full_power(wide(x), wide(y)), x.dtype)


def _extreme(pick_first: Callable) -> Callable:
    """maximum / minimum: NaN in either operand gives NaN."""

    def ref(x, y):
        if x.dtype.kind == "b":
            return np.where(pick_first(x.astype(int), y.astype(int)), x, y)
        if x.dtype.kind in "iu":
            return np.where(pick_first(wide(x), wide(y)).astype(bool), x, y)
        wx, wy = wide(x), wide(y)
        out = np.where(pick_first(wx, wy), wx, wy)
        return narrow(np.where(np.isnan(wx) | np.isnan(wy), np.nan, out), x.dtype)

    return ref


def _compare(op: Callable) -> Callable:
    def ref(x, y):
        if x.dtype.kind == "b":
            return np.asarray(op(x.astype(int), y.astype(int)), dtype=bool)
        return np.asarray(op(wide(x), wide(y)), dtype=bool)

    return ref


def _logical(op: Callable[[bool, bool], bool]) -> Callable:
    def ref(x, y):
        return np.asarray(elementwise(op, x, y), dtype=bool)

    return ref


def _bitwise(op: Callable[[int, int], int]) -> Callable:
    def ref(x, y):
        if x.dtype.kind == "b":
            return np.asarray(elementwise(lambda a, b: bool(op(int(a), int(b))), x, y), dtype=bool)
        return narrow(elementwise(op, x, y), x.dtype)

    return ref


def _shift(left: bool) -> Callable:
    def ref(x, y):
        bits = bits_of(x.dtype)

        def sh(a: int, c: int) -> int:
            if not 0 <= c < bits:
                return -1 if (not left and a < 0) else 0
            return a << c if left else a >> c

        return narrow(elementwise(sh, x, y), x.dtype)

    return ref


def _atan2(y, x):
    with np.errstate(**QUIET):
        return narrow(np.arctan2(wide(y), wide(x)), y.dtype)


def _select(pred, on_true, on_false):
    out = np.array(on_false, copy=True)
    out[np.asarray(pred, dtype=bool)] = np.asarray(on_true)[np.asarray(pred, dtype=bool)]
    return out


def _clamp(lo, x, hi):
    lower = _extreme(lambda a, b: a >= b)(x, lo)
    return _extreme(lambda a, b: a <= b)(lower, hi)


def _rsqrt(w):
    return 1 / np.sqrt(w)


ELEMENTWISE_REFERENCE: dict[str, Callable[..., np.ndarray]] = {
    "neg": _neg, "abs": _abs, "sign": _sign, "conj": _conj, "real": _real, "imag": _imag,
    "exp": _float_unary(np.exp), "expm1": _float_unary(np.expm1), "log": _float_unary(np.log),
    "log1p": _float_unary(_log1p), "sin": _float_unary(np.sin), "cos": _float_unary(np.cos),
    "tan": _float_unary(np.tan), "asin": _float_unary(np.arcsin), "acos": _float_unary(np.arccos),
    "atan": _float_unary(np.arctan), "sinh": _float_unary(np.sinh), "cosh": _float_unary(np.cosh),
    "tanh": _float_unary(np.tanh), "asinh": _float_unary(np.arcsinh),
    "acosh": _float_unary(np.arccosh), "atanh": _float_unary(np.arctanh),
    "sqrt": _float_unary(np.sqrt), "rsqrt": _float_unary(_rsqrt),
    "logistic": _float_unary(_logistic), "floor": _rounding(np.floor), "ceil": _rounding(np.ceil),
    "round": _rounding(_half_even), "trunc": _rounding(np.trunc),
    "isnan": _classify("isnan"), "isinf": _classify("isinf"), "isfinite": _classify("isfinite"),
    "logical_not": _not, "bitwise_not": _not,
    "add": _arith(lambda a, b: a + b, np.add), "sub": _arith(lambda a, b: a - b, np.subtract),
    "mul": _arith(lambda a, b: a * b, np.multiply), "div": _arith(_int_div, np.divide),
    "rem": _arith(_int_rem, np.fmod), "pow": _pow,
    "maximum": _extreme(lambda a, b: a >= b), "minimum": _extreme(lambda a, b: a <= b),
    "atan2": _atan2,
    "eq": _compare(lambda a, b: a == b), "ne": _compare(lambda a, b: a != b),
    "lt": _compare(lambda a, b: a < b), "le": _compare(lambda a, b: a <= b),
    "gt": _compare(lambda a, b: a > b), "ge": _compare(lambda a, b: a >= b),
    "logical_and": _logical(lambda a, b: a and b), "logical_or": _logical(lambda a, b: a or b),
    "logical_xor": _logical(lambda a, b: a != b),
    "bitwise_and": _bitwise(lambda a, b: a & b), "bitwise_or": _bitwise(lambda a, b: a | b),
    "bitwise_xor": _bitwise(lambda a, b: a ^ b),
    "shift_left": _shift(True), "shift_right": _shift(False),
    "select": _select, "clamp": _clamp,
}

REFERENCE: dict[str, Callable[..., np.ndarray]] = {
    **ELEMENTWISE_REFERENCE, **STRUCTURAL_REFERENCE, **REDUCTION_REFERENCE,
}

__all__ = ["REFERENCE"]
