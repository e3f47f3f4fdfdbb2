"""Manipulation functions against NumPy on generated inputs, in every dtype the device holds
(bfloat16 on torch:cpu)."""

from __future__ import annotations

import numpy as np
import pytest
from device_support import BF16, arrays, assert_equal, on_device
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

DTYPES = [np.dtype(n) for n in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)] + [BF16]
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)


@st.composite
def host_arrays(draw, shape=shapes, dtype=None):
    """A NumPy array, sometimes a non-contiguous view (transposed or strided)."""
    dt = draw(st.sampled_from(on_device(DTYPES))) if dtype is None else dtype
    shp = draw(shape) if isinstance(shape, st.SearchStrategy) else shape
    a = draw(arrays(dt, shp))
    layout = draw(st.sampled_from(["c", "T", "strided"]))
    if layout == "T" and a.ndim:
        a = np.ascontiguousarray(a.T).T
    elif layout == "strided" and a.ndim:
        a = np.repeat(a, 2, axis=0)[::2]
    return a


def check(t, expected):
    expected = np.asarray(expected)
    assert t.shape == expected.shape
    assert t.dtype.numpy == expected.dtype
    assert_equal(t.numpy(), expected)


@given(a=host_arrays(), data=st.data())
def test_broadcast_to(xp, a, data):
    target = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=1, base_shape=a.shape)).result_shape
    check(xp.broadcast_to(xp.asarray(a), target), np.broadcast_to(a, target))


@given(data=st.data())
def test_broadcast_arrays(xp, data):
    shps = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_side=3)).input_shapes
    arrs = [data.draw(host_arrays(shape=s)) for s in shps]
    out = xp.broadcast_arrays(*(xp.asarray(a) for a in arrs))
    assert isinstance(out, tuple) and len(out) == 3
    for t, e in zip(out, np.broadcast_arrays(*arrs)):
        check(t, e)


def test_broadcast_errors(xp):
    x = xp.asarray(np.zeros((2, 3)))
    with pytest.raises(ShapeError):
        xp.broadcast_to(x, (3, 3))
    with pytest.raises(ShapeError):
        xp.broadcast_to(x, (3,))
    with pytest.raises(ShapeError):
        xp.broadcast_arrays(x, xp.asarray(np.zeros(4)))
    with pytest.raises(ArgumentError):
        xp.broadcast_to(np.zeros(3), (3,))
    assert xp.broadcast_arrays() == ()


@given(data=st.data(), n=st.integers(1, 3))
def test_concat(xp, data, n):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3))
    dt = data.draw(st.sampled_from(on_device(DTYPES)))
    ax = data.draw(st.integers(-len(shape), len(shape) - 1))
    arrs = []
    for _ in range(n):
        s = list(shape)
        s[ax] = data.draw(st.integers(0, 3))
        arrs.append(data.draw(host_arrays(shape=tuple(s), dtype=dt)))
    check(xp.concat([xp.asarray(a) for a in arrs], axis=ax), np.concatenate(arrs, axis=ax))
    check(xp.concat(tuple(xp.asarray(a) for a in arrs), axis=None), np.concatenate(arrs, axis=None))


def test_concat_promotes_and_errors(xp):
    a = xp.asarray(np.ones(2, np.int8))
    b = xp.asarray(np.ones(3, np.float32))
    check(xp.concat([a, b]), np.ones(5, np.float32))
    check(xp.concat([a, xp.asarray(np.ones(1, np.uint8))]), np.ones(3, np.int16))
    with pytest.raises(ShapeError):
        xp.concat([a, xp.asarray(np.ones((1, 2)))])
    with pytest.raises(ShapeError):
        xp.concat([xp.asarray(np.ones((2, 2))), xp.asarray(np.ones((3, 3)))], axis=0)
    with pytest.raises(AxisError):
        xp.concat([a, a], axis=1)
    with pytest.raises(ShapeError):
        xp.concat([xp.asarray(1.0), xp.asarray(2.0)])
    with pytest.raises(ShapeError):
        xp.concat([])
    with pytest.raises(ArgumentError):
        xp.concat(a)
    with pytest.raises(DTypeError):
        xp.concat([xp.asarray(np.ones(1, np.uint64)), a])


