"""Creation functions against NumPy: arange, eye, linspace, meshgrid, tril, triu, full & co.,
in every dtype the device holds (bfloat16 on torch:cpu)."""

from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import arrays, has, on_device
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import lax

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
NUMERIC = INTS + FLOATS + COMPLEX
ALL = ["bool"] + NUMERIC


def _check(t, want: np.ndarray, dtype: str, exact: bool = True, rtol: float = 1e-12) -> None:
    assert t.dtype.name == dtype
    got = t.numpy()
    assert got.shape == want.shape
    if dtype == "bfloat16":  # NumPy's testing sees no NaN in ml_dtypes' bfloat16: compare widened
        got, want, dtype = got.astype(np.float32), want.astype(dtype).astype(np.float32), "float32"
    if exact:
        np.testing.assert_array_equal(got, want.astype(dtype))
    else:
        np.testing.assert_allclose(got, want.astype(dtype), rtol=rtol, atol=rtol)


# ---------------------------------------------------------------- arange


@given(start=st.integers(-50, 50), stop=st.integers(-50, 50) | st.none(),
       step=st.integers(1, 7) | st.integers(-7, -1))
def test_arange_ints(xp, start, stop, step):
    want = np.arange(start, stop, step) if stop is not None else np.arange(start)
    got = xp.arange(start, stop, step) if stop is not None else xp.arange(start)
    _check(got, want, "int64")


@given(start=st.floats(-100, 100), stop=st.floats(-100, 100),
       step=st.floats(1e-2, 10) | st.floats(-10, -1e-2))
def test_arange_floats(xp, start, stop, step):
    want = np.arange(start, stop, step)
    got = xp.arange(start, stop, step)
    assert got.shape == want.shape
    _check(got, want, "float64", exact=False, rtol=1e-9)
    if want.size:
        assert got.numpy()[0] == start


@pytest.mark.parametrize("dtype", NUMERIC)
def test_arange_dtypes(xp, dtype):
    info = np.iinfo(dtype) if dtype in INTS else None
    lo = int(info.min) if info is not None else -3
    got = xp.arange(lo, lo + 6, 2, dtype=getattr(xp, dtype))
    _check(got, np.arange(lo, lo + 6, 2).astype(dtype), dtype)
    if info is not None:  # counting down to the minimum, and through the whole range of 8 bits
        top = int(info.max)
        _check(xp.arange(top, top - 9, -3, dtype=getattr(xp, dtype)),
               np.array([top, top - 3, top - 6]), dtype)
    _check(xp.arange(5.0, dtype=getattr(xp, dtype)), np.arange(5), dtype)


def test_arange_full_8bit_ranges(xp):
    _check(xp.arange(-128, 128, dtype=xp.int8), np.arange(-128, 128), "int8")
    _check(xp.arange(255, -1, -1, dtype=xp.uint8), np.arange(255, -1, -1), "uint8")
    big = 2**64 - 10
    _check(xp.arange(big, big + 5, 2, dtype=xp.uint64),
           np.array([big, big + 2, big + 4], dtype=np.uint64), "uint64")


def test_arange_inference_and_empty(xp):
    assert xp.arange(3).dtype == xp.int64
    assert xp.arange(3.0).dtype == xp.float64
    assert xp.arange(0, 3, 0.5).dtype == xp.float64
    assert xp.arange(5, 1).shape == (0,)
    assert xp.arange(0, 1, 0.1).shape == (10,)
    assert xp.arange(1, 2, 1 / 3).shape == (math.ceil(1 / (1 / 3)),)


def test_arange_errors(xp):
    with pytest.raises(ShapeError, match="nonzero"):
        xp.arange(0, 5, 0)
    with pytest.raises(ShapeError, match="finite"):
        xp.arange(0, math.inf)
    with pytest.raises(ArgumentError):
        xp.arange(1j)
    with pytest.raises(ArgumentError):
        xp.arange("3")
    with pytest.raises(DTypeError):
        xp.arange(3, dtype=xp.bool)
    with pytest.raises(DTypeError, match="fit"):
        xp.arange(300, dtype=xp.uint8)
    with pytest.raises(DTypeError, match="fit"):
        xp.arange(-1, 3, dtype=xp.uint16)
    with pytest.raises(DTypeError, match="whole"):
        xp.arange(0.5, 3, dtype=xp.int32)
    if not has("bfloat16"):  # numpy:cpu holds no bfloat16
        with pytest.raises(DTypeError):
            xp.arange(3, dtype=xp.bfloat16)


