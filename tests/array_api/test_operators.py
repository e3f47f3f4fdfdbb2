"""Tensor operators (plain, reflected, in-place), Python-scalar promotion, conversions to
Python scalars, NumPy/DLPack interop and __array_namespace__, in every dtype the device
holds (bfloat16 on torch:cpu; torch's pow and complex division within device_support.ULPS)."""

from __future__ import annotations

import operator

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from device_support import arrays, assert_equal, assert_ulps, elements, on_device, on_numpy, ulps_for
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime.tensor import Tensor
from tenferro_runtime.testing.numerics import full_power

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]

# operator: (dtypes it accepts, NumPy reference)
BINOPS = {
    operator.add: (INTS + FLOATS + COMPLEX, np.add),
    operator.sub: (INTS + FLOATS + COMPLEX, np.subtract),
    operator.mul: (INTS + FLOATS + COMPLEX, np.multiply),
    operator.truediv: (FLOATS + COMPLEX, np.true_divide),
    operator.floordiv: (INTS + FLOATS, np.floor_divide),
    operator.mod: (INTS + FLOATS, np.remainder),
    operator.pow: (FLOATS + COMPLEX, full_power),
    operator.and_: (["bool"] + INTS, np.bitwise_and),
    operator.or_: (["bool"] + INTS, np.bitwise_or),
    operator.xor: (["bool"] + INTS, np.bitwise_xor),
    operator.lshift: (INTS, np.left_shift),
    operator.rshift: (INTS, np.right_shift),
    operator.lt: (["bool"] + INTS + FLOATS, np.less),
    operator.le: (["bool"] + INTS + FLOATS, np.less_equal),
    operator.gt: (["bool"] + INTS + FLOATS, np.greater),
    operator.ge: (["bool"] + INTS + FLOATS, np.greater_equal),
    operator.eq: (["bool"] + INTS + FLOATS + COMPLEX, np.equal),
    operator.ne: (["bool"] + INTS + FLOATS + COMPLEX, np.not_equal),
}
IOPS = {operator.add: operator.iadd, operator.sub: operator.isub, operator.mul: operator.imul,
        operator.truediv: operator.itruediv, operator.floordiv: operator.ifloordiv,
        operator.mod: operator.imod, operator.pow: operator.ipow, operator.and_: operator.iand,
        operator.or_: operator.ior, operator.xor: operator.ixor, operator.lshift: operator.ilshift,
        operator.rshift: operator.irshift}


def _values(dtype: str, op, rhs: bool):
    dt = np.dtype(dtype)
    if op in (operator.lshift, operator.rshift) and rhs:
        return st.integers(0, dt.itemsize * 8 - 1)
    if dtype == "bfloat16":
        return elements(dt, min_value=-50, max_value=50)
    if dt.kind in "fc":
        return hnp.from_dtype(dt, min_value=-50, max_value=50) if dt.kind == "f" else \
            hnp.from_dtype(dt, max_magnitude=50)
    return hnp.from_dtype(dt)


ULP_NAMES = {operator.truediv: "divide", operator.pow: "pow", operator.mul: "multiply"}


def _same(got, want: np.ndarray, dtype: str, op=None, operands: str = "") -> None:
    """Exactly NumPy's `want`; off numpy:cpu, pow and complex division within
    device_support.ULPS."""
    assert isinstance(got, Tensor)
    assert got.dtype.name == dtype, (got.dtype, dtype)
    ulps = ulps_for(ULP_NAMES[op], operands or dtype, dtype) if op in ULP_NAMES else 0
    if ulps:
        assert_ulps(got.numpy(), want.astype(dtype), ulps)
        return
    assert_equal(got.numpy(), want.astype(dtype))


def _no_complex_zero_base(op, a: np.ndarray) -> np.ndarray:
    """Off numpy:cpu, complex pow's zero bases replaced by 1: the standard computes those as
    exp(y * log(0)) (torch does: inf or NaN parts), NumPy special-cases them."""
    if op is not operator.pow or a.dtype.kind != "c" or on_numpy():
        return a
    return np.where(a == 0, np.ones((), a.dtype), a)


def _ref(fn, a, b):
    with np.errstate(all="ignore"):
        return fn(a, b)


@pytest.mark.parametrize("op", list(BINOPS), ids=lambda o: o.__name__)
@given(data=st.data())
def test_binary_operators(xp, op, data):
    dtypes, ref = BINOPS[op]
    dtype = data.draw(st.sampled_from(on_device(dtypes)))
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    a = _no_complex_zero_base(op, data.draw(arrays(dtype, shapes.input_shapes[0],
                                                  elems=_values(dtype, op, False))))
    b = data.draw(arrays(dtype, shapes.input_shapes[1], elems=_values(dtype, op, True)))
    want = np.asarray(_ref(ref, a, b))
    _same(op(xp.asarray(a), xp.asarray(b)), want, want.dtype.name, op, dtype)