@given(data=st.data(), n=st.integers(1, 3))
def test_stack_unstack(xp, data, n):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    dt = data.draw(st.sampled_from(on_device(DTYPES)))
    arrs = [data.draw(host_arrays(shape=shape, dtype=dt)) for _ in range(n)]
    ax = data.draw(st.integers(-len(shape) - 1, len(shape)))
    stacked = xp.stack([xp.asarray(a) for a in arrs], axis=ax)
    check(stacked, np.stack(arrs, axis=ax))
    parts = xp.unstack(stacked, axis=ax)
    assert isinstance(parts, tuple) and len(parts) == n
    for p, a in zip(parts, arrs):
        check(p, a)


def test_stack_unstack_errors(xp):
    a = xp.asarray(np.ones((2, 3)))
    with pytest.raises(ShapeError):
        xp.stack([a, xp.asarray(np.ones((3, 2)))])
    with pytest.raises(AxisError):
        xp.stack([a, a], axis=3)
    with pytest.raises(AxisError):
        xp.unstack(a, axis=2)
    with pytest.raises(AxisError):
        xp.unstack(xp.asarray(1.0))
    assert xp.unstack(xp.asarray(np.ones((0, 2)))) == ()


@given(a=host_arrays(), data=st.data())
def test_expand_dims(xp, a, data):
    k = data.draw(st.integers(1, 3))
    m = a.ndim + k
    pos = data.draw(st.lists(st.integers(0, m - 1), min_size=k, max_size=k, unique=True))
    axes = tuple(p - m if data.draw(st.booleans()) else p for p in pos)
    check(xp.expand_dims(xp.asarray(a), axis=axes), np.expand_dims(a, axes))
    ax = data.draw(st.integers(-a.ndim - 1, a.ndim))
    check(xp.expand_dims(xp.asarray(a), axis=ax), np.expand_dims(a, ax))


def test_expand_dims_errors(xp):
    x = xp.asarray(np.ones((2, 3)))
    for bad in (3, -4, (0, 4), (1, -3)):
        with pytest.raises(AxisError):
            xp.expand_dims(x, axis=bad)
    with pytest.raises(ArgumentError):
        xp.expand_dims(x, axis=1.5)
    assert xp.expand_dims(x).shape == (1, 2, 3)
    assert xp.expand_dims(x, 2).shape == (2, 3, 1)


@given(a=host_arrays(shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=2)),
       data=st.data())
def test_squeeze(xp, a, data):
    ones = [i for i, n in enumerate(a.shape) if n == 1]
    axes = tuple(data.draw(st.lists(st.sampled_from(ones), unique=True))) if ones else ()
    axes = tuple(i - a.ndim if data.draw(st.booleans()) else i for i in axes)
    check(xp.squeeze(xp.asarray(a), axes), np.squeeze(a, axes))
    if len(axes) == 1:
        check(xp.squeeze(xp.asarray(a), axis=axes[0]), np.squeeze(a, axes[0]))
    others = [i for i, n in enumerate(a.shape) if n != 1]
    if others:
        with pytest.raises(ShapeError):
            xp.squeeze(xp.asarray(a), others[0])


def test_squeeze_errors(xp):
    x = xp.asarray(np.ones((1, 3)))
    with pytest.raises(AxisError):
        xp.squeeze(x, 2)
    with pytest.raises(AxisError):
        xp.squeeze(x, (0, -2))