# ---------------------------------------------------------------- eye


@given(n=st.integers(0, 5), m=st.integers(0, 5) | st.none(), k=st.integers(-7, 7), data=st.data())
def test_eye(xp, n, m, k, data):
    dtype = data.draw(st.sampled_from(on_device(ALL)), label="dtype")
    got = xp.eye(n, m, k=k, dtype=getattr(xp, dtype))
    _check(got, np.eye(n, m, k=k, dtype=dtype), dtype)


def test_eye_defaults_and_errors(xp):
    assert xp.eye(3).dtype == xp.float64
    _check(xp.eye(2, 3, k=2**70), np.zeros((2, 3)), "float64")
    with pytest.raises(ShapeError):
        xp.eye(-1)
    with pytest.raises(ArgumentError):
        xp.eye(2.5)
    with pytest.raises(ArgumentError):
        xp.eye(2, k=0.5)
    if has("bfloat16"):
        _check(xp.eye(2, dtype=xp.bfloat16), np.eye(2), "bfloat16")
    else:  # numpy:cpu holds no bfloat16
        with pytest.raises(DTypeError):
            xp.eye(2, dtype=xp.bfloat16)


# ---------------------------------------------------------------- linspace


@given(start=st.floats(-1e3, 1e3) | st.integers(-100, 100), stop=st.floats(-1e3, 1e3),
       num=st.integers(0, 9), endpoint=st.booleans(),
       dtype=st.sampled_from([None, "float32", "float64", "complex128"]))
def test_linspace(xp, start, stop, num, endpoint, dtype):
    want = np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype)
    got = xp.linspace(start, stop, num, endpoint=endpoint,
                      dtype=None if dtype is None else getattr(xp, dtype))
    _check(got, want, want.dtype.name, exact=False, rtol=1e-5 if dtype == "float32" else 1e-12)
    if num:
        assert got.numpy()[0] == want[0]
    if num > 1 and endpoint:
        assert got.numpy()[-1] == want[-1]


@given(re=st.floats(-10, 10), im=st.floats(-10, 10), num=st.integers(0, 6), endpoint=st.booleans())
def test_linspace_complex(xp, re, im, num, endpoint):
    start, stop = complex(re, -im), complex(-re, im)
    want = np.linspace(start, stop, num, endpoint=endpoint)
    got = xp.linspace(start, stop, num, endpoint=endpoint)
    _check(got, want, "complex128", exact=False, rtol=1e-12)


def test_linspace_errors(xp):
    assert xp.linspace(0, 1, 1).numpy().tolist() == [0.0]
    assert xp.linspace(0, 1, 0).shape == (0,)
    with pytest.raises(ShapeError):
        xp.linspace(0, 1, -1)
    with pytest.raises(ArgumentError):
        xp.linspace(0, 1, 2.0)
    with pytest.raises(DTypeError):
        xp.linspace(0, 1, 3, dtype=xp.int32)
    with pytest.raises(DTypeError, match="complex"):
        xp.linspace(0, 1j, 3, dtype=xp.float64)
    with pytest.raises(ArgumentError):
        xp.linspace(0, "1", 3)
    with pytest.raises(ArgumentError):
        xp.linspace(0, 1, 3, endpoint=None)


# ---------------------------------------------------------------- meshgrid


@given(lens=st.lists(st.integers(0, 3), min_size=0, max_size=4),
       indexing=st.sampled_from(["xy", "ij"]), data=st.data())
def test_meshgrid(xp, lens, indexing, data):
    dtype = data.draw(st.sampled_from(on_device(NUMERIC)), label="dtype")
    arrays = [np.arange(n).astype(dtype) + i for i, n in enumerate(lens)]
    got = xp.meshgrid(*[xp.asarray(a) for a in arrays], indexing=indexing)
    want = np.meshgrid(*arrays, indexing=indexing)
    assert isinstance(got, tuple) and len(got) == len(want)  # a tuple since the 2025.12 standard
    for g, w in zip(got, want):
        _check(g, w, dtype)


