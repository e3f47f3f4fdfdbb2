"""Statistical functions against NumPy: sum, prod, max, min, mean, var, std, cumulative scans,
in every dtype the device holds (bfloat16 on torch:cpu)."""

from __future__ import annotations

import functools
import warnings

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import BF16, as_f32, assert_equal, elements, host_arrays
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

BOOL = [np.bool_]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT = [np.float16, BF16, np.float32, np.float64]
COMPLEX = [np.complex64, np.complex128]
REAL = BOOL + SIGNED + UNSIGNED + FLOAT
NUMERIC = SIGNED + UNSIGNED + FLOAT + COMPLEX
ALL = BOOL + NUMERIC


@functools.cache
def _elements(dtype, *, bound=10.0, nan=False):
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt == BF16:
        return elements(dt, min_value=-bound, max_value=bound, allow_nan=False,
                        allow_subnormal=False) | (st.just(dt.type(np.nan)) if nan else st.nothing())
    if dt.kind == "c":
        return hnp.from_dtype(dt, max_magnitude=bound, allow_nan=False, allow_infinity=False,
                              allow_subnormal=False)
    return hnp.from_dtype(dt)


def arrays(dtype, *, min_dims=0, max_dims=3, min_side=0, max_side=4, bound=10.0, nan=False):
    """A NumPy array, sometimes a non-contiguous view (``base[::2].T``)."""
    return host_arrays(dtype, _elements(dtype, bound=bound, nan=nan), min_dims=min_dims,
                       max_dims=max_dims, min_side=min_side, max_side=max_side)


@st.composite
def axis_args(draw, ndim):
    """None, a (possibly negative) int, or a tuple of distinct axes."""
    if ndim == 0:
        return draw(st.sampled_from([None, ()]))
    return draw(st.none() | st.integers(-ndim, ndim - 1) | hnp.valid_tuple_axes(ndim))


