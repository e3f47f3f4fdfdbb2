"""uint8/16/32/64 on torch:cpu give the numpy backend's results bit for bit.

torch stores uint16/uint32/uint64 but has few kernels for them; `tenferro_torch.ops.unsigned`
emulates the rest. Every core primitive that takes unsigned integers runs here on both
backends, per unsigned dtype, on hypothesis-drawn values with 0, 1, the maximum, the sign
bit of every width (2**15, 2**31, 2**63) and its neighbours, and small counts (shifts,
exponents, indices) mixed in, as contiguous or transposed (strided) operands. Also: the
namespace's uint8 reductions (which accumulate in uint64), copysign (which bit-casts floats
through unsigned integers), and host / DLPack transfers of these dtypes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tenferro_core import dtypes as D
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_device, lax

TORCH, NUMPY = "torch:cpu", "numpy:cpu"
UNSIGNED = [D.uint8, D.uint16, D.uint32, D.uint64]
EXAMPLES = max(10, settings().max_examples // 4)
SHAPES = hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=4)


def edges(dtype: D.DType) -> list[int]:
    """0, 1, the maximum, each width's sign bit and its neighbours, and small counts."""
    top = (1 << dtype.bits) - 1
    marks = [0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, top, top - 1]
    for b in (8, 16, 31, 32, 63):
        marks += [(1 << b) - 1, 1 << b, (1 << b) + 1]
    return sorted({m for m in marks if m <= top})


def values(dtype: D.DType) -> st.SearchStrategy:
    top = (1 << dtype.bits) - 1
    return st.one_of(st.sampled_from(edges(dtype)), st.integers(0, top), st.integers(0, 70))


def uarrays(dtype: D.DType, shape: Any = SHAPES) -> st.SearchStrategy:
    return hnp.arrays(dtype.numpy, shape, elements=values(dtype))


def on(device: str, host: np.ndarray, transposed: bool = False) -> Any:
    """A tensor on `device`; `transposed` builds a 2-D one as the transpose of a copy (a
    strided buffer)."""
    if transposed and host.ndim == 2:
        return lax.transpose(xp.asarray(np.ascontiguousarray(host.T), device=device),
                             permutation=(1, 0))
    return xp.asarray(host, device=device)


def agree(fn: Callable[..., Any], *hosts: np.ndarray, transposed: bool = False) -> np.ndarray:
    """`fn` of the operands on numpy:cpu and on torch:cpu: same dtype, shape and bits."""
    out = []
    for device in (NUMPY, TORCH):
        got = fn(*(on(device, h, transposed) for h in hosts))
        assert str(got.device) == device
        out.append(got.numpy())
    want, got = out
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    bits = [np.ascontiguousarray(a).view(np.uint8) for a in (got, want)]
    np.testing.assert_array_equal(*bits)
    return want


# ---- elementwise ---------------------------------------------------------------------

UNARY = ["neg", "abs", "sign", "conj", "real", "imag", "floor", "ceil", "round", "trunc",
         "isnan", "isinf", "isfinite", "bitwise_not", "copy"]
BINARY = ["add", "sub", "mul", "div", "rem", "pow", "maximum", "minimum", "eq", "ne", "lt",
          "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "shift_left",
          "shift_right"]


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@pytest.mark.parametrize("name", UNARY)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_unary(name, dtype, data):
    x = data.draw(uarrays(dtype), label="x")
    agree(getattr(lax, name), x, transposed=data.draw(st.booleans()))


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@pytest.mark.parametrize("name", BINARY)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_binary(name, dtype, data):
    x = data.draw(uarrays(dtype), label="x")
    y = data.draw(uarrays(dtype, x.shape), label="y")
    agree(getattr(lax, name), x, y, transposed=data.draw(st.booleans()))


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_select_and_clamp(dtype, data):
    x = data.draw(uarrays(dtype), label="x")
    lo, hi = (data.draw(uarrays(dtype, x.shape)) for _ in range(2))
    pred = data.draw(hnp.arrays(np.bool_, x.shape), label="pred")
    agree(lax.select, pred, x, lo)
    agree(lax.clamp, np.minimum(lo, hi), x, np.maximum(lo, hi))
    agree(lax.clamp, hi, x, lo)  # lo > hi: min(max(x, lo), hi)


