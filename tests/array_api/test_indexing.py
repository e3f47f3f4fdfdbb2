"""__getitem__ / __setitem__, take, take_along_axis and nonzero against NumPy, in every dtype
the device holds (bfloat16 on torch:cpu)."""

from __future__ import annotations

import numpy as np
import pytest
from device_support import BF16, arrays, assert_equal, on_device
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tenferro_core.errors import (
    ArgumentError,
    AxisError,
    DTypeError,
    ShapeError,
    TenferroError,
    TenferroIndexError,
)

DTYPES = [np.dtype(n) for n in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)] + [BF16]
INDEX_DTYPES = [np.dtype(n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint64")]


def check(t, expected):
    expected = np.asarray(expected)
    assert t.shape == expected.shape
    assert t.dtype.numpy == expected.dtype
    assert_equal(t.numpy(), expected)


@st.composite
def host_arrays(draw, max_dims=4):
    dt = draw(st.sampled_from(on_device(DTYPES)))
    nd = draw(st.sampled_from([2, 1, 3, 0, 4][:max_dims + 1]))
    lo = draw(st.sampled_from([1, 1, 0]))
    a = draw(arrays(dt, hnp.array_shapes(min_dims=nd, max_dims=nd, min_side=lo, max_side=4)))
    if a.ndim >= 2 and draw(st.booleans()):
        a = np.ascontiguousarray(a.T).T
    return a


@st.composite
def index_arrays(draw, xp, shape, n):
    """Integer indices in [-n, n) of a shape broadcastable to `shape`, as tensor, list or ndarray."""
    k = draw(st.integers(0, len(shape)))
    s = tuple(1 if draw(st.booleans()) else d for d in shape[len(shape) - k:])
    dt = draw(st.sampled_from(INDEX_DTYPES))
    lo = 0 if dt.kind == "u" else -n
    idx = draw(hnp.arrays(dt, s, elements=st.integers(lo, n - 1)))
    form = draw(st.sampled_from(["tensor", "tensor", "list", "ndarray"]))
    if form == "list" and idx.ndim:
        return idx.tolist(), idx
    if form == "ndarray":
        return idx, idx
    return xp.asarray(idx), idx


@st.composite
def keys(draw, xp, shape):
    """A random valid index expression for `shape`: (key for tenferro, key for NumPy)."""
    ishape = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    tf, npk = [], []
    dim, ellipsis, arrays, mask, nones = 0, False, False, False, 0
    while True:
        left = len(shape) - dim
        if left == 0 and not draw(st.booleans()):
            break
        c = draw(st.sampled_from(["array", "slice", "int", "mask", "array", "none", "ellipsis", "stop"]))
        n = shape[dim] if left else 0
        if c == "stop":
            break
        if (c == "none" and nones == 2) or (c == "ellipsis" and ellipsis) or (
                c in ("int", "array") and n == 0) or (c == "array" and mask) or (
                c == "mask" and (mask or arrays)) or (left == 0 and c != "ellipsis"):
            c = "slice" if left else "none" if nones < 2 else "stop"
        if c == "stop":
            break
        if c == "none":
            nones += 1
            tf.append(None)
            npk.append(None)
        elif c == "ellipsis":
            ellipsis = True
            dim += draw(st.integers(0, left))
            tf.append(Ellipsis)
            npk.append(Ellipsis)
        elif c == "int":
            i = draw(st.integers(-n, n - 1))
            form = draw(st.sampled_from(["int", "np", "tensor"]))
            tf.append(i if form == "int" else np.int64(i) if form == "np" else xp.asarray(i))
            npk.append(i)
            dim += 1
        elif c == "slice":
            bound = st.none() | st.integers(-n - 2, n + 2)
            s = slice(draw(bound), draw(bound), draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3])))
            tf.append(s)
            npk.append(s)
            dim += 1
        elif c == "array":
            arrays = True
            t, h = draw(index_arrays(xp, ishape, n))
            tf.append(t)
            npk.append(h)
            dim += 1
        else:
            mask = True
            k = draw(st.integers(0, min(left, 2)))
            # the standard lets a mask axis be 0 whatever the indexed axis' size (selects nothing)
            mshape = tuple(0 if draw(st.integers(0, 5)) == 0 else n for n in shape[dim:dim + k])
            m = draw(hnp.arrays(np.bool_, mshape))
            if k == 0:
                tf.append(bool(m) if draw(st.booleans()) else xp.asarray(m))
            else:
                tf.append(m.tolist() if m.size and draw(st.booleans()) else xp.asarray(m))
            npk.append(m)
            dim += k
    if ellipsis:  # the ellipsis stands for exactly the axes skipped above
        tf.extend([slice(None)] * (len(shape) - dim))
        npk.extend([slice(None)] * (len(shape) - dim))
    if len(tf) == 1 and draw(st.booleans()) and not isinstance(tf[0], list):
        return tf[0], npk[0]
    return tuple(tf), tuple(npk)


