"""matmul, matrix_transpose, tensordot and vecdot against NumPy, in every numeric dtype the
device holds (bfloat16 on torch:cpu, against NumPy's float32 product rounded to bfloat16)."""

from __future__ import annotations

import numpy as np
import pytest
from device_support import BF16, as_f32, elements, on_device
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

NUMERIC = [np.dtype(n) for n in (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)] + [BF16]
TOL = {"f": {2: 2e-2, 4: 1e-4, 8: 1e-10}, "c": {8: 1e-4, 16: 1e-10}, "V": {2: 4e-2}}


def small(dt: np.dtype, shape) -> st.SearchStrategy:
    """Small values, so integer products do not overflow and float sums stay accurate."""
    if dt.kind in "iu":
        elems = st.integers(0 if dt.kind == "u" else -3, 3)
    elif dt == BF16:
        elems = elements(dt, min_value=-4, max_value=4)
    elif dt.kind == "f":
        elems = st.floats(-4, 4, width=dt.itemsize * 8)
    else:
        elems = st.complex_numbers(max_magnitude=4, width=dt.itemsize * 8)
    return hnp.arrays(dt, shape, elements=elems)


@st.composite
def operand(draw, shape, dt):
    a = draw(small(dt, shape))
    if a.ndim >= 2 and draw(st.booleans()):
        a = np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)  # non-contiguous view
    return a


def result_dtype(a, b) -> np.dtype:
    return D.promote_types(D.from_numpy(a.dtype), D.from_numpy(b.dtype)).numpy


def dtype_pairs():
    """Pairs of the device's dtypes (drawn inside the test: the device is known there)."""
    same = st.sampled_from(on_device(NUMERIC)).map(lambda d: (d, d))
    mixed = st.sampled_from([("int8", "uint8"), ("int16", "float32"), ("float32", "float64"),
                             ("float32", "complex64"), ("uint8", "complex128"), ("int64", "int8")])
    return st.one_of(same, mixed.map(lambda p: (np.dtype(p[0]), np.dtype(p[1]))))


def _product(fn, a, b, rt, **kw):
    """NumPy's product in the result dtype `rt`; bfloat16 in float32, then rounded (as torch)."""
    work = np.float32 if rt == BF16 else rt
    return np.asarray(fn(a.astype(rt).astype(work), b.astype(rt).astype(work), **kw)).astype(rt)


def check_close(t, expected):
    expected = np.asarray(expected)
    assert t.shape == expected.shape
    assert t.dtype.numpy == expected.dtype
    got = t.numpy()
    if expected.dtype.kind in "fcV":
        tol = TOL[expected.dtype.kind][expected.dtype.itemsize]
        np.testing.assert_allclose(as_f32(got), as_f32(expected), rtol=tol, atol=tol * 10)
    else:
        np.testing.assert_array_equal(got, expected)


@given(data=st.data())
def test_matmul(xp, data):
    dts = data.draw(dtype_pairs(), label="dtypes")
    batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    m, k, n = (data.draw(st.integers(0, 3)) for _ in range(3))
    vec1, vec2 = data.draw(st.booleans()), data.draw(st.booleans())
    s1 = (k,) if vec1 else batch.input_shapes[0] + (m, k)
    s2 = (k,) if vec2 else batch.input_shapes[1] + (k, n)
    a = data.draw(operand(s1, dts[0]))
    b = data.draw(operand(s2, dts[1]))
    rt = result_dtype(a, b)
    expected = _product(np.matmul, a, b, rt)
    check_close(xp.matmul(xp.asarray(a), xp.asarray(b)), expected)
    check_close(xp.asarray(a) @ xp.asarray(b), expected)


def test_matmul_errors(xp):
    a = xp.asarray(np.ones((2, 3)))
    with pytest.raises(ShapeError):
        xp.matmul(a, xp.asarray(np.ones((2, 3))))
    with pytest.raises(ShapeError):
        xp.matmul(a, xp.asarray(2.0))
    with pytest.raises(ShapeError):
        xp.matmul(xp.asarray(np.ones((2, 2, 3))), xp.asarray(np.ones((3, 3, 2))))
    with pytest.raises(DTypeError):
        xp.matmul(xp.asarray(np.ones((2, 2), bool)), xp.asarray(np.ones((2, 2), bool)))
    with pytest.raises(DTypeError):
        xp.matmul(xp.asarray(np.ones((2, 2), np.uint64)), xp.asarray(np.ones((2, 2), np.int64)))
    with pytest.raises(ArgumentError):
        xp.matmul(a, [[1.0], [2.0], [3.0]])
    # a NumPy operand converts (tests/array_api/test_numpy_operands.py)
    np.testing.assert_array_equal(xp.matmul(a, np.ones((3, 2))).numpy(), np.full((2, 2), 3.0))