def test_pow_with_exponents_past_the_sign_bit():
    """uint64 exponents >= 2**63: odd bases cycle (mod 2**64), even ones give 0."""
    base = np.array([3, 2, 1, 0, 2**64 - 1, 12345678901], np.uint64)
    for e in (2**63, 2**63 + 1, 2**64 - 1, 2**62 + 5):
        agree(lax.pow, base, np.full(base.shape, e, np.uint64))


# ---- conversion ----------------------------------------------------------------------

OTHERS = [d for d in D.ALL_DTYPES if d is not D.bfloat16]


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@pytest.mark.parametrize("target", OTHERS, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_convert_from_unsigned(dtype, target, data):
    """To every dtype, floats rounded once (uint64 >= 2**63 included) as NumPy's C casts."""
    x = data.draw(uarrays(dtype), label="x")
    agree(lambda t: lax.convert(t, new_dtype=target), x, transposed=data.draw(st.booleans()))


def _sources(source: D.DType, target: D.DType) -> st.SearchStrategy:
    """Values of `source` whose conversion to `target` C defines (floats in range)."""
    if source.kind in "iub":
        return hnp.from_dtype(source.numpy)
    with np.errstate(over="ignore"):
        bound = np.asarray(2.0**target.bits).astype(source.numpy)  # inf for float16's 2**32
    top = float(np.nextafter(bound, np.zeros((), source.numpy)))  # the largest below it
    return hnp.from_dtype(source.numpy, min_value=0.0, max_value=top, allow_nan=False,
                          allow_infinity=False, allow_subnormal=False)


@pytest.mark.parametrize("target", UNSIGNED, ids=str)
@pytest.mark.parametrize("source", OTHERS, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_convert_to_unsigned(source, target, data):
    """From every dtype: integers wrap; floats (>= 2**63 for uint64) truncate."""
    if source.kind == "c":
        parts = data.draw(hnp.arrays(D.real_of(source).numpy, (2, 3), elements=_sources(
            D.real_of(source), target)))
        x = (parts[0] + 1j * parts[1]).astype(source.numpy)
    elif source in UNSIGNED:
        x = data.draw(uarrays(source, (2, 3)))
    else:
        x = data.draw(hnp.arrays(source.numpy, (2, 3), elements=_sources(source, target)))
    agree(lambda t: lax.convert(t, new_dtype=target), x)


def test_uint64_to_float_rounds_once():
    """2**63 + 2**11 + 1 and friends: halving with a sticky bit keeps the one rounding."""
    x = np.array([2**63, 2**63 + 1, 2**63 + 2**10, 2**63 + 2**11 + 1, 2**63 + 2**40 + 1,
                  2**64 - 1, 2**64 - 2**11, 2**64 - 2**10 - 1, 2**53 + 1, 2**24 + 1], np.uint64)
    for target in (D.float16, D.float32, D.float64, D.complex64, D.complex128):
        got = agree(lambda t, target=target: lax.convert(t, new_dtype=target), x)
        with np.errstate(over="ignore"):  # float16: inf
            np.testing.assert_array_equal(got, x.astype(target.numpy))


@pytest.mark.parametrize("dtype", [D.uint16, D.uint32, D.uint64], ids=str)
def test_bitcast(dtype):
    """To and from the signed and float dtypes of the same width."""
    x = np.array(edges(dtype), dtype.numpy)
    for other in D.ALL_DTYPES:
        if other.bits == dtype.bits and other.kind in "iuf" and other is not D.bfloat16:
            back = agree(lambda t, o=other: lax.bitcast_convert(t, new_dtype=o), x)
            agree(lambda t: lax.bitcast_convert(t, new_dtype=dtype), back)


# ---- structural ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_layout_and_data_movement(dtype, data):
    x = data.draw(uarrays(dtype, hnp.array_shapes(min_dims=2, max_dims=2, max_side=4)), label="x")
    n, m = x.shape
    tr = data.draw(st.booleans())
    agree(lambda t: lax.reshape(t, new_sizes=(n * m,)), x, transposed=tr)  # a copy when strided
    agree(lambda t: lax.transpose(t, permutation=(1, 0)), x, transposed=tr)
    agree(lambda t: lax.broadcast_in_dim(t, shape=(2, n, m), broadcast_dimensions=(1, 2)), x,
          transposed=tr)
    agree(lambda t: lax.slice(t, start_indices=(0, 0), limit_indices=(n, m), strides=(2, 1)), x,
          transposed=tr)
    agree(lambda t: lax.reverse(t, dimensions=(0, 1)), x, transposed=tr)
    agree(lambda a, b: lax.concatenate(a, b, dimension=1), x, x[:, ::-1].copy(), transposed=tr)
    pad = data.draw(uarrays(dtype, ()), label="pad value")
    agree(lambda t, v: lax.pad(t, v, padding_config=((1, -1, 1), (0, 2, 0))), x, pad,
          transposed=tr)


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_dynamic_slices_with_unsigned_starts(dtype, data):
    """Starts of every unsigned dtype (2**63 and more for uint64) clamp into range."""
    x = data.draw(uarrays(dtype, (4, 5)), label="x")
    s0, s1 = (data.draw(uarrays(dtype, ()), label="start") for _ in range(2))
    agree(lambda t, a, b: lax.dynamic_slice(t, a, b, slice_sizes=(2, 3)), x, s0, s1)
    upd = data.draw(uarrays(dtype, (2, 3)), label="update")
    agree(lambda t, u, a, b: lax.dynamic_update_slice(t, u, a, b), x, upd, s0, s1)


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_gather_scatter(dtype, data):
    """Operands and index tensors of the dtype; out-of-range indices (2**63 and more
    included) clamp for gather and are dropped by scatter, as on numpy:cpu."""
    x = data.draw(uarrays(dtype, (4, 3)), label="x")
    idx = data.draw(hnp.arrays(dtype.numpy, (5, 1), elements=st.one_of(
        st.integers(0, 3), st.sampled_from(edges(dtype)))), label="indices")
    agree(lambda t, i: lax.gather(t, i, axes=(0,)), x, idx)
    upd = data.draw(uarrays(dtype, (5, 3)), label="updates")
    agree(lambda t, i, u: lax.scatter_add(t, i, u, axes=(0,)), x, idx, upd)
    unique = np.array([[3], [0], [2 ** (dtype.bits - 1)]], dtype.numpy)  # no duplicate wins
    agree(lambda t, i, u: lax.scatter(t, i, u, axes=(0,)), x, unique, upd[:3])


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_creation(dtype):
    top = (1 << dtype.bits) - 1
    for device in (NUMPY, TORCH):
        dev = xp.asarray(0, device=device).device
        it = lax.iota(dtype=dtype, shape=(2, 70000), dimension=1, device=dev)  # wraps for uint16
        np.testing.assert_array_equal(it.numpy()[1], np.arange(70000).astype(dtype.numpy))
        for v in (0, top, top // 2 + 1, -1, 2.0**(dtype.bits - 1), True):
            got = lax.full(shape=(3,), fill_value=v, dtype=dtype, device=dev).numpy()
            assert got.dtype == dtype.numpy and got.tolist() == [int(v) % (top + 1)] * 3


# ---- reductions, scans, sorting, contractions ------------------------------------------


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_reductions(dtype, data):
    x = data.draw(uarrays(dtype, hnp.array_shapes(min_dims=2, max_dims=2, max_side=5)), label="x")
    tr = data.draw(st.booleans())
    axes = data.draw(st.sampled_from([(0,), (1,), (0, 1), ()]), label="axes")
    for name in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min"):
        agree(lambda t, name=name: getattr(lax, name)(t, axes=axes), x, transposed=tr)
    axis = data.draw(st.integers(0, 1), label="axis")
    index = data.draw(st.sampled_from([D.int64, D.int32, D.uint32, D.uint64, D.uint16]))
    for name in ("argmax", "argmin"):
        agree(lambda t, name=name: getattr(lax, name)(t, axis=axis, index_dtype=index), x,
              transposed=tr)
    reverse = data.draw(st.booleans())
    agree(lambda t: lax.cumsum(t, axis=axis, reverse=reverse), x, transposed=tr)


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_sort_argsort(dtype, data):
    """Unsigned order (values >= 2**(bits - 1) last), ties stable, both directions."""
    x = data.draw(hnp.arrays(dtype.numpy, hnp.array_shapes(min_dims=1, max_dims=2, max_side=6),
                             elements=st.sampled_from(edges(dtype)[-6:] + [0, 1, 5])), label="x")
    axis = data.draw(st.integers(0, x.ndim - 1))
    descending = data.draw(st.booleans())
    agree(lambda t: lax.sort(t, dimension=axis, descending=descending), x)
    agree(lambda t: lax.argsort(t, dimension=axis, descending=descending, index_dtype=D.uint32), x)


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_dot_general(dtype, data):
    """Products and sums wrap mod 2**bits."""
    a = data.draw(uarrays(dtype, (2, 3, 4)), label="a")
    b = data.draw(uarrays(dtype, (2, 4, 5)), label="b")
    agree(lambda s, t: lax.dot_general(s, t, contracting_dims=((2,), (1,)), batch_dims=((0,), (0,))),
          a, b)
    agree(lambda s, t: lax.dot_general(s, t, contracting_dims=((1,), (0,)), batch_dims=((), ())),
          a[0], b[0])


# ---- the namespace: uint8 reductions, copysign, generic code ------------------------------


@settings(max_examples=EXAMPLES)
@given(x=hnp.arrays(np.uint8, hnp.array_shapes(min_dims=1, max_dims=2, max_side=6)))
def test_uint8_reductions_accumulate_in_uint64(x):
    for fn, ref in ((xp.sum, np.sum), (xp.prod, np.prod)):
        got = agree(fn, x)
        assert got.dtype == np.uint64
        np.testing.assert_array_equal(got, ref(x, dtype=np.uint64))
    agree(lambda t: xp.cumulative_sum(t, axis=0), x)
    agree(lambda t: xp.cumulative_prod(t, axis=0), x)


@pytest.mark.parametrize("dtype", [D.float16, D.float32, D.float64], ids=str)
def test_copysign_every_float(dtype):
    """copysign bit-casts through the unsigned integer of the float's width."""
    v = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan, 65504.0], dtype.numpy)
    a, b = np.meshgrid(v, v)
    got = agree(xp.copysign, a, b)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(b))
    np.testing.assert_array_equal(np.abs(got), np.abs(a))