@given(a=host_arrays(), data=st.data())
def test_getitem_matches_numpy(xp, a, data):
    tk, nk = data.draw(keys(xp, a.shape))
    x = xp.asarray(a)
    check(x[tk], a[nk])
    check(x, a)  # indexing never changes x


def _unique_targets(a, nk) -> bool:
    pos = np.arange(a.size).reshape(a.shape)[nk]
    return np.unique(pos).size == np.size(pos)


@given(a=host_arrays(), data=st.data())
def test_setitem_matches_numpy(xp, a, data):
    tk, nk = data.draw(keys(xp, a.shape))
    target = a[nk].shape
    if _unique_targets(a, nk) and data.draw(st.booleans()):
        vshape = data.draw(hnp.broadcastable_shapes(target, min_side=0))
        vshape = vshape if np.broadcast_shapes(vshape, target) == target else target
    else:  # repeated targets: one value for all (the winner is unspecified)
        vshape = ()
    v = data.draw(arrays(a.dtype, vshape))
    form = data.draw(st.sampled_from(["tensor", "scalar"])) if v.ndim == 0 else "tensor"
    value = v.item() if form == "scalar" else xp.asarray(v)
    expected = a.copy()
    expected[nk] = v
    x = xp.asarray(a)
    x[tk] = value
    check(x, expected)


def test_advanced_index_placement(xp):
    a = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    x = xp.asarray(a)
    for k in [(slice(None), 0, slice(None), [1, 2]), (slice(None), [0, 1, 2], None, [0, 1, 2]),
              (slice(None), [0, 1, 2], Ellipsis, [0, 1, 2], slice(None)), ([0, 1], None, [0, 1]),
              (0, Ellipsis, [0, 1]), (slice(None), [[0], [2]], [1, 3]), (True, [0, 1]),
              ([0, 1], True, [0, 1]), (0, True)]:
        check(x[k], a[k])
    m = a[0, :, :, 0] % 3 == 0
    check(x[:, xp.asarray(m)], a[:, m])
    check(x[:, xp.asarray(m), 1], a[:, m, 1])


def test_setitem_values_along_advanced_axes(xp):
    a = np.zeros((3, 4, 5))
    k = (slice(1, None), [[0], [2]], [4, 1, 0])
    v = np.arange(2 * 2 * 3, dtype=float).reshape(2, 2, 3)
    e = a.copy()
    e[k] = v
    x = xp.asarray(a)
    x[k] = xp.asarray(v)
    check(x, e)
    x = xp.asarray(a)
    m = np.arange(12).reshape(3, 4) % 5 == 1
    x[xp.asarray(m)] = xp.asarray(np.arange(m.sum() * 5.0).reshape(-1, 5))
    e = a.copy()
    e[m] = np.arange(m.sum() * 5.0).reshape(-1, 5)
    check(x, e)
    x[xp.asarray(m), ...] = xp.asarray(np.arange(5.0))
    e[m, ...] = np.arange(5.0)
    check(x, e)
    x[xp.asarray(True)] = 7.0
    check(x, np.full((3, 4, 5), 7.0))


