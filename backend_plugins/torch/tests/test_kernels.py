"""Kernel paths the conformance kit does not reach on CPU, and the documented special points
where torch's own functions differ from the reference semantics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.testing.reference import REFERENCE
from tenferro_runtime.testing.reference_reductions import conv_values
from tenferro_torch.ops.reductions import KERNELS as REDUCTIONS
from tenferro_torch.ops.reductions import int_matmul

DEVICE = "torch:cpu"


def on(a):
    return xp.asarray(np.asarray(a), device=DEVICE)


@pytest.mark.parametrize(("lshape", "rshape", "params"), [
    ((1, 3, 5), (2, 3, 3), {"padding": ((1, 1),), "window_strides": (2,)}),  # conv1d pads itself
    # four spatial axes: torch has no conv4d, so windows are unfolded and contracted
    ((1, 2, 3, 3, 2, 3), (2, 1, 2, 1, 2, 2), {"feature_group_count": 2, "padding": ((1, 0),) * 4}),
    ((2, 1, 2, 3, 2, 2), (1, 1, 2, 2, 1, 2), {"padding": ((1, 1),) * 4, "rhs_dilation": (1, 2, 1, 1)}),
    ((2, 2, 4, 3, 3), (2, 2, 2, 2, 1), {"window_strides": (2, 1, 1), "rhs_dilation": (1, 2, 1)}),
    ((1, 2, 5), (4, 1, 2), {"feature_group_count": 2, "lhs_dilation": (2,), "padding": ((-1, 2),)}),
])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_conv_general_paths(lshape, rshape, params, dtype):
    rng = np.random.default_rng(7)
    lhs, rhs = rng.standard_normal(lshape).astype(dtype), rng.standard_normal(rshape).astype(dtype)
    x, w = on(lhs), on(rhs)
    out = lax.conv_general(x, w, **params)
    full = catalog.conv_general.check_params(params, (x.aval, w.aval))
    np.testing.assert_allclose(out.numpy(), conv_values(lhs, rhs, **full), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int64])
def test_integer_matmul_without_torch_matmul(dtype):
    """The CUDA path of integer dot_general (run here on CPU tensors): it wraps like matmul."""
    rng = np.random.default_rng(8)
    info = torch.iinfo(dtype)
    a = torch.from_numpy(rng.integers(info.min, info.max, (2, 3, 4), endpoint=True)).to(dtype)
    b = torch.from_numpy(rng.integers(info.min, info.max, (2, 4, 5), endpoint=True)).to(dtype)
    assert torch.equal(int_matmul(a, b), torch.matmul(a, b))


SPECIAL_POINTS = [
    ("sign", (np.array([np.nan, -0.0, 0.0, -3.0, np.inf]),)),
    ("div", (np.array([7, -7, 5, -128, -128, 0], np.int8), np.array([2, 2, 0, -1, 0, 0], np.int8))),
    ("div", (np.array([7, 255, 0], np.uint8), np.array([0, 2, 0], np.uint8))),
    ("rem", (np.array([7, -7, 5, -128], np.int8), np.array([2, 2, 0, -1], np.int8))),
    ("rem", (np.array([1.0, np.inf, 1.0, -7.5]), np.array([0.0, 2.0, np.inf, 2.0]))),
    ("pow", (np.array([2, -1, -1, 1, 0, 3, 5], np.int16), np.array([-1, -3, -4, -9, -2, 20, 0], np.int16))),
    ("pow", (np.array([np.nan, 1.0, -8.0]), np.array([0.0, np.nan, 1 / 3]))),
    ("pow", (np.array([0j, 0j, 2 + 1j, np.nan + 0j]), np.array([0j, 2 + 0j, 0j, 0j]))),  # x ** 0 = 1
    ("shift_left", (np.array([1, -1, 3, 5], np.int8), np.array([8, -1, 7, 2], np.int8))),
    ("shift_right", (np.array([-4, 4, -4, -128], np.int8), np.array([-1, 9, 8, 7], np.int8))),
    ("shift_right", (np.array([255, 128], np.uint8), np.array([8, 7], np.uint8))),
    ("rsqrt", (np.array([0.0, -0.0, -1.0, np.inf]),)),
    ("round", (np.array([0.5, 1.5, 2.5, -0.5, -2.5]),)),
    ("logistic", (np.array([-800.0, 800.0, np.nan]),)),
]


@pytest.mark.parametrize(("name", "args"), SPECIAL_POINTS,
                         ids=[f"{n}-{a[0].dtype}" for n, a in SPECIAL_POINTS])
def test_documented_special_points(name, args):
    out = getattr(lax, name)(*[on(a) for a in args])
    np.testing.assert_array_equal(out.numpy(), REFERENCE[name](*args))


@pytest.mark.parametrize(("fill", "dtype", "want"), [
    (300, D.int8, 44), (2**64 - 1, D.int64, -1), (2**64 - 1, D.float32, 2.0**64),
    (1e10, D.float16, np.inf), (-1e300, D.bfloat16, -np.inf), (1 + 2j, D.float64, 1.0),
    (0.5j, D.bool_, True), (float("nan"), D.bool_, True), (-7.9, D.int16, -7), (True, D.complex64, 1 + 0j),
])
def test_full_converts_like_convert(fill, dtype, want):
    out = lax.full(shape=(2,), fill_value=fill, dtype=dtype, device=DEVICE)
    assert out.dtype is dtype
    np.testing.assert_array_equal(out.numpy().astype(np.result_type(type(want))), [want, want])


def test_identity_reductions_and_views_do_not_copy_needlessly():
    x = on(np.arange(6.0).reshape(2, 3))
    assert lax.reduce_sum(x, axes=())._buf is x._buf  # torch would reduce over every axis
    assert lax.reduce_max(x, axes=())._buf is x._buf
    t = lax.transpose(x, permutation=(1, 0))
    assert t._buf.data_ptr() == x._buf.data_ptr()
    c = lax.copy(x)
    assert c._buf.data_ptr() != x._buf.data_ptr()


# ---- select without branches (select_bits) and 2-D dot_general ---------------------------

_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.25, 5e-324, 1e300]


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", "int16", "int32", "int64", "float16",
                                   "bfloat16", "float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("layout", ["dense", "transposed", "broadcast"])
def test_select_is_bitwise_where(dtype, layout):
    """select on the CPU gives exactly np.where's bits (NaN payloads, signed zeros), whatever
    the operands' layout (select_bits takes same-width integer views)."""
    rng = np.random.default_rng(3)
    shape = (6, 5)
    dt = D.as_dtype(dtype)

    def values():
        if dt.kind == "b":
            return rng.random(shape) < 0.5
        if dt.kind in "iu":
            info = np.iinfo(dt.numpy)
            return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt.numpy)
        a = rng.choice(np.array(_SPECIALS), shape)
        if dt.kind == "c":
            c = np.empty(shape, np.complex128)
            c.real, c.imag = a, rng.choice(np.array(_SPECIALS), shape)
            a = c
        with np.errstate(over="ignore"):
            return a.astype(dt.numpy)

    pred = rng.random(shape) < 0.5
    a, b = values(), values()
    x, y, p = on(a), on(b), on(pred)
    if layout == "transposed":
        x, y, p = (lax.transpose(on(np.ascontiguousarray(v.T)), permutation=(1, 0)) for v in (a, b, pred))
    elif layout == "broadcast":
        b = np.broadcast_to(b[:1], shape)
        y = lax.broadcast_in_dim(on(b[0]), shape=shape, broadcast_dimensions=(1,))
    out = lax.select(p, x, y).numpy()
    want = np.where(pred, a, b)
    assert out.dtype == want.dtype
    width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.uint64}[want.itemsize]
    np.testing.assert_array_equal(np.ascontiguousarray(out).view(width), want.view(width))