@pytest.mark.parametrize("op", list(BINOPS), ids=lambda o: o.__name__)
@given(data=st.data())
def test_reflected_operators_with_python_scalars(xp, op, data):
    dtypes, ref = BINOPS[op]
    dtype = data.draw(st.sampled_from(on_device(dtypes)))
    a = _no_complex_zero_base(op, data.draw(arrays(
        dtype, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3), elems=_values(dtype, op, False))))
    if dtype == "bool":
        s = data.draw(st.booleans())
    elif op in (operator.lshift, operator.rshift):
        s = data.draw(st.integers(0, 5))
    else:
        s = data.draw(st.integers(0, 5) if dtype in INTS else st.floats(-5, 5))
    if np.asarray(s).astype(dtype) == 0 and _no_complex_zero_base(op, np.zeros(1, dtype))[0] != 0:
        s = 1.0  # a zero base for `s ** t` (see _no_complex_zero_base)
    t = xp.asarray(a)
    sa = np.asarray(s).astype(dtype)
    want = np.asarray(_ref(ref, a, sa))
    _same(op(t, s), want, want.dtype.name, op, dtype)
    if op in (operator.lshift, operator.rshift, operator.pow) and dtype in INTS:
        return
    want = np.asarray(_ref(ref, sa, a))
    _same(op(s, t), want, want.dtype.name, op, dtype)


def test_true_division_of_ints_gives_float64(xp):
    a = xp.asarray([1, 2, 3], dtype=xp.int16)
    assert (a / a).dtype == xp.float64 and (a / 2).numpy().tolist() == [0.5, 1.0, 1.5]
    assert (3 / a).numpy().tolist() == [3.0, 1.5, 1.0]


@pytest.mark.parametrize("op", list(IOPS), ids=lambda o: o.__name__)
def test_inplace_operators_keep_identity_and_dtype(xp, op):
    dtypes, ref = BINOPS[op]
    dtype = "float64" if "float64" in dtypes else "int32"
    if op in (operator.lshift, operator.rshift) or (op in (operator.and_, operator.or_,
                                                           operator.xor)):
        dtype = "int32"
    a = np.arange(1, 7).reshape(2, 3).astype(dtype)
    b = np.array([1, 2, 3]).astype(dtype)
    t = xp.asarray(a)
    out = IOPS[op](t, xp.asarray(b))
    assert out is t and out.dtype.name == dtype
    np.testing.assert_array_equal(out.numpy(), _ref(ref, a, b).astype(dtype))
    t2 = xp.asarray(a)
    t2 = IOPS[op](t2, 2)
    np.testing.assert_array_equal(t2.numpy(), _ref(ref, a, np.asarray(2, dtype=dtype)))


def test_inplace_operator_refuses_dtype_or_shape_change(xp):
    t = xp.asarray([1, 2, 3], dtype=xp.int32)
    with pytest.raises(DTypeError, match="in-place"):
        t += 1.5
    with pytest.raises(DTypeError):
        t /= 2
    assert t.dtype == xp.int32 and t.numpy().tolist() == [1, 2, 3]
    f = xp.asarray([1.0], dtype=xp.float32)
    with pytest.raises(DTypeError):
        f += xp.asarray([1.0], dtype=xp.float64)
    with pytest.raises((DTypeError, ShapeError)):
        f += xp.ones((2, 1), dtype=xp.float32)
    assert f.shape == (1,) and f.numpy().tolist() == [1.0]


def test_inplace_does_not_affect_other_references(xp):
    t = xp.asarray([1.0, 2.0])
    u, w = t + 0, xp.asarray(t, copy=True)
    t += 1
    assert u.numpy().tolist() == w.numpy().tolist() == [1.0, 2.0]
    assert t.numpy().tolist() == [2.0, 3.0]


@pytest.mark.parametrize("dtype", ["int8", "uint8", "float32", "complex64"])
def test_unary_operators(xp, dtype):
    a = np.array([1, 2, 3]).astype(dtype)
    t = xp.asarray(a)
    _same(-t, -a, dtype)
    _same(+t, a, dtype)
    _same(abs(-t), np.abs(-a), {"complex64": "float32"}.get(dtype, dtype))
    if dtype in INTS:
        _same(~t, ~a, dtype)
    b = xp.asarray([True, False])
    _same(~b, np.array([False, True]), "bool")
    with pytest.raises(DTypeError):
        _ = -b


@pytest.mark.parametrize("dtype,scalar,want", [
    ("int8", 1, "int8"), ("int8", 1.0, "float64"), ("int8", 1j, "complex128"),
    ("uint8", 255, "uint8"), ("int16", True, "int16"), ("float32", 1, "float32"),
    ("float32", 1.0, "float32"), ("float16", 2.0, "float16"), ("float32", 1j, "complex64"),
    ("float64", 1j, "complex128"), ("complex64", 2.0, "complex64"), ("bool", 1, "int64"),
    ("bool", 0.5, "float64"),
])
def test_python_scalar_promotion(xp, dtype, scalar, want):
    t = xp.asarray(np.ones(3, dtype=dtype))
    assert (t + scalar).dtype.name == want
    assert (scalar * t).dtype.name == want
    assert (t == scalar).dtype == xp.bool