def test_zero_d_tensor_indices(xp):
    a = np.arange(12).reshape(3, 4)
    x = xp.asarray(a)
    i = xp.asarray(np.int32(2))
    check(x[i], a[2])
    check(x[i:], a[2:])
    check(x[:, i], a[:, 2])
    check(x[xp.asarray(-1), xp.asarray(np.uint8(1))], a[-1, 1])
    x[i, 0] = -5
    e = a.copy()
    e[2, 0] = -5
    check(x, e)


@pytest.mark.parametrize("key", [
    3, -4, (0, 4), (slice(None), -5), [0, 3], [[0], [-4]], (Ellipsis, [4]), "np-out", "tensor-out",
])
def test_out_of_range_raises_and_leaves_x(xp, key):
    a = np.arange(12.0).reshape(3, 4)
    x = xp.asarray(a)
    if key == "np-out":
        key = np.array([0, 5])
    elif key == "tensor-out":
        key = (slice(None), xp.asarray(np.array([1, -5], np.int8)))
    with pytest.raises(TenferroIndexError):
        x[key]
    with pytest.raises(TenferroIndexError):
        x[key] = 1.0
    check(x, a)


@pytest.mark.parametrize("key", [
    1.0, "a", (0, 0, 0), (Ellipsis, 0, Ellipsis), [0.5], (slice(0.5, None),), slice(None, None, 0),
    "float-tensor", "mask-shape", [[0, 1], [2]], object(), ([0, 1], [0, 1, 2]),
])
def test_bad_keys(xp, key):
    a = np.arange(12).reshape(3, 4)
    x = xp.asarray(a)
    if key == "float-tensor":
        key = xp.asarray(np.array([0.0]))
    elif key == "mask-shape":
        key = xp.asarray(np.ones((4,), bool))
    with pytest.raises(TenferroIndexError):
        x[key]
    with pytest.raises(TenferroIndexError):
        x[key] = 0
    check(x, a)


def test_setitem_value_rules(xp):
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    x = xp.asarray(a)
    bad = [(0, 1.5, DTypeError), (0, xp.asarray(np.ones(3, np.int32)), DTypeError),
           (0, xp.asarray(np.ones(3, np.float32)), DTypeError), (0, 1j, DTypeError),
           (0, 40000, DTypeError), (0, xp.asarray(np.ones(4, np.int16)), ShapeError),
           (slice(None), xp.asarray(np.ones((3, 3), np.int16)), ShapeError),
           (xp.asarray(np.ones((2, 3), bool)), xp.asarray(np.ones(2, np.int16)), ShapeError),
           (0, [1.5, 2.0, 3.0], DTypeError), (0, {1}, ArgumentError)]
    for key, value, err in bad:
        with pytest.raises(err):
            x[key] = value
        check(x, a)
    x[0] = xp.asarray(np.array([7, 8, 9], np.int8))  # promotion keeps int16: allowed
    x[1, ::2] = [5, 6]
    x[:, 1] = True
    x[(1, -1)] = np.int16(-2)
    x[None, 0, 0] = xp.asarray(np.ones((1, 1), np.int16))
    check(x, np.array([[1, 1, 9], [5, 1, -2]], np.int16))
    f = xp.asarray(np.zeros(3, np.float32))
    f[1:] = xp.asarray(np.array([1.5, 2.5], np.float16))
    f[0] = 2
    check(f, np.array([2.0, 1.5, 2.5], np.float32))


def test_views_are_values(xp):
    """A result of x[...] is not affected by a later x[...] = v."""
    x = xp.asarray(np.arange(4.0))
    full, part = x[...], x[1:]
    x[...] = 0.0
    x[1] = 9.0
    check(full, np.arange(4.0))
    check(part, np.arange(1.0, 4.0))


@given(a=host_arrays(max_dims=3), data=st.data())
def test_take(xp, a, data):
    if a.ndim == 0:
        with pytest.raises(AxisError):
            xp.take(xp.asarray(a), xp.asarray(np.array([0])), axis=0)
        return
    ax = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = a.shape[ax]
    ishape = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0 if n == 0 else 1, max_side=3))
    if n == 0:
        ishape = (0,)
    dt = data.draw(st.sampled_from(INDEX_DTYPES))
    idx = data.draw(hnp.arrays(dt, ishape, elements=st.integers(0 if dt.kind == "u" else -n, max(n - 1, 0))))
    check(xp.take(xp.asarray(a), xp.asarray(idx), axis=ax), np.take(a, idx, axis=ax))
    if a.ndim == 1:
        check(xp.take(xp.asarray(a), xp.asarray(idx)), np.take(a, idx))