def _tol(dtype):
    kind = np.dtype(dtype)
    if kind == BF16:
        return 8e-2
    return {2: 2e-2, 4: 2e-5, 8: 1e-12}[kind.itemsize if kind.kind != "c" else kind.itemsize // 2]


def _close(got, want, dtype, *, scale=1.0):
    got_np = as_f32(np.asarray(got))
    assert got_np.shape == np.shape(want)
    tol = _tol(dtype)
    np.testing.assert_allclose(got_np, want, rtol=tol, atol=tol * scale, equal_nan=True)


def _acc_dtype(dtype):
    k = np.dtype(dtype).kind
    return np.int64 if k in "bi" else np.uint64 if k == "u" else np.dtype(dtype)


# ---- sum / prod ------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_sum_prod_match_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype, bound=3.0))
    axis = data.draw(axis_args(a.ndim))
    keep = data.draw(st.booleans())
    x = xp.asarray(a)
    acc = _acc_dtype(dtype)
    wide = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    for fn, ref in ((xp.sum, np.sum), (xp.prod, np.prod)):
        got = fn(x, axis=axis, keepdims=keep)
        assert got.dtype.name == np.dtype(acc).name
        if np.dtype(acc).kind in "iu":
            with np.errstate(over="ignore"):
                want = ref(a, axis=axis, keepdims=keep, dtype=acc)
            np.testing.assert_array_equal(np.asarray(got), want)
            continue
        exact = ref(wide, axis=axis, keepdims=keep)
        tol = _tol(dtype)
        if fn is xp.sum:  # rounding error grows with the sum of magnitudes
            _close(got, exact, dtype, scale=float(np.abs(wide).sum()) + 1)
        else:  # ... and relatively with the number of factors
            got = as_f32(np.asarray(got))
            with np.errstate(over="ignore", invalid="ignore"):
                want = as_f32(exact.astype(acc))
                # where the nonzero factors' product overflows the dtype, a running product
                # gives inf, then nan after a zero (or complex inf arithmetic): which one
                # depends on the order of the factors (NumPy's: on the memory layout)
                rest = ref(np.where(wide == 0, 1, np.abs(wide)), axis=axis, keepdims=keep)
                overflows = np.isinf(as_f32(np.asarray(rest.astype(acc))))
            want = np.where(overflows & ~np.isfinite(got), got, want)
            np.testing.assert_allclose(got, want, rtol=tol * (1 + a.size / 8), atol=tol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_prod_that_overflows_before_a_zero_is_nan_as_in_numpy(xp, dtype):
    """3**13 overflows float16 before the zero in column 0 is reached: inf * 0 is nan, as in
    NumPy and torch (the exact product, 0, is not what a running product in the dtype gives)."""
    n = 13 if dtype == np.float16 else 81
    a = np.full((n + 3, 2), 3, dtype)
    a[n, 0] = 0
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.prod(a, axis=0)
        np.testing.assert_array_equal(want, [np.nan, np.inf])
        np.testing.assert_array_equal(np.asarray(xp.prod(xp.asarray(a), axis=0)), want)
        np.testing.assert_array_equal(np.asarray(xp.prod(xp.asarray(a.reshape(-1, 4, 2)), axis=(0, 1))), want)
        # NumPy's order follows the memory layout: a Fortran-ordered copy meets the zero first
        fortran = np.asfortranarray(a.reshape(-1, 4, 2))
        np.testing.assert_array_equal(np.prod(fortran, axis=(0, 1)), [0, np.inf])


@pytest.mark.parametrize(("dtype", "out"), [
    (np.int8, np.float32), (np.float32, np.float64), (np.uint8, np.int16), (np.bool_, np.int32),
    (np.int64, np.complex128), (np.float16, np.float32),
])
def test_sum_prod_dtype_argument(xp, dtype, out):
    a = (np.arange(12).reshape(3, 4) % 5 + 1).astype(dtype)
    for fn, ref in ((xp.sum, np.sum), (xp.prod, np.prod)):
        got = fn(xp.asarray(a), axis=1, dtype=getattr(xp, np.dtype(out).name))
        assert got.dtype.name == np.dtype(out).name
        np.testing.assert_allclose(np.asarray(got), ref(a.astype(out), axis=1), rtol=1e-6)


def test_sum_dtype_errors(xp):
    z = xp.asarray(np.array([1 + 2j, 3j]))
    with pytest.raises(DTypeError):
        xp.sum(z, dtype=xp.float64)
    with pytest.raises(DTypeError):
        xp.prod(xp.asarray([1, 2]), dtype=xp.bool)


def test_empty_reductions(xp):
    e = xp.asarray(np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(np.asarray(xp.sum(e, axis=0)), np.zeros(3))
    np.testing.assert_array_equal(np.asarray(xp.prod(e, axis=0)), np.ones(3))
    assert float(xp.sum(e)) == 0.0 and float(xp.prod(e)) == 1.0
    assert np.isnan(float(xp.mean(e)))
    assert np.asarray(xp.mean(e, axis=0)).shape == (3,) and np.isnan(np.asarray(xp.mean(e, axis=0))).all()
    assert np.isnan(float(xp.var(e))) and np.isnan(float(xp.std(e)))
    assert xp.sum(e, axis=1).shape == (0,)
    for fn in (xp.max, xp.min):
        with pytest.raises(ShapeError, match="zero-size axis 0"):
            fn(e, axis=0)
        with pytest.raises(ShapeError):
            fn(e)
        assert fn(e, axis=1).shape == (0,)


# ---- max / min ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_max_min_match_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype, min_side=1, nan=True))
    axis = data.draw(axis_args(a.ndim))
    keep = data.draw(st.booleans())
    x = xp.asarray(a)
    for fn, ref in ((xp.max, np.max), (xp.min, np.min)):
        got = fn(x, axis=axis, keepdims=keep)
        assert got.dtype.name == a.dtype.name
        assert_equal(np.asarray(got), ref(as_f32(a), axis=axis, keepdims=keep).astype(a.dtype))


def test_max_min_propagate_nan(xp):
    a = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]])
    x = xp.asarray(a)
    np.testing.assert_array_equal(np.asarray(xp.max(x, axis=1)), [np.nan, 6.0])
    np.testing.assert_array_equal(np.asarray(xp.min(x, axis=0)), [1.0, np.nan, 3.0])
    assert np.isnan(float(xp.max(x)))


def test_max_min_reject_complex(xp):
    with pytest.raises(DTypeError, match="no order"):
        xp.max(xp.asarray(np.array([1j])))


