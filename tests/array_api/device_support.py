"""What the namespace tests need to know about the device they run on (see conftest.py).

`DEVICES` are the CPU devices every test runs on. `on_device` filters a dtype list to the
current default device's dtypes (bfloat16 only on torch:cpu). `BF16` is the NumPy dtype of
bfloat16 (ml_dtypes): hypothesis has no strategy for it, so `elements` draws float32 values
rounded to it. `assert_ulps` compares results where two backends' transcendental kernels
may differ in the last bits (`ULPS`: how many units, per function, off numpy:cpu).
"""

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tenferro_runtime as tr
from tenferro_core import dtypes as D

DEVICES = ("numpy:cpu", "torch:cpu")
BF16 = np.dtype(ml_dtypes.bfloat16)

# Units in the last place a device other than numpy:cpu may be off NumPy, per function (its
# kernels are not NumPy's: torch's CPU transcendentals are SLEEF's or its own). Functions
# not listed (add, sub, mul, div, sqrt, rounding, comparisons, integer ops) must be exact.
ULPS = {
    "acos": 2, "acosh": 2, "asin": 2, "asinh": 2, "atan": 2, "atanh": 2, "atan2": 2,
    "cos": 2, "cosh": 2, "exp": 2, "expm1": 2, "log": 2, "log1p": 2, "log2": 4, "log10": 4,
    "sin": 2, "sinh": 2, "tan": 2, "tanh": 2, "pow": 4, "hypot": 2, "logaddexp": 4, "logaddexp2": 4,
    "reciprocal": 1, "divide": 2, "abs": 2, "sign": 2, "square": 2, "multiply": 2,
    # torch's CPU sqrt is SLEEF's 0.5001-ulp one, not correctly rounded: about 20% of float32
    # and 1% of float64 roots are 1 ulp off
    "sqrt": 1,
}
COMPLEX_ULPS = {"pow": 256}
"""Complex pow is exp(y * log(x)) on torch, whose error grows with |y * log(x)|; NumPy
multiplies out integer exponents."""
COMPLEX_FLOOR = {"log1p": 1.0, "expm1": 1.0}
"""Complex log1p and expm1 near 0 lose digits in both NumPy and torch (differently): their
bound is relative to max(|result|, 1)."""
COMPLEX_ONLY = frozenset({"divide", "abs", "sign", "square", "reciprocal", "multiply"})
"""Exact (correctly rounded) for real operands; for complex ones the bound is relative to the
magnitude (`assert_ulps`): NumPy's own complex multiply differs between its SIMD (FMA) and
scalar loops."""
NUMPY_COMPLEX = COMPLEX_ONLY | {"log1p"}
"""Complex functions with a budget on numpy:cpu too: arithmetic (above), and log1p, which
tenferro computes accurately near 0 where NumPy's log(1 + z) is not (bound relative to
max(|result|, 1): COMPLEX_FLOOR)."""


def dtype_named(v: Any) -> D.DType | None:
    """The dtype a test parameter names (a dtype name, NumPy dtype or type, DType), else None."""
    if isinstance(v, D.DType):
        return v
    if isinstance(v, (str, np.dtype)) or (isinstance(v, type) and issubclass(v, np.generic)):
        try:
            return D.as_dtype(v)
        except (TypeError, ValueError):
            return None
    return None


def current() -> str:
    """The default device's name (the one `xp` runs the test on)."""
    return tr.default_runtime().default_device().name


def on_numpy() -> bool:
    return current() == "numpy:cpu"


def has(dtype: Any) -> bool:
    """Whether the current device holds `dtype`."""
    return tr.default_runtime().default_device().supports(D.as_dtype(dtype))


def on_device(dtypes: list) -> list:
    """The entries of `dtypes` the current device holds (names, NumPy dtypes or types)."""
    return [d for d in dtypes if has(d)]


def ulps_for(name: str, operands: Any, result: Any) -> int:
    """The ULP budget of function `name` on operands of dtype `operands` (with results of
    dtype `result`) on the current device: 0 for exact results, and on numpy:cpu except for
    NUMPY_COMPLEX (NumPy's own SIMD and scalar complex loops differ by an ulp; complex log1p is
    tenferro's own there)."""
    if D.as_dtype(result).kind not in "fc":
        return 0
    if on_numpy():
        return ULPS[name] if name in NUMPY_COMPLEX and D.as_dtype(operands).kind == "c" else 0
    if D.as_dtype(operands).kind == "c":
        return COMPLEX_ULPS.get(name, ULPS.get(name, 0))
    return 0 if name in COMPLEX_ONLY else ULPS.get(name, 0)


@functools.cache  # one strategy object per arguments: a new one works out its properties
def elements(dtype: Any, **kw: Any) -> st.SearchStrategy:
    """`hnp.from_dtype(dtype, **kw)`; for bfloat16, float32 values rounded to bfloat16."""
    dt = np.dtype(dtype)
    if dt == BF16:
        return st.floats(width=32, **kw).map(BF16.type)
    return hnp.from_dtype(dt, **kw)


