"""NumPy arrays and NumPy scalars as the other operand of operators and namespace functions:
converted once (`_helpers.promote`) to a tensor of their own dtype on the tensor's device, then
promoted as two tensors are, so results (values and dtype) are NumPy 2's own."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from device_support import arrays, assert_equal, current, on_device
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tenferro_core.errors import ArgumentError, DTypeError
from tenferro_runtime.tensor import Tensor

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "uint64", "float32", "float64", "complex64",
          "complex128"]
OPS = [operator.add, operator.sub, operator.mul]


def _values(dtype: str) -> st.SearchStrategy:
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return st.integers(0 if dt.kind == "u" else -5, 5).map(dt.type)
    if dt.kind in "fc":
        bounds = {"min_value": -50, "max_value": 50} if dt.kind == "f" else {"max_magnitude": 50}
        return hnp.from_dtype(dt, allow_nan=False, allow_infinity=False, **bounds)
    return hnp.from_dtype(dt)


def _promoted(xp, d1: str, d2: str):
    """The dtype two tensors of d1 and d2 give (None: refused, a DTypeError), and whether the op
    is defined on it (no bool arithmetic)."""
    try:
        d = xp.result_type(getattr(xp, d1), getattr(xp, d2))
    except DTypeError:
        return None
    return d if d != "bool" else None


@given(data=st.data())
def test_operators_with_numpy_arrays_match_numpy(xp, data):
    """Values NumPy's in the promoted dtype; the dtype that of two tensors (the Array API's:
    int32 with float32 is float32, where NumPy makes float64), refused where two tensors are."""
    d1 = data.draw(st.sampled_from(on_device(DTYPES)))
    d2 = data.draw(st.sampled_from(on_device(DTYPES)))
    s1, s2 = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    a = data.draw(arrays(d1, s1, elems=_values(d1)))
    b = data.draw(arrays(d2, s2, elems=_values(d2)))
    op = data.draw(st.sampled_from(OPS))
    d = _promoted(xp, d1, d2)
    if d is None:
        for bad in (lambda: op(xp.asarray(a), b), lambda: op(a, xp.asarray(b)),
                    lambda: op(xp.asarray(a), xp.asarray(b))):
            with pytest.raises(DTypeError):
                bad()
        return
    want = op(a.astype(d.numpy), b.astype(d.numpy))
    for got in (op(xp.asarray(a), b), op(a, xp.asarray(b))):  # ndarray on either side
        assert isinstance(got, Tensor) and got.device == current()
        assert got.dtype == d, (d1, d2, got.dtype, d)
        if op is operator.mul and np.dtype(d.numpy).kind == "c":
            # a complex product's parts are a*c - b*d and a*d + b*c: torch's kernels fuse
            # them (FMA), NumPy rounds each product, so they may differ in the last bit
            bound = 4 * np.finfo(d.numpy).eps * (np.abs(a) * np.abs(b)).astype(np.float64)
            assert (np.abs(got.numpy() - want) <= bound).all(), (got.numpy(), want)
        else:
            assert_equal(got.numpy(), want)


@pytest.mark.parametrize("scalar", [np.float32(2.5), np.float64(2.5), np.int8(3), np.int64(3),
                                    np.complex64(1 + 2j), np.bool_(True)])
@pytest.mark.parametrize("dtype", ["float32", "int16", "complex128"])
def test_numpy_scalars_are_strongly_typed_as_in_numpy2(xp, scalar, dtype):
    """A NumPy scalar is a 0-d array of its dtype (NumPy 2, NEP 50), not a weak Python scalar:
    float32 tensor * np.float64(2.5) is float64."""
    a = np.arange(1, 4).astype(dtype)
    t = xp.asarray(a)
    d = _promoted(xp, dtype, scalar.dtype.name) or xp.int16  # bool * int16 stays int16
    s = scalar.astype(d.numpy)
    for got, want in ((t * scalar, a.astype(d.numpy) * s), (scalar * t, s * a.astype(d.numpy)),
                      (xp.add(t, scalar), a.astype(d.numpy) + s), (t == scalar, a.astype(d.numpy) == s)):
        assert isinstance(got, Tensor), type(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
        assert_equal(got.numpy(), want)
    assert (xp.asarray([1.0, 2.0], dtype=xp.float32) * np.float64(2.5)).dtype == xp.float64


def test_namespace_functions_take_numpy_operands(xp):
    t = xp.asarray([1.0, -2.0, 3.0], dtype=xp.float32)
    arr = np.array([0.5, 0.25, 4.0])  # float64
    c = t > 0
    for got, want in ((xp.where(c, t, arr), np.where(c.numpy(), t.numpy(), arr)),
                      (xp.maximum(arr, t), np.maximum(arr, t.numpy())),
                      (xp.divide(t, arr), t.numpy() / arr),
                      (xp.matmul(t, arr), t.numpy() @ arr),
                      (t @ arr, t.numpy() @ arr),
                      (arr @ t, arr @ t.numpy()),
                      (xp.where(c, np.float32(1), t), np.where(c.numpy(), np.float32(1), t.numpy()))):
        assert isinstance(got, Tensor) and got.dtype == want.dtype, (got, want.dtype)
        assert_equal(got.numpy(), want)
    # in-place keeps the tensor's dtype: a float64 operand cannot land in float32
    with pytest.raises(DTypeError, match="in-place"):
        t += arr
    u = xp.asarray([1.0, 2.0])
    u += np.ones(2)
    assert u.tolist() == [2.0, 3.0]


def test_numpy_operand_errors(xp):
    t = xp.asarray([1, 2], dtype=xp.int64)
    with pytest.raises(DTypeError, match="no integer dtype holds both") as info:
        t + np.array([1, 2], dtype=np.uint64)  # refused exactly where two tensors are
    assert isinstance(info.value, TypeError)
    with pytest.raises(DTypeError):
        t + xp.asarray(np.array([1, 2], dtype=np.uint64))
    with pytest.raises(ArgumentError, match="must hold numbers") as info:
        t + np.array(["a", "b"])
    assert isinstance(info.value, TypeError)
    with pytest.raises(ArgumentError, match="must hold numbers"):
        xp.add(t, np.array([object(), 1], dtype=object))
    with pytest.raises(ValueError, match="broadcast"):
        t + np.ones(3)