# ---- mean / var / std ----------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT + COMPLEX, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_mean_var_std_match_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype, min_side=1))
    axis = data.draw(axis_args(a.ndim))
    keep = data.draw(st.booleans())
    corr = data.draw(st.sampled_from([0, 1, 0.5, 2.0]))
    x = xp.asarray(a)
    wide = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    real = np.float64 if a.dtype.kind == "c" else a.dtype
    real = {np.dtype(np.complex64): np.float32}.get(a.dtype, real)
    got = xp.mean(x, axis=axis, keepdims=keep)
    assert got.dtype.name == a.dtype.name
    _close(got, np.mean(wide, axis=axis, keepdims=keep), dtype, scale=10)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        want_v = np.var(wide, axis=axis, ddof=corr, keepdims=keep)
        want_s = np.std(wide, axis=axis, ddof=corr, keepdims=keep)
    gv = xp.var(x, axis=axis, correction=corr, keepdims=keep)
    gs = xp.std(x, axis=axis, correction=corr, keepdims=keep)
    assert gv.dtype.name == gs.dtype.name == np.dtype(real).name
    _close(gv, want_v, dtype, scale=200)
    _close(gs, want_s, dtype, scale=20)


@pytest.mark.parametrize("fn", ["mean", "var", "std"])
@pytest.mark.parametrize("dtype", [np.bool_, np.int32, np.uint8])
def test_mean_var_std_reject_integers(xp, fn, dtype):
    with pytest.raises(DTypeError, match="floating or complex"):
        getattr(xp, fn)(xp.asarray(np.ones(3, dtype)))


def test_var_correction_errors(xp):
    x = xp.asarray(np.ones(3))
    with pytest.raises(ArgumentError):
        xp.var(x, correction=-1)
    with pytest.raises(ArgumentError):
        xp.std(x, correction="1")


# ---- cumulative_sum / cumulative_prod ----------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_cumulative_match_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype, min_dims=1, bound=2.0))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    if a.ndim == 1 and data.draw(st.booleans()):
        axis = None
    init = data.draw(st.booleans())
    x = xp.asarray(a)
    acc = _acc_dtype(dtype)
    ax = 0 if axis is None else axis
    for fn, ref in ((xp.cumulative_sum, np.cumulative_sum), (xp.cumulative_prod, np.cumulative_prod)):
        got = fn(x, axis=axis, include_initial=init)
        assert got.dtype.name == np.dtype(acc).name
        with np.errstate(over="ignore"):
            want = ref(a.astype(acc), axis=ax, include_initial=init)
        if np.dtype(acc).kind in "iu":
            np.testing.assert_array_equal(np.asarray(got), want)
        else:
            _close(got, want, dtype, scale=2.0 ** min(a.shape[ax], 10))


def test_cumulative_dtype_and_errors(xp):
    a = np.arange(1, 7, dtype=np.int8).reshape(2, 3)
    got = xp.cumulative_prod(xp.asarray(a), axis=1, dtype=xp.float32)
    assert got.dtype is xp.float32
    np.testing.assert_array_equal(np.asarray(got), np.cumprod(a, axis=1))
    got = xp.cumulative_sum(xp.asarray(a), axis=0, dtype=xp.int8, include_initial=True)
    np.testing.assert_array_equal(np.asarray(got), np.cumulative_sum(a, axis=0, include_initial=True))
    with pytest.raises(ArgumentError, match="axis is required"):
        xp.cumulative_sum(xp.asarray(a))
    with pytest.raises(ShapeError):
        xp.cumulative_prod(xp.asarray(3.0))
    with pytest.raises(AxisError):
        xp.cumulative_sum(xp.asarray(a), axis=2)


def test_cumulative_prod_integers_wrap_exactly(xp):
    a = np.arange(1, 41, dtype=np.int64)
    np.testing.assert_array_equal(np.asarray(xp.cumulative_prod(xp.asarray(a))), np.cumprod(a))
    b = np.arange(1, 30, dtype=np.uint8)
    np.testing.assert_array_equal(
        np.asarray(xp.cumulative_prod(xp.asarray(b), dtype=xp.uint8)), np.cumprod(b, dtype=np.uint8)
    )


# ---- bad input ------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["sum", "prod", "max", "min", "mean", "var", "std"])
def test_reduction_bad_input(xp, fn):
    f = getattr(xp, fn)
    with pytest.raises(ArgumentError):
        f(np.ones(3))
    x = xp.asarray(np.ones((2, 3)))
    with pytest.raises(AxisError):
        f(x, axis=2)
    with pytest.raises(AxisError):
        f(x, axis=(0, -2))
    with pytest.raises(ArgumentError):
        f(x, axis=1.5)


@pytest.mark.parametrize("fn", ["cumulative_sum", "cumulative_prod"])
def test_cumulative_bad_input(xp, fn):
    with pytest.raises(ArgumentError):
        getattr(xp, fn)([1, 2, 3])
    with pytest.raises(ArgumentError):
        getattr(xp, fn)(xp.asarray([1, 2]), include_initial=1)