@given(data=st.data())
def test_matrix_transpose(xp, data):
    a = data.draw(operand(hnp.array_shapes(min_dims=2, max_dims=4, min_side=0, max_side=3),
                          data.draw(st.sampled_from(on_device(NUMERIC)))))
    x = xp.asarray(a)
    check_close(xp.matrix_transpose(x), np.swapaxes(a, -1, -2))
    check_close(x.mT, np.swapaxes(a, -1, -2))


def test_matrix_transpose_errors(xp):
    with pytest.raises(ShapeError):
        xp.matrix_transpose(xp.asarray(np.ones(3)))
    with pytest.raises(ArgumentError):
        xp.matrix_transpose(np.ones((2, 2)))


@given(data=st.data())
def test_tensordot(xp, data):
    dts = data.draw(dtype_pairs(), label="dtypes")
    shape1 = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    a = data.draw(operand(shape1, dts[0]))
    if data.draw(st.booleans()):
        n = data.draw(st.integers(0, a.ndim))
        extra = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3))
        b = data.draw(operand(a.shape[a.ndim - n:] + extra, dts[1]))
        axes = n
    else:
        k = data.draw(st.integers(0, a.ndim))
        la = data.draw(st.lists(st.integers(0, a.ndim - 1), min_size=k, max_size=k, unique=True)) if k else []
        extra = list(data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3)))
        nb = k + len(extra)
        lb = data.draw(st.permutations(range(nb)))[:k]
        rest = iter(extra)
        shape2 = [a.shape[la[lb.index(j)]] if j in lb else next(rest) for j in range(nb)]
        b = data.draw(operand(tuple(shape2), dts[1]))
        axes = (tuple(i - a.ndim if data.draw(st.booleans()) else i for i in la), tuple(lb))
    rt = result_dtype(a, b)
    expected = _product(np.tensordot, a, b, rt, axes=axes)
    check_close(xp.tensordot(xp.asarray(a), xp.asarray(b), axes=axes), expected)


def test_tensordot_errors(xp):
    a = xp.asarray(np.ones((2, 3)))
    b = xp.asarray(np.ones((2, 3)))
    with pytest.raises(ShapeError):
        xp.tensordot(a, b, axes=1)
    with pytest.raises(AxisError):
        xp.tensordot(a, b, axes=3)
    with pytest.raises(AxisError):
        xp.tensordot(a, b, axes=-1)
    with pytest.raises(AxisError):
        xp.tensordot(a, b, axes=((2,), (0,)))
    with pytest.raises(ShapeError):
        xp.tensordot(a, b, axes=((0, 1), (0,)))
    with pytest.raises(ArgumentError):
        xp.tensordot(a, b, axes=((0,), (0,), (1,)))
    with pytest.raises(DTypeError):
        xp.tensordot(xp.asarray(np.ones(2, bool)), b, axes=0)
    assert xp.tensordot(a, b, axes=((0, 1), (0, 1))).shape == ()


@given(data=st.data())
def test_vecdot(xp, data):
    dts = data.draw(dtype_pairs(), label="dtypes")
    shps = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3))
    k = data.draw(st.integers(0, 3))
    d = min(len(s) for s in shps.input_shapes) + 1
    axis = data.draw(st.integers(-d, -1))
    s1, s2 = (s[:len(s) + axis + 1] + (k,) + s[len(s) + axis + 1:] for s in shps.input_shapes)
    a = data.draw(operand(s1, dts[0]))
    b = data.draw(operand(s2, dts[1]))
    rt = result_dtype(a, b)
    expected = _product(np.vecdot, a, b, rt, axis=axis)
    check_close(xp.vecdot(xp.asarray(a), xp.asarray(b), axis=axis), expected)


def test_vecdot_conjugates_and_errors(xp):
    a = np.array([1 + 2j, 3 - 1j])
    b = np.array([2 - 1j, 1j])
    out = xp.vecdot(xp.asarray(a), xp.asarray(b))
    np.testing.assert_allclose(out.numpy(), np.sum(np.conj(a) * b))
    x = xp.asarray(np.ones((2, 3)))
    with pytest.raises(ShapeError):
        xp.vecdot(x, xp.asarray(np.ones((2, 2))))
    with pytest.raises(AxisError):
        xp.vecdot(x, x, axis=-3)
    with pytest.raises(ShapeError):
        xp.vecdot(xp.asarray(1.0), xp.asarray(1.0))
    with pytest.raises(ShapeError):
        xp.vecdot(x, xp.asarray(np.ones((4, 3))))
    with pytest.raises(DTypeError):
        xp.vecdot(xp.asarray(np.ones(2, bool)), xp.asarray(np.ones(2, bool)))