@functools.cache
def arrays(dtype: Any, shape: Any, *, elems: st.SearchStrategy | None = None) -> st.SearchStrategy:
    """`hnp.arrays`, bfloat16 included."""
    dt = np.dtype(dtype)
    if elems is None and dt == BF16:
        elems = elements(dt)
    return hnp.arrays(dt, shape, elements=elems)


@functools.cache
def _array_shapes(min_dims: int, max_dims: int, min_side: int, max_side: int) -> Any:
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


@functools.cache
def host_arrays(dtype: Any, elems: st.SearchStrategy, *, shape: tuple[int, ...] | None = None,
                min_dims: int = 0, max_dims: int = 3, min_side: int = 0,
                max_side: int = 4) -> st.SearchStrategy:
    """NumPy arrays of `dtype` from `elems` (of `shape`, else of a drawn shape), half of them
    a non-contiguous view (``base[::2].T``)."""

    @st.composite
    def draw_array(draw: Any) -> np.ndarray:
        s = draw(_array_shapes(min_dims, max_dims, min_side, max_side)) if shape is None else shape
        if s and draw(st.booleans()):
            rev = s[::-1]
            return draw(arrays(dtype, (2 * rev[0],) + rev[1:], elems=elems))[::2].T
        return draw(arrays(dtype, s, elems=elems))

    return draw_array()


def finfo(dtype: Any) -> Any:
    """`np.finfo`, bfloat16 included."""
    return ml_dtypes.finfo(np.dtype(dtype))


def assert_equal(got: Any, want: Any) -> None:
    """`np.testing.assert_array_equal` (NaN equals NaN), bfloat16 included."""
    got, want = np.asarray(got), np.asarray(want)
    if BF16 in (got.dtype, want.dtype):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        got, want = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(got, want)


def as_f32(a: np.ndarray) -> np.ndarray:
    """`a` in float32 if it is bfloat16 (exactly: NumPy's sort, unique and clip mishandle
    ml_dtypes' NaN), else `a` itself."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype == BF16 else a


def _ordered(a: np.ndarray) -> list[int]:
    """Float bit patterns as integers ordered as the floats (+0 and -0 both 0)."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    raw = np.ascontiguousarray(a).view(bits).ravel().tolist()
    mag = (1 << (8 * a.dtype.itemsize - 1)) - 1
    return [r if r >= 0 else -(r & mag) for r in raw]


def assert_ulps(got: np.ndarray, want: np.ndarray, ulps: int, what: str = "", *,
                floor: float = 0.0) -> None:
    """Real floats: NaN where `want` is NaN, elsewhere within `ulps` units in the last place
    (infinities equal). Complex: each part NaN where want's is, infinite parts equal, finite
    parts within ``ulps * eps * max(|want|, floor)``. Signs of zeros are not compared."""
    got, want = np.asarray(got), np.asarray(want).astype(got.dtype)
    assert got.shape == want.shape, (got.shape, want.shape, what)
    if got.dtype.kind == "c":
        eps, big = float(np.finfo(got.dtype).eps), float(np.finfo(got.dtype).max)
        with np.errstate(over="ignore"):
            mag = np.maximum(np.abs(want.astype(np.complex128)), floor)
        # |want| overflows while no part of it is NaN: the parts' products overflowed, and
        # the loops' evaluation orders (FMA or not) give inf, NaN (inf - inf) or finite
        # residues there; got must overflow too
        over = np.isinf(mag) & ~np.isnan(want.real) & ~np.isnan(want.imag)
        with np.errstate(over="ignore", invalid="ignore"):
            assert np.all(~np.isfinite(np.abs(got[over].astype(np.complex128)))), (what, got[over])
        got, want, mag = got[~over], want[~over], mag[~over]
        for g, w in ((got.real, want.real), (got.imag, want.imag)):
            g, w = g.astype(np.float64), w.astype(np.float64)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=what)
            # a part at the overflow threshold: inf and the largest finite value both round
            # an intermediate within the budget
            edge = np.isfinite(w) & np.isinf(g) & (np.abs(w) >= big * (1 - ulps * eps)) & (
                np.sign(g) == np.sign(w))
            inf = (np.isinf(w) | np.isinf(g)) & ~edge
            np.testing.assert_array_equal(g[inf], w[inf], err_msg=what)
            fin = np.isfinite(w) & np.isfinite(g)
            bound = ulps * eps * np.where(np.isfinite(mag), mag, big)[fin]
            err = np.abs(g[fin] - w[fin])
            assert np.all(err <= bound), (what, g[fin][err > bound], w[fin][err > bound])
        return
    nan = np.isnan(got.astype(np.float64))
    np.testing.assert_array_equal(nan, np.isnan(want.astype(np.float64)), err_msg=what)
    far = [i for i, (g, w, n) in enumerate(zip(_ordered(got), _ordered(want), nan.ravel()))
           if not n and abs(g - w) > ulps]
    assert not far, (what, f"more than {ulps} ulps apart", got.ravel()[far], want.ravel()[far])