def test_take_errors(xp):
    x = xp.asarray(np.arange(6).reshape(2, 3))
    with pytest.raises(TenferroIndexError):
        xp.take(x, xp.asarray([3]), axis=1)
    with pytest.raises(TenferroIndexError):
        xp.take(x, xp.asarray([-3]), axis=0)
    with pytest.raises(DTypeError):
        xp.take(x, xp.asarray([0.0]), axis=0)
    with pytest.raises(ArgumentError):
        xp.take(x, xp.asarray([0]))
    with pytest.raises(AxisError):
        xp.take(x, xp.asarray([0]), axis=2)
    with pytest.raises(ArgumentError):
        xp.take(x, [0], axis=0)


@given(a=host_arrays(max_dims=3), data=st.data())
def test_take_along_axis(xp, a, data):
    if a.ndim == 0:
        with pytest.raises(AxisError):
            xp.take_along_axis(xp.asarray(a), xp.asarray(np.array(0)))
        return
    ax = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = a.shape[ax]
    base = list(data.draw(hnp.broadcastable_shapes(a.shape, min_dims=a.ndim, max_dims=a.ndim, min_side=0)))
    base[ax] = data.draw(st.integers(1, 3)) if n else 0
    idx = data.draw(hnp.arrays(np.int64, tuple(base), elements=st.integers(-n, max(n - 1, 0))))
    expected = np.take_along_axis(a, idx, axis=ax)
    check(xp.take_along_axis(xp.asarray(a), xp.asarray(idx), axis=ax), expected)


def test_take_along_axis_errors(xp):
    x = xp.asarray(np.arange(6).reshape(2, 3))
    with pytest.raises(ShapeError):
        xp.take_along_axis(x, xp.asarray([0]))
    with pytest.raises(TenferroIndexError):
        xp.take_along_axis(x, xp.asarray([[3]]))
    with pytest.raises(ShapeError):
        xp.take_along_axis(x, xp.asarray(np.zeros((3, 1), np.int64)))
    with pytest.raises(DTypeError):
        xp.take_along_axis(x, xp.asarray([[True]]))


@given(a=host_arrays())
def test_nonzero(xp, a):
    if a.ndim == 0:
        with pytest.raises(ShapeError):
            xp.nonzero(xp.asarray(a))
        return
    out = xp.nonzero(xp.asarray(a))
    expected = np.nonzero(a)
    assert isinstance(out, tuple) and len(out) == len(expected)
    for t, e in zip(out, expected):
        check(t, e.astype(np.int64))


def test_typed_errors_are_tenferro_errors(xp):
    x = xp.asarray(np.arange(3))
    with pytest.raises(TenferroError):
        x[5]
    with pytest.raises(IndexError):
        x[5]
    with pytest.raises(ArgumentError):
        xp.nonzero([1, 2])


def test_basic_and_mask_setitem_avoid_scatter(xp, monkeypatch):
    """Basic slices write through dynamic_update_slice or pad + select; x[mask] = s is a select."""
    from tenferro_runtime import lax

    def no_scatter(*args, **kw):
        raise AssertionError("scatter used for a basic-slice or mask setitem")

    monkeypatch.setattr(lax, "scatter", no_scatter)
    a = np.arange(60.0).reshape(3, 4, 5)
    for key, v in [((1, slice(1, 3)), 7.0), ((slice(None, None, -2), 2, slice(4, 0, -3)), -1.0),
                   ((Ellipsis, slice(1, None, 2)), np.arange(2.0)), ((None, 0, -1), 3.0),
                   (a[..., 0] > 20, np.arange(5.0)), (a > 30, 0.5)]:
        x = xp.asarray(a)
        x[xp.asarray(key) if isinstance(key, np.ndarray) else key] = (
            xp.asarray(v) if isinstance(v, np.ndarray) else v)
        e = a.copy()
        e[key] = v
        check(x, e)