def test_python_scalar_errors(xp):
    u = xp.asarray([1, 2], dtype=xp.uint8)
    with pytest.raises(DTypeError, match="out of range"):
        u + 256
    with pytest.raises(DTypeError, match="out of range"):
        u - (-1)
    with pytest.raises(DTypeError, match="out of range"):
        xp.asarray([1], dtype=xp.int8) * 1000
    with pytest.raises(DTypeError):
        xp.asarray([True]) + True
    with pytest.raises(DTypeError):
        xp.asarray([1], dtype=xp.int64) + xp.asarray([1], dtype=xp.uint64)
    with pytest.raises(ShapeError):
        xp.ones((2, 3)) + xp.ones((2,))
    with pytest.raises(ArgumentError):  # NumPy operands convert (tests/array_api/test_numpy_operands.py)
        xp.ones(3) + "1"
    with pytest.raises(ArgumentError):
        [1, 2, 3] + xp.ones(3)


def test_int8_uint8_mix_promotes_to_int16(xp):
    a, b = xp.asarray([-1], dtype=xp.int8), xp.asarray([200], dtype=xp.uint8)
    r = a + b
    assert r.dtype == xp.int16 and r.numpy().tolist() == [199]
    assert (xp.asarray([1], dtype=xp.int32) + xp.asarray([1.5], dtype=xp.float32)).dtype == xp.float32


# ---------------------------------------------------------------- conversions to Python scalars


def test_python_scalar_conversions(xp):
    assert bool(xp.asarray(True)) is True and bool(xp.asarray([0.0])) is False
    i = int(xp.asarray([[7]], dtype=xp.int8))
    assert i == 7 and type(i) is int
    f = float(xp.asarray(2.5, dtype=xp.float32))
    assert f == 2.5 and type(f) is float
    assert complex(xp.asarray(1 + 2j)) == 1 + 2j
    assert complex(xp.asarray(3.0)) == 3 + 0j
    assert operator.index(xp.asarray(5, dtype=xp.uint16)) == 5
    assert [10, 20, 30][xp.asarray(1)] == 20
    assert int(xp.asarray(-3.7)) == -3


def test_python_scalar_conversion_errors(xp):
    with pytest.raises(ShapeError):
        bool(xp.asarray([1, 2]))
    with pytest.raises(ShapeError):
        float(xp.asarray(np.zeros((0,))))
    with pytest.raises(DTypeError):
        int(xp.asarray(1j))
    with pytest.raises(DTypeError):
        float(xp.asarray(1 + 1j))
    with pytest.raises(DTypeError):
        operator.index(xp.asarray(1.0))
    with pytest.raises(TypeError):
        len(xp.asarray(1.0))
    with pytest.raises(TypeError):
        hash(xp.asarray([1.0]))


# ---------------------------------------------------------------- interop


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint64", "float16", "float64", "complex64"])
def test_array_protocol(xp, dtype):
    a = np.arange(6).reshape(2, 3).astype(dtype)
    t = xp.asarray(a)
    out = np.asarray(t)
    assert out.dtype == a.dtype
    np.testing.assert_array_equal(out, a)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), a.astype(np.float64))
    c = np.array(t, copy=True)
    c[...] = 0
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("dtype", ["bool", "int32", "uint8", "float32", "complex128"])
def test_dlpack_round_trip(xp, dtype):
    a = np.arange(12).reshape(3, 4).astype(dtype)
    t = xp.asarray(a)
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    back = xp.from_dlpack(np.from_dlpack(t))
    assert back.dtype.name == dtype
    np.testing.assert_array_equal(back.numpy(), a)
    view = xp.from_dlpack(a[::2, 1:])  # a strided NumPy view
    np.testing.assert_array_equal(view.numpy(), a[::2, 1:])


def test_array_namespace(xp):
    t = xp.asarray([1.0])
    assert t.__array_namespace__() is xp
    assert t.__array_namespace__(api_version="2025.12") is xp
    with pytest.raises(ValueError):
        t.__array_namespace__(api_version="1999.01")
    assert xp.__array_api_version__ == "2025.12"


def test_transposes(xp):
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(xp.asarray(a[0]).T.numpy(), a[0].T)
    np.testing.assert_array_equal(xp.asarray(a).mT.numpy(), np.swapaxes(a, -1, -2))
    with pytest.raises(ShapeError):
        _ = xp.asarray(a).T


def test_negative_zero_scalar_keeps_its_sign(xp):
    t = xp.asarray([1.0, 2.0])
    assert not np.signbit((t * 0.0).numpy()).any()
    assert np.signbit((t * -0.0).numpy()).all()
