"""sort and argsort against NumPy and a stable pure-Python reference, in every real dtype
the device holds (bfloat16 on torch:cpu)."""

from __future__ import annotations

import functools

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import BF16, as_f32, assert_equal, host_arrays
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, AxisError, DTypeError

REAL = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
        np.uint64, np.float16, BF16, np.float32, np.float64]


@functools.cache
def _elements(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt == BF16:
        # few distinct values, so ties (and the order among them) matter
        return st.sampled_from([-2.0, -0.0, 0.0, 1.5, 3.0, np.inf, -np.inf, np.nan]).map(dt.type)
    if dt.kind in "iu":
        return hnp.from_dtype(dt) | st.integers(0, 3).map(dt.type)
    return hnp.from_dtype(dt)


def arrays(dtype, *, min_dims=1, max_dims=3, max_side=5):
    """A NumPy array, sometimes a non-contiguous view (``base[::2].T``)."""
    return host_arrays(dtype, _elements(dtype), min_dims=min_dims, max_dims=max_dims,
                       max_side=max_side)


def _stable_argsort_1d(v, descending):
    """Python's sorted is stable also with reverse=True; NaN is the largest value."""
    def key(i):
        x = v[i]
        return (1, 0) if x != x else (0, x)

    return np.array(sorted(range(len(v)), key=key, reverse=descending), dtype=np.int64)


def _reference(a, axis, descending):
    if a.size == 0:
        return np.zeros(a.shape, np.int64)
    return np.apply_along_axis(_stable_argsort_1d, axis, a, descending)


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_sort_argsort_match_reference(xp, dtype, data):
    a = data.draw(arrays(dtype))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    desc = data.draw(st.booleans())
    stable = data.draw(st.booleans())
    x = xp.asarray(a)
    idx = xp.argsort(x, axis=axis, descending=desc, stable=stable)
    assert idx.dtype is xp.int64 and idx.shape == a.shape
    want_idx = _reference(a, axis, desc)
    np.testing.assert_array_equal(np.asarray(idx), want_idx)
    got = xp.sort(x, axis=axis, descending=desc, stable=stable)
    assert got.dtype.name == a.dtype.name
    want = np.sort(as_f32(a), axis=axis, kind="stable").astype(a.dtype)
    if desc:
        want = np.flip(want, axis)
    assert_equal(np.asarray(got), want)
    assert_equal(np.asarray(got), np.take_along_axis(a, want_idx, axis))


def test_sort_nan_last_and_default_axis(xp):
    a = np.array([[3.0, np.nan, -1.0, np.nan], [0.0, 2.0, 1.0, -5.0]])
    got = np.asarray(xp.sort(xp.asarray(a)))
    np.testing.assert_array_equal(got, [[-1.0, 3.0, np.nan, np.nan], [-5.0, 0.0, 1.0, 2.0]])
    np.testing.assert_array_equal(np.asarray(xp.argsort(xp.asarray(a))), [[2, 0, 1, 3], [3, 0, 2, 1]])
    np.testing.assert_array_equal(np.asarray(xp.argsort(xp.asarray(a), descending=True)),
                                  [[1, 3, 0, 2], [1, 2, 0, 3]])


def test_argsort_descending_is_stable(xp):
    a = np.array([1, 2, 1, 2, 1], np.int32)
    np.testing.assert_array_equal(np.asarray(xp.argsort(xp.asarray(a), descending=True)), [1, 3, 0, 2, 4])


@pytest.mark.parametrize("fn", ["sort", "argsort"])
def test_sort_bad_input(xp, fn):
    f = getattr(xp, fn)
    with pytest.raises(ArgumentError):
        f(np.ones(3))
    with pytest.raises(AxisError):
        f(xp.asarray(np.ones((2, 3))), axis=2)
    with pytest.raises(AxisError):
        f(xp.asarray(np.ones((2, 3))), axis=-3)
    with pytest.raises(AxisError):
        f(xp.asarray(np.float64(1.0)))
    with pytest.raises(DTypeError, match="no order"):
        f(xp.asarray(np.array([1j, 2])))
    with pytest.raises(ArgumentError):
        f(xp.asarray([1, 2]), descending=1)
    with pytest.raises(ArgumentError):
        f(xp.asarray([1, 2]), axis=(0,))