@pytest.mark.parametrize(("lshape", "rshape", "dims"), [
    ((4, 3), (5, 3), ((1,), (1,))),   # x @ w.T (a linear layer)
    ((3, 4), (3, 5), ((0,), (0,))),   # x.T @ g (a weight gradient)
    ((3, 4), (5, 3), ((0,), (1,))),   # both transposed
    ((2, 3, 4), (4, 3, 5), ((1, 2), (1, 0))),  # several contracting axes
    ((0, 3), (3, 2), ((1,), (0,))),  # empty
])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_unbatched_dot_general_is_one_2d_product(lshape, rshape, dims, dtype):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(lshape).astype(dtype) * 3
    b = rng.standard_normal(rshape).astype(dtype) * 3
    out = lax.dot_general(on(a), on(b), contracting_dims=dims, batch_dims=((), ()))
    want = np.tensordot(a.astype(np.float64), b.astype(np.float64), axes=dims)
    np.testing.assert_allclose(out.numpy(), want.astype(dtype), rtol=1e-5, atol=1e-4)


def _windows(outer, window, strided, dtype, seed):
    """A pooling-like operand (a large array reduced over a few trailing elements), with NaN
    and signed zeros for floats, strided along its first axis when `strided`."""
    rng = np.random.default_rng(seed)
    a = np.round(rng.standard_normal([128 if strided else 64, *outer, *window]) * 2) / 2
    if dtype == np.bool_:
        a = a > 0
    else:
        a = a.astype(dtype)
        if a.dtype.kind == "f":
            a.flat[rng.integers(0, a.size, 5)] = np.nan
            a.flat[rng.integers(0, a.size, a.size // 4)] = -0.0
    t = torch.from_numpy(a)
    if strided:
        t = t[::2]
    return t, tuple(range(t.ndim - len(window), t.ndim))


@settings(max_examples=40, deadline=None)
@given(outer=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       window=st.lists(st.integers(1, 4), min_size=1, max_size=2), strided=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64, np.int16, np.uint8, np.bool_]),
       seed=st.integers(0, 2**16))