@st.composite
def reshape_targets(draw, shape):
    dims = list(shape)
    dims = draw(st.permutations(dims))
    out = []
    for d in dims:  # merge neighbours at random and sprinkle size-1 axes
        if out and draw(st.booleans()):
            out[-1] *= d
        else:
            out.append(d)
        if draw(st.integers(0, 4)) == 0:
            out.append(1)
    if out and np.prod(out) and draw(st.booleans()):
        out[draw(st.integers(0, len(out) - 1))] = -1
    return tuple(out)


@given(a=host_arrays(), data=st.data())
def test_reshape(xp, a, data):
    target = data.draw(reshape_targets(a.shape))
    copy = data.draw(st.sampled_from([None, True, False]))
    x = xp.asarray(a)
    r = xp.reshape(x, target, copy=copy)
    check(r, np.reshape(a, target))
    if copy:
        assert r._buf is not x._buf


def test_reshape_errors(xp):
    x = xp.asarray(np.ones((2, 3)))
    for bad in ((4, 2), (-1, -1), (-2, 3), (5, -1)):
        with pytest.raises(ShapeError):
            xp.reshape(x, bad)
    with pytest.raises(ShapeError):
        xp.reshape(xp.asarray(np.ones((0, 3))), (0, -1))
    with pytest.raises(ArgumentError):
        xp.reshape(x, (2.0, 3))
    assert xp.reshape(x, 6).shape == (6,)
    assert xp.reshape(xp.asarray(np.ones(1)), ()).shape == ()


@given(a=host_arrays(), data=st.data())
def test_permute_dims_and_moveaxis(xp, a, data):
    perm = data.draw(st.permutations(range(a.ndim)))
    perm = tuple(p - a.ndim if data.draw(st.booleans()) else p for p in perm)
    x = xp.asarray(a)
    check(xp.permute_dims(x, perm), np.transpose(a, perm))
    k = data.draw(st.integers(0, a.ndim))
    src = data.draw(st.lists(st.integers(0, a.ndim - 1), min_size=k, max_size=k, unique=True)) if k else []
    dst = data.draw(st.lists(st.integers(-a.ndim, -1), min_size=k, max_size=k,
                             unique=True)) if k else []
    check(xp.moveaxis(x, tuple(src), tuple(dst)), np.moveaxis(a, src, dst))
    if k == 1:
        check(xp.moveaxis(x, src[0], dst[0]), np.moveaxis(a, src[0], dst[0]))
    if a.ndim == 2:
        check(x.T, a.T)


def test_permute_dims_errors(xp):
    x = xp.asarray(np.ones((2, 3, 4)))
    with pytest.raises(AxisError):
        xp.permute_dims(x, (0, 1))
    with pytest.raises(AxisError):
        xp.permute_dims(x, (0, 1, 1))
    with pytest.raises(AxisError):
        xp.permute_dims(x, (0, 1, 3))
    with pytest.raises(AxisError):
        xp.moveaxis(x, (0, 1), 2)
    with pytest.raises(AxisError):
        xp.moveaxis(x, 0, 3)
    with pytest.raises(AxisError):
        xp.moveaxis(x, (0, 0), (1, 2))
    with pytest.raises(ShapeError):
        _ = x.T


@given(a=host_arrays(), data=st.data())
def test_flip(xp, a, data):
    x = xp.asarray(a)
    check(xp.flip(x), np.flip(a))
    if a.ndim:
        axes = data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=1, max_size=a.ndim,
                                  unique_by=lambda i: i % a.ndim))
        check(xp.flip(x, axis=tuple(axes)), np.flip(a, tuple(axes)))
        check(xp.flip(x, axis=axes[0]), np.flip(a, axes[0]))