def test_meshgrid_promotes_and_validates(xp):
    a, b = xp.asarray([1, 2], dtype=xp.int8), xp.asarray([0.5, 1.5, 2.5], dtype=xp.float32)
    x, y = xp.meshgrid(a, b)
    assert x.dtype == y.dtype == xp.float32 and x.shape == (3, 2)
    with pytest.raises(ShapeError):
        xp.meshgrid(xp.asarray([[1, 2]]))
    with pytest.raises(ArgumentError):
        xp.meshgrid(a, indexing="yx")
    with pytest.raises(ArgumentError):
        xp.meshgrid([1, 2])


# ---------------------------------------------------------------- tril / triu


@pytest.mark.parametrize("fname", ["tril", "triu"])
@given(data=st.data())
def test_triangles(xp, fname, data):
    shape = data.draw(hnp.array_shapes(min_dims=2, max_dims=4, min_side=0, max_side=4))
    dtype = data.draw(st.sampled_from(on_device(ALL)))
    k = data.draw(st.integers(-5, 5))
    x = data.draw(arrays(dtype, shape))
    t = xp.asarray(x)
    if data.draw(st.booleans()):  # a transposed (non-contiguous) buffer with the same values
        perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
        t = lax.transpose(xp.asarray(np.ascontiguousarray(np.swapaxes(x, -1, -2))), permutation=perm)
    got = getattr(xp, fname)(t, k=k)
    _check(got, getattr(np, fname)(x, k=k), dtype)


@pytest.mark.parametrize("fname", ["tril", "triu"])
def test_triangles_keep_bfloat16_nans(fname):
    """The draw that once failed CI (torch:cpu, the device with bfloat16): a bfloat16 NaN on
    the kept diagonal of a transposed buffer."""
    from tenferro_runtime import array_api as tx

    x = np.zeros((2, 3, 3), dtype=np.float32)
    x[1, 2, 2] = np.nan
    t = tx.asarray(np.ascontiguousarray(np.swapaxes(x, -1, -2)), dtype=tx.bfloat16, device="torch:cpu")
    got = getattr(tx, fname)(lax.transpose(t, permutation=(0, 2, 1)), k=0)
    _check(got, getattr(np, fname)(x, k=0), "bfloat16")
    assert np.isnan(tx.astype(got, tx.float32).numpy()[1, 2, 2])


def test_triangle_errors(xp):
    with pytest.raises(ShapeError):
        xp.tril(xp.asarray([1.0, 2.0]))
    with pytest.raises(ArgumentError):
        xp.triu(xp.ones((2, 2)), k=1.5)
    with pytest.raises(ArgumentError):
        xp.triu(np.ones((2, 2)))
    _check(xp.triu(xp.ones((2, 3)), k=-(2**70)), np.ones((2, 3)), "float64")


# ---------------------------------------------------------------- full, zeros, ones, *_like


@pytest.mark.parametrize("value,dtype", [(1, "int64"), (1.5, "float64"), (True, "bool"),
                                         (1 + 2j, "complex128")])
def test_full_infers_dtype(xp, value, dtype):
    _check(xp.full((2, 3), value), np.full((2, 3), value), dtype)


@pytest.mark.parametrize("dtype", ALL)
def test_zeros_ones_like(xp, dtype):
    d = getattr(xp, dtype)
    _check(xp.zeros((2, 0, 3), dtype=d), np.zeros((2, 0, 3)), dtype)
    _check(xp.ones(3, dtype=d), np.ones(3), dtype)
    x = xp.asarray(np.zeros((2, 2), dtype=dtype))
    _check(xp.ones_like(x), np.ones((2, 2)), dtype)
    _check(xp.zeros_like(x, dtype=xp.float32), np.zeros((2, 2)), "float32")
    _check(xp.full_like(x, 1), np.ones((2, 2)), dtype)
    assert xp.empty((4,), dtype=d).shape == (4,) and xp.empty_like(x).dtype == d


def test_full_errors(xp):
    with pytest.raises(DTypeError):
        xp.full(2, 300, dtype=xp.uint8)
    with pytest.raises(DTypeError):
        xp.full(2, 1.5, dtype=xp.int32)
    with pytest.raises(ShapeError):
        xp.full((2, -1), 0)
    with pytest.raises(ArgumentError):
        xp.full(2, [1])
    if not has("bfloat16"):  # numpy:cpu holds no bfloat16
        with pytest.raises(DTypeError):
            xp.zeros(2, dtype=xp.bfloat16)
