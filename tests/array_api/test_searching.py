"""argmax, argmin, count_nonzero, searchsorted and where against NumPy, in every dtype the
device holds (bfloat16 on torch:cpu)."""

from __future__ import annotations

import functools

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import BF16, as_f32, assert_equal, host_arrays, on_device
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

REAL = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
        np.uint64, np.float16, BF16, np.float32, np.float64]
ALL = REAL + [np.complex64, np.complex128]


@functools.cache
def _elements(dtype, nan=True):
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt == BF16:  # few values: ties, signed zeros, infinities, NaN
        pool = [-3.0, -0.0, 0.0, 1.0, 2.5, np.inf, -np.inf] + ([np.nan] if nan else [])
        return st.sampled_from(pool).map(dt.type)
    if dt.kind == "c":
        return st.sampled_from([0j, 1j, 2.0 + 0j, complex(np.nan, 0), -1 - 1j]).map(dt.type)
    if dt.kind in "iu":
        return st.integers(0, 3).map(dt.type) | hnp.from_dtype(dt)
    return hnp.from_dtype(dt)


def arrays(dtype, *, shape=None, min_dims=0, min_side=0, nan=True):
    """A NumPy array, sometimes a non-contiguous view (``base[::2].T``)."""
    return host_arrays(dtype, _elements(dtype, nan), shape=shape, min_dims=min_dims,
                       min_side=min_side)


# ---- argmax / argmin -------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_argmax_argmin_match_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype, min_side=1))
    axis = data.draw(st.none() | st.integers(-a.ndim, a.ndim - 1)) if a.ndim else None
    keep = data.draw(st.booleans())
    x = xp.asarray(a)
    for fn, ref in ((xp.argmax, np.argmax), (xp.argmin, np.argmin)):
        got = fn(x, axis=axis, keepdims=keep)
        assert got.dtype is xp.int64
        want = ref(a, axis=axis, keepdims=keep)
        assert got.shape == np.shape(want)
        np.testing.assert_array_equal(np.asarray(got), want)


def test_argmax_argmin_errors(xp):
    e = xp.asarray(np.zeros((2, 0)))
    with pytest.raises(ShapeError, match="empty"):
        xp.argmax(e)
    with pytest.raises(ShapeError):
        xp.argmin(e, axis=1)
    assert xp.argmax(e, axis=0).shape == (0,)
    with pytest.raises(DTypeError):
        xp.argmax(xp.asarray(np.array([1j])))
    with pytest.raises(AxisError):
        xp.argmin(xp.asarray(np.ones((2, 2))), axis=-3)
    with pytest.raises(ArgumentError):
        xp.argmax(xp.asarray(np.ones((2, 2))), axis=(0, 1))
    with pytest.raises(ArgumentError):
        xp.argmax([1, 2])


# ---- count_nonzero ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_count_nonzero_matches_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype))
    axis = data.draw(st.none() | st.integers(-a.ndim, a.ndim - 1) | hnp.valid_tuple_axes(a.ndim)
                     if a.ndim else st.sampled_from([None, ()]))
    keep = data.draw(st.booleans())
    got = xp.count_nonzero(xp.asarray(a), axis=axis, keepdims=keep)
    assert got.dtype is xp.int64
    want = np.count_nonzero(a, axis=axis, keepdims=keep)
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_count_nonzero_errors(xp):
    with pytest.raises(ArgumentError):
        xp.count_nonzero(np.ones(2))
    with pytest.raises(AxisError):
        xp.count_nonzero(xp.asarray(np.ones(2)), axis=1)


# ---- searchsorted -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", REAL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_searchsorted_matches_numpy(xp, dtype, data):
    raw = data.draw(arrays(dtype, shape=(data.draw(st.integers(0, 8)),)))
    v = data.draw(arrays(dtype))
    side = data.draw(st.sampled_from(["left", "right"]))
    use_sorter = data.draw(st.booleans())
    if use_sorter:
        sorter = np.argsort(as_f32(raw), kind="stable")
        got = xp.searchsorted(xp.asarray(raw), xp.asarray(v), side=side, sorter=xp.asarray(sorter))
        want = np.searchsorted(as_f32(raw), as_f32(v), side=side, sorter=sorter)
    else:
        s = np.sort(as_f32(raw)).astype(raw.dtype)
        got = xp.searchsorted(xp.asarray(s), xp.asarray(v), side=side)
        want = np.searchsorted(as_f32(s), as_f32(v), side=side)
    assert got.dtype is xp.int64
    assert got.shape == v.shape
    np.testing.assert_array_equal(np.asarray(got), want)