@given(a=host_arrays(), data=st.data())
def test_roll(xp, a, data):
    x = xp.asarray(a)
    s = data.draw(st.integers(-7, 7))
    check(xp.roll(x, s), np.roll(a, s))
    if a.ndim:
        k = data.draw(st.integers(1, 3))
        axes = tuple(data.draw(st.lists(st.integers(-a.ndim, a.ndim - 1), min_size=k, max_size=k)))
        shifts = tuple(data.draw(st.lists(st.integers(-7, 7), min_size=k, max_size=k)))
        check(xp.roll(x, shifts, axis=axes), np.roll(a, shifts, axis=axes))
        check(xp.roll(x, s, axis=axes), np.roll(a, s, axis=axes))
        check(xp.roll(x, s, axis=axes[0]), np.roll(a, s, axis=axes[0]))


def test_roll_errors(xp):
    x = xp.asarray(np.ones((2, 3)))
    with pytest.raises(AxisError):
        xp.roll(x, 1, axis=2)
    with pytest.raises(ArgumentError):
        xp.roll(x, (1, 2), axis=0)
    with pytest.raises(ArgumentError):
        xp.roll(x, (1, 2))


@given(a=host_arrays(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)),
       reps=st.lists(st.integers(0, 3), max_size=4))
def test_tile(xp, a, reps):
    check(xp.tile(xp.asarray(a), tuple(reps)), np.tile(a, tuple(reps)))


@given(a=host_arrays(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3)),
       data=st.data())
def test_repeat(xp, a, data):
    x = xp.asarray(a)
    r = data.draw(st.integers(0, 3))
    check(xp.repeat(x, r), np.repeat(a, r))
    if a.ndim:
        ax = data.draw(st.integers(-a.ndim, a.ndim - 1))
        check(xp.repeat(x, r, axis=ax), np.repeat(a, r, axis=ax))
        n = a.shape[ax]
        counts = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32)
        check(xp.repeat(x, xp.asarray(counts), axis=ax), np.repeat(a, counts, axis=ax))
        one = np.array([r], np.uint8)
        check(xp.repeat(x, xp.asarray(one), axis=ax), np.repeat(a, one, axis=ax))
    counts = np.array(data.draw(st.lists(st.integers(0, 2), min_size=a.size, max_size=a.size)), np.int64)
    check(xp.repeat(x, xp.asarray(counts)), np.repeat(a, counts))


def test_repeat_and_tile_errors(xp):
    x = xp.asarray(np.arange(3))
    with pytest.raises(ShapeError):
        xp.repeat(x, -1)
    with pytest.raises(ShapeError):
        xp.repeat(x, xp.asarray([1, -1, 1]))
    with pytest.raises(ShapeError):
        xp.repeat(x, xp.asarray([1, 2]))
    with pytest.raises(DTypeError):
        xp.repeat(x, xp.asarray([1.0, 2.0, 1.0]))
    with pytest.raises(AxisError):
        xp.repeat(x, 2, axis=1)
    with pytest.raises(ArgumentError):
        xp.repeat(x, (1, 2, 3))
    with pytest.raises(ShapeError):
        xp.tile(x, (2, -1))


def test_results_are_new_objects(xp):
    """Rebinding x (x[...] = v) must not leak into results that shared its buffer."""
    x = xp.asarray(np.arange(6.0).reshape(2, 3))
    outs = [xp.reshape(x, (2, 3)), xp.broadcast_to(x, (2, 3)), xp.squeeze(x, ()),
            xp.flip(x, axis=()), xp.permute_dims(x, (0, 1)), xp.roll(x, 0),
            xp.concat([x]), xp.moveaxis(x, 0, 0)]
    x[0, 0] = 100.0
    for o in outs:
        assert o.numpy()[0, 0] == 0.0


def test_non_tensor_inputs(xp):
    for fn, args in ((xp.flip, ()), (xp.reshape, ((3,),)), (xp.squeeze, (0,)),
                     (xp.permute_dims, ((0,),)), (xp.tile, ((2,),)), (xp.repeat, (2,)),
                     (xp.roll, (1,)), (xp.expand_dims, ()), (xp.unstack, ())):
        with pytest.raises(ArgumentError):
            fn([1, 2, 3], *args)