def test_copysign_bfloat16():
    a = np.array([1.5, -2.0, 0.0, np.inf], D.bfloat16.numpy)
    b = np.array([-0.0, 3.0, -1.0, -np.inf], D.bfloat16.numpy)
    with default_device(TORCH):
        got = xp.copysign(xp.asarray(a), xp.asarray(b)).numpy().astype(np.float32)
    assert got.tolist() == [-1.5, 2.0, -0.0, -np.inf] and np.signbit(got[2])


@pytest.mark.parametrize("dtype", [D.uint16, D.uint32, D.uint64], ids=str)
def test_generic_code_on_unsigned(dtype):
    """What code written against the standard does with unsigned arrays."""
    x = np.array(edges(dtype), dtype.numpy)
    y = np.array(edges(dtype)[::-1], dtype.numpy)
    for fn in (xp.floor_divide, xp.remainder, xp.bitwise_right_shift, xp.bitwise_left_shift,
               xp.maximum, xp.less, xp.subtract, xp.multiply, xp.pow):
        agree(fn, x, y % dtype.bits if "shift" in fn.__name__ else y)
    for fn in (xp.max, xp.min, xp.argmax, xp.argmin, xp.sort, xp.argsort, xp.flip, xp.unique_values,
               xp.cumulative_sum, xp.negative, xp.abs, xp.sign, lambda t: t[::-1] + 1,
               lambda t: xp.astype(t, xp.float64), lambda t: xp.astype(t, xp.float32),
               lambda t: xp.where(t > 2 ** (dtype.bits - 1), t, t // 3)):
        agree(fn, x)


# ---- transfer --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [D.uint16, D.uint32, D.uint64], ids=str)
def test_host_and_dlpack_round_trips(dtype):
    host = np.array(edges(dtype), dtype.numpy).reshape(-1, 1)
    t = xp.asarray(host, device=TORCH)
    assert t.dtype is dtype and t._buf.dtype is getattr(torch, dtype.name)
    assert t.device.backend.describe(t._buf) == (host.shape, dtype)
    np.testing.assert_array_equal(t.numpy(), host)
    np.testing.assert_array_equal(np.from_dlpack(t), host)  # export
    src = torch.from_numpy(host.copy())
    shared = xp.from_dlpack(src, device=TORCH)  # import, zero-copy
    assert shared.dtype is dtype and shared._buf.data_ptr() == src.data_ptr()
    back = torch.from_dlpack(shared)
    assert back.dtype is src.dtype and torch.equal(back.view(torch.uint8), src.view(torch.uint8))
    moved = xp.asarray(host, device=NUMPY).to_device(TORCH).to_device(NUMPY)
    np.testing.assert_array_equal(moved.numpy(), host)