def test_searchsorted_promotes_and_scalars(xp):
    s = xp.asarray(np.array([1, 3, 3, 7], np.int16))
    got = xp.searchsorted(s, xp.asarray(np.array([3.5, -1.0, 3.0])))
    np.testing.assert_array_equal(np.asarray(got), [3, 0, 1])
    np.testing.assert_array_equal(np.asarray(xp.searchsorted(s, 3, side="right")), 3)
    assert xp.searchsorted(s, 3).shape == ()


def test_searchsorted_errors(xp):
    s = xp.asarray(np.arange(4.0))
    with pytest.raises(ShapeError):
        xp.searchsorted(xp.asarray(np.ones((2, 2))), s)
    with pytest.raises(ArgumentError):
        xp.searchsorted(s, s, side="middle")
    with pytest.raises(ArgumentError):
        xp.searchsorted(np.arange(3.0), s)
    with pytest.raises(ShapeError):
        xp.searchsorted(s, s, sorter=xp.asarray(np.arange(3)))
    with pytest.raises(DTypeError):
        xp.searchsorted(s, s, sorter=xp.asarray(np.arange(4.0)))
    with pytest.raises(DTypeError):
        xp.searchsorted(xp.asarray(np.array([1j, 2j])), xp.asarray(np.array([1j])))


# ---- where ---------------------------------------------------------------------------


SCALARS = st.booleans() | st.integers(0, 100) | st.floats(-5, 5) | st.complex_numbers(max_magnitude=5)


def _want_dtype(d1, x2):
    if isinstance(x2, np.ndarray):
        return D.promote_types(d1, D.from_numpy(x2.dtype))
    return D.promote_scalar(d1, x2)


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_where_broadcasts_and_promotes(xp, dtype, data):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
    cshape, s1, s2 = shapes.input_shapes
    cond = data.draw(arrays(np.bool_, shape=cshape))
    a1 = data.draw(arrays(dtype, shape=s1))
    other = data.draw(st.sampled_from(on_device(ALL)))
    x2 = data.draw(arrays(other, shape=s2) | SCALARS)
    swap = data.draw(st.booleans())
    d1 = D.from_numpy(a1.dtype)
    t2 = xp.asarray(x2) if isinstance(x2, np.ndarray) else x2
    args = (t2, xp.asarray(a1)) if swap else (xp.asarray(a1), t2)
    try:
        want_dtype = _want_dtype(d1, x2)
    except DTypeError:
        with pytest.raises(DTypeError):
            xp.where(xp.asarray(cond), *args)
        return
    got = xp.where(xp.asarray(cond), *args)
    assert got.dtype is want_dtype
    npd = want_dtype.numpy
    b1 = a1.astype(npd)
    b2 = x2.astype(npd) if isinstance(x2, np.ndarray) else np.asarray(x2).astype(npd)
    want = np.where(cond, b2, b1) if swap else np.where(cond, b1, b2)
    assert got.shape == want.shape
    assert_equal(np.asarray(got), want)


def test_where_condition_truthiness_and_errors(xp):
    x = xp.asarray(np.array([1.0, 2.0, 3.0]))
    got = xp.where(xp.asarray(np.array([0.0, np.nan, 2.0])), x, -1.0)
    np.testing.assert_array_equal(np.asarray(got), [-1.0, 2.0, 3.0])
    with pytest.raises(ArgumentError):
        xp.where(np.array([True]), x, x)
    with pytest.raises(ArgumentError):
        xp.where(xp.asarray(np.array([True])), 1, 2)
    with pytest.raises(ShapeError):
        xp.where(xp.asarray(np.ones(2, bool)), x, x)
    with pytest.raises(DTypeError):
        xp.where(xp.asarray(np.ones(3, bool)), xp.asarray(np.ones(3, np.uint64)),
                 xp.asarray(np.ones(3, np.int8)))


# ---- nonzero (implemented with indexing, re-exported here) ---------------------------------


def test_nonzero_is_reexported(xp):
    from tenferro_runtime.array_api import _indexing, _searching

    assert xp.nonzero is _searching.nonzero is _indexing.nonzero
    assert "nonzero" in _searching.__all__
    a = np.array([[0.0, np.nan, 2.0], [0.0, 0.0, -1.0]])[:, ::2]
    got = xp.nonzero(xp.asarray(a))
    want = np.nonzero(a)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)
