"""unique_all / unique_counts / unique_inverse / unique_values against NumPy, in every dtype
the device holds (bfloat16 on torch:cpu, against NumPy's float32 results)."""

from __future__ import annotations

import functools

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import BF16, as_f32, assert_equal, host_arrays
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError

ALL = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
       np.float16, BF16, np.float32, np.float64, np.complex64, np.complex128]


@functools.cache
def _elements(dtype):
    dt = np.dtype(dtype)
    if dt.kind == "f" or dt == BF16:  # few values: many duplicates, signed zeros, several NaNs
        return st.sampled_from([-1.5, -0.0, 0.0, 2.0, 7.0, np.inf, np.nan]).map(dt.type)
    if dt.kind == "c":
        return st.sampled_from([0j, 1j, -1j, 1 + 1j, 1 - 1j, 2.0 + 0j]).map(dt.type)
    if dt.kind in "iu":
        return st.integers(0, 4).map(dt.type) | hnp.from_dtype(dt)
    return hnp.from_dtype(dt)


def arrays(dtype):
    """A NumPy array, sometimes a non-contiguous view (``base[::2].T``)."""
    return host_arrays(dtype, _elements(dtype))


def _eq(got, want):
    got = np.asarray(got)
    assert got.shape == want.shape
    assert_equal(got, np.asarray(want).astype(got.dtype))


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: np.dtype(d).name)
@given(data=st.data())
def test_unique_matches_numpy(xp, dtype, data):
    a = data.draw(arrays(dtype))
    vals, idx, inv, cnt = np.unique(as_f32(a), return_index=True, return_inverse=True,
                                    return_counts=True, equal_nan=False)
    inv = inv.reshape(a.shape)
    x = xp.asarray(a)
    res = xp.unique_all(x)
    assert res._fields == ("values", "indices", "inverse_indices", "counts")
    assert res.values.dtype.name == a.dtype.name
    assert res.indices.dtype is res.inverse_indices.dtype is res.counts.dtype is xp.int64
    _eq(res.values, vals)
    _eq(res.indices, idx)
    _eq(res.inverse_indices, inv)
    _eq(res.counts, cnt)
    # the indices really reconstruct x
    _eq(np.asarray(res.values)[np.asarray(res.inverse_indices)], a)
    c = xp.unique_counts(x)
    assert c._fields == ("values", "counts")
    _eq(c.values, vals)
    _eq(c.counts, cnt)
    i = xp.unique_inverse(x)
    assert i._fields == ("values", "inverse_indices")
    _eq(i.values, vals)
    _eq(i.inverse_indices, inv)
    _eq(xp.unique_values(x), vals)


def test_unique_nans_are_distinct(xp):
    a = np.array([np.nan, 1.0, np.nan, 1.0, np.nan], np.float32)
    res = xp.unique_all(xp.asarray(a))
    _eq(res.values, np.array([1.0, np.nan, np.nan, np.nan], np.float32))
    _eq(res.counts, np.array([2, 1, 1, 1]))
    _eq(res.indices, np.array([1, 0, 2, 4]))
    _eq(res.inverse_indices, np.array([1, 0, 2, 0, 3]))
    z = np.array([complex(np.nan, 0), 1j, complex(np.nan, 0)])
    assert xp.unique_values(xp.asarray(z)).shape == (3,)


def test_unique_complex_lexicographic(xp):
    a = np.array([[2 + 0j, 1 + 5j], [1 - 5j, 2 + 0j]])
    res = xp.unique_counts(xp.asarray(a))
    _eq(res.values, np.array([1 - 5j, 1 + 5j, 2 + 0j]))
    _eq(res.counts, np.array([1, 1, 2]))


def test_unique_empty_and_scalar(xp):
    res = xp.unique_all(xp.asarray(np.zeros((2, 0), np.int16)))
    assert res.values.shape == res.indices.shape == res.counts.shape == (0,)
    assert res.values.dtype is xp.int16
    assert res.inverse_indices.shape == (2, 0)
    res = xp.unique_inverse(xp.asarray(np.float64(3.0)))
    _eq(res.values, np.array([3.0]))
    assert res.inverse_indices.shape == ()


@pytest.mark.parametrize("fn", ["unique_all", "unique_counts", "unique_inverse", "unique_values"])
def test_unique_bad_input(xp, fn):
    with pytest.raises(ArgumentError):
        getattr(xp, fn)([1, 2, 2])
    with pytest.raises(TypeError):
        getattr(xp, fn)(xp.asarray([1, 2]), axis=0)
