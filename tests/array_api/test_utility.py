"""all, any and diff against NumPy, in every dtype the device holds (bfloat16 on torch:cpu)."""

from __future__ import annotations

import functools

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import BF16, assert_equal, host_arrays
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

ALL = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
       np.float16, BF16, np.float32, np.float64, np.complex64, np.complex128]


@functools.cache
def _elements(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt == BF16:
        return st.sampled_from([0.0, -0.0, 1.0, -2.5, np.nan, np.inf]).map(dt.type)
    if dt.kind == "c":
        return st.sampled_from([0j, 1j, 2.0 + 0j, complex(np.nan, 0), -1 - 1j]).map(dt.type)
    return hnp.from_dtype(dt) | st.just(dt.type(0))


def arrays(dtype, *, min_dims=0, max_dims=3, max_side=4):
    """A NumPy array, sometimes a non-contiguous view (``base[::2].T``)."""
    return host_arrays(dtype, _elements(dtype), min_dims=min_dims, max_dims=max_dims,
                       max_side=max_side)


@st.composite
def axis_args(draw, ndim):
    if ndim == 0:
        return draw(st.sampled_from([None, ()]))
    return draw(st.none() | st.integers(-ndim, ndim - 1) | hnp.valid_tuple_axes(ndim))


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_all_any_match_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype))
    axis = data.draw(axis_args(a.ndim))
    keep = data.draw(st.booleans())
    x = xp.asarray(a)
    for fn, ref in ((xp.all, np.all), (xp.any, np.any)):
        got = fn(x, axis=axis, keepdims=keep)
        assert got.dtype is xp.bool
        np.testing.assert_array_equal(np.asarray(got), ref(a, axis=axis, keepdims=keep))


def test_all_any_empty_and_nan(xp):
    e = xp.asarray(np.zeros((0, 2)))
    assert bool(xp.all(e)) is True and bool(xp.any(e)) is False
    np.testing.assert_array_equal(np.asarray(xp.any(e, axis=0)), [False, False])
    assert bool(xp.all(xp.asarray(np.array([np.nan, 1.0]))))


def _np_diff(a, axis, n, prepend, append):
    """NumPy's diff, except that n=0 still concatenates prepend/append (NumPy ignores them)."""
    parts = [p for p in (prepend, a, append) if p is not None]
    with np.errstate(over="ignore", invalid="ignore"):
        return np.diff(np.concatenate(parts, axis=axis), n=n, axis=axis)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_diff_matches_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype, min_dims=1))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = data.draw(st.integers(0, 3))
    edge_shape = tuple(2 if i == axis % a.ndim else s for i, s in enumerate(a.shape))
    edges = st.none() | hnp.arrays(dtype, edge_shape, elements=_elements(dtype))
    prepend, append = data.draw(edges), data.draw(edges)
    x = xp.asarray(a)
    got = xp.diff(x, axis=axis, n=n,
                  prepend=None if prepend is None else xp.asarray(prepend),
                  append=None if append is None else xp.asarray(append))
    assert got.dtype.name == a.dtype.name
    assert_equal(np.asarray(got), _np_diff(a, axis, n, prepend, append))


@pytest.mark.parametrize(("dtype", "scalar"), [
    (np.int16, 3), (np.float32, 1.5), (np.uint8, 7), (np.bool_, True), (np.int8, 2.5),
    (np.float64, 1j),
])
def test_diff_scalar_edges_promote(xp, dtype, scalar):
    a = (np.arange(6).reshape(2, 3) % 4).astype(dtype)
    got = xp.diff(xp.asarray(a), axis=0, prepend=scalar, append=scalar)
    want_dtype = D.promote_scalar(D.from_numpy(a.dtype), scalar)
    assert got.dtype is want_dtype
    wide = a.astype(want_dtype.numpy)
    edge = np.full((1, 3), scalar, want_dtype.numpy)
    np.testing.assert_array_equal(np.asarray(got), np.diff(np.concatenate([edge, wide, edge]), axis=0))


def test_diff_tensor_edge_promotes(xp):
    a = np.arange(4, dtype=np.int8)
    got = xp.diff(xp.asarray(a), prepend=xp.asarray(np.array([0.5], np.float32)))
    assert got.dtype is xp.float32
    np.testing.assert_array_equal(np.asarray(got), [-0.5, 1, 1, 1])


def test_diff_bad_input(xp):
    x = xp.asarray(np.ones((2, 3)))
    with pytest.raises(ArgumentError):
        xp.diff(np.ones(3))
    with pytest.raises(AxisError):
        xp.diff(x, axis=2)
    with pytest.raises(ArgumentError):
        xp.diff(x, n=-1)
    with pytest.raises(ArgumentError):
        xp.diff(x, n=1.0)
    with pytest.raises(ShapeError):
        xp.diff(x, axis=0, prepend=xp.asarray(np.ones((1, 2))))
    with pytest.raises(ShapeError):
        xp.diff(x, prepend=xp.asarray(np.ones(3)))
    with pytest.raises(ArgumentError):
        xp.diff(x, prepend=[1.0, 2.0])
    with pytest.raises(DTypeError):
        xp.diff(xp.asarray(np.ones(3, np.uint64)), prepend=xp.asarray(np.ones(1, np.int8)))
    with pytest.raises(ShapeError):
        xp.diff(xp.asarray(np.float64(1.0)))


@pytest.mark.parametrize("fn", ["all", "any"])
def test_all_any_bad_input(xp, fn):
    with pytest.raises(ArgumentError):
        getattr(xp, fn)([True])
    with pytest.raises(AxisError):
        getattr(xp, fn)(xp.asarray(np.ones((2, 2))), axis=(0, 0))
    with pytest.raises(AxisError):
        getattr(xp, fn)(xp.asarray(np.ones((2, 2))), axis=-3)