@example(outer=[5], window=[4, 4], strided=True, dtype=np.float64, seed=0)  # a signed-zero tie
def test_reductions_over_few_elements_per_output_are_torchs(outer, window, strided, dtype, seed):
    """Max, min, all and any over a few elements per output combine strided slices: torch's
    amax/amin/all/any (NaN included; a tie of -0.0 and 0.0 may come out either way, as it
    does in torch's own order), on strided operands too."""
    t, axes = _windows(outer, window, strided, dtype, seed)
    ops = ({"reduce_and": torch.all, "reduce_or": torch.any} if dtype == np.bool_
           else {"reduce_max": torch.amax, "reduce_min": torch.amin})
    for name, ref in ops.items():
        want = ref(t, dim=axes).numpy()
        for got in (REDUCTIONS[name](t, axes=axes).numpy(),  # the strided operand itself
                    getattr(lax, name)(xp.asarray(t.contiguous()), axes=axes).numpy()):
            assert got.dtype == want.dtype and got.shape == want.shape
            if got.dtype.kind == "f":  # which of a tie of -0.0 and 0.0 comes out is torch's order
                np.testing.assert_array_equal(got, want)
            else:
                assert got.tobytes() == want.tobytes()


@settings(max_examples=40, deadline=None)
@given(outer=st.lists(st.integers(1, 9), min_size=1, max_size=3),
       window=st.lists(st.integers(1, 4), min_size=1, max_size=2), strided=st.booleans(),
       dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int16, np.int8, np.complex64]),
       seed=st.integers(0, 2**16))
def test_sums_over_few_elements_per_output_match_torch(outer, window, strided, dtype, seed):
    """reduce_sum over a few elements per output adds strided slices in order: torch's sum to
    rounding (integers wrap alike; float16 keeps torch's float32 accumulation)."""
    t, axes = _windows(outer, window, strided, np.float64 if dtype == np.complex64 else dtype, seed)
    if dtype == np.complex64:
        t = (t + 1j * t.flip(0)).to(torch.complex64)
    want = torch.sum(t, dim=axes, dtype=t.dtype).numpy()
    for got in (REDUCTIONS["reduce_sum"](t, axes=axes).numpy(),
                lax.reduce_sum(xp.asarray(t.contiguous()), axes=axes).numpy()):
        assert got.dtype == want.dtype and got.shape == want.shape
        if dtype in (np.float16, np.int16, np.int8):
            assert got.tobytes() == want.tobytes()
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6 if dtype in (np.float32, np.complex64) else 1e-13,
                                       atol=1e-5, equal_nan=True)
