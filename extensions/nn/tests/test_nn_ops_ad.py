"""tenferro-nn's linear op and its derivative ops (relu_tangent, log_softmax_tangent and _cotangent,
nll_cotangent): the torch kernels against NumPy on generated shapes (0-size, 1-size), every
float dtype and non-contiguous operands; each transpose rule by the dot-product identity
<A t, c> = <t, A^T c>; jvp rules against finite differences to second order; batch rules;
typed errors from the shape rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from nn_ops_helpers import dtypes_of as _dtypes
from nn_ops_helpers import host as _host
from nn_ops_helpers import tensor as _tensor

from tenferro_ad import vjp
from tenferro_ad.testing import check_grads, check_vmap
from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError, ShapeError
from tenferro_nn.ops import (
    linear_p,
    log_softmax_cotangent_p,
    log_softmax_p,
    log_softmax_tangent_p,
    nll_cotangent_p,
    nll_p,
    relu_tangent_p,
)
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime

TOL = {"float16": 4e-3, "bfloat16": 3e-2, "float32": 2e-6, "float64": 1e-13}
shapes = st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple)


def _draw(data, device, shape):
    dtype = data.draw(st.sampled_from(_dtypes(device))) if data else "float32"
    axis = data.draw(st.integers(0, len(shape) - 1)) if data else len(shape) - 1
    transpose = data.draw(st.booleans()) if data else False
    return dtype, axis, transpose


@given(shape=shapes, data=st.data())
@example(shape=(0,), data=None)
@example(shape=(1,), data=None)
def test_relu_tangent_matches_numpy(backend_device, shape, data):
    dtype, _, transpose = _draw(data, backend_device, shape)
    rng = np.random.default_rng(len(shape))
    a, b = rng.normal(size=shape), rng.normal(size=shape)
    a.flat[: min(a.size, 3)] = [0.0, np.nan, -0.0][: min(a.size, 3)]
    x, t = _tensor(a, dtype, transpose), _tensor(b, dtype, transpose)
    got = relu_tangent_p.bind(x, t)
    assert got.dtype is x.dtype and got.shape == x.shape
    xv, tv = _host(x), _host(t)
    np.testing.assert_array_equal(_host(got), np.where(xv <= 0, 0.0, tv))


@given(shape=shapes, data=st.data())
@example(shape=(3, 0), data=None)
@example(shape=(1,), data=None)
def test_log_softmax_tangent_and_cotangent_match_numpy(backend_device, shape, data):
    dtype, axis, transpose = _draw(data, backend_device, shape)
    rng = np.random.default_rng(sum(shape))
    y = log_softmax_p.bind(_tensor(rng.normal(scale=3.0, size=shape), dtype, transpose), axis=axis)
    t = _tensor(rng.normal(size=shape), dtype, transpose)
    yv, tv = _host(y), _host(t)
    e = np.exp(yv)
    for op, want in ((log_softmax_tangent_p, tv - np.sum(e * tv, axis=axis, keepdims=True)),
                     (log_softmax_cotangent_p, tv - e * np.sum(tv, axis=axis, keepdims=True))):
        got = op.bind(y, t, axis=axis)
        assert got.dtype is y.dtype and got.shape == y.shape
        np.testing.assert_allclose(_host(got), want, rtol=TOL[dtype], atol=TOL[dtype] * 10)


@given(shape=st.lists(st.integers(0, 4), min_size=0, max_size=2).map(tuple), data=st.data())
@example(shape=(4,), data=None)
@example(shape=(0,), data=None)
@example(shape=(), data=None)
def test_nll_cotangent_matches_numpy(backend_device, shape, data):
    dtype = data.draw(st.sampled_from(_dtypes(backend_device))) if data else "float32"
    axis = data.draw(st.integers(0, len(shape))) if data else len(shape)
    classes = data.draw(st.integers(0, 4)) if data else 3
    tdtype = data.draw(st.sampled_from(["int64", "int32", "uint8"])) if data else "int64"
    transpose = data.draw(st.booleans()) if data else False
    rng = np.random.default_rng(sum(shape) + classes)
    ignore = 255 if tdtype == "uint8" else -100
    tgt = rng.integers(0, max(classes, 1), size=shape) if classes else np.full(shape, ignore)
    if tgt.size:
        tgt.flat[0] = ignore
    reduction = data.draw(st.sampled_from(["none", "sum", "mean"])) if data else "none"
    ct = _tensor(rng.normal(size=shape if reduction == "none" else ()), dtype, transpose)
    target = xp.asarray(np.asarray(tgt).astype(tdtype))
    got = nll_cotangent_p.bind(ct, target, classes=classes, axis=axis, ignore_index=ignore,
                               reduction=reduction)
    want_shape = shape[:axis] + (classes,) + shape[axis:]
    assert got.dtype is ct.dtype and got.shape == want_shape
    hit = np.expand_dims(tgt, axis) == np.arange(classes).reshape((classes,) + (1,) * (len(shape) - axis))
    scale = np.broadcast_to(_host(ct), shape)
    if reduction == "mean":
        scale = scale / max(np.sum(tgt != ignore), 1)  # no target counted: nothing is hit
    want = np.where(hit & np.expand_dims(tgt != ignore, axis), -np.expand_dims(scale, axis), 0.0)
    tol = 0 if reduction != "mean" else TOL[dtype]
    np.testing.assert_allclose(_host(got), want, rtol=tol, atol=tol)


def _rand(*shape, seed=0):
    return xp.asarray(np.random.default_rng(seed).normal(size=shape))


def _dot(a, b) -> float:
    return float(np.sum(a.numpy() * b.numpy()))


def test_transposes_satisfy_the_dot_product_identity(backend_device):
    """<A t, c> == <t, A^T c> for each linear map, its transpose taken by `vjp` (which runs
    the transpose rule)."""
    x, t = _rand(4, 5), _rand(4, 5, seed=1)
    y = log_softmax_p.bind(x, axis=1)
    target = xp.asarray(np.array([2, -100, 0, 4]))
    maps = [(lambda v: relu_tangent_p.bind(x, v), t),
            (lambda v: log_softmax_tangent_p.bind(y, v, axis=1), t),
            (lambda v: log_softmax_cotangent_p.bind(y, v, axis=0), t),
            (lambda v: nll_p.bind(v, target, axis=1, ignore_index=-100), t),
            (lambda v: nll_cotangent_p.bind(v, target, classes=5, axis=1, ignore_index=-100), _rand(4))]
    for r in ("sum", "mean"):
        maps += [(lambda v, r=r: nll_p.bind(v, target, axis=1, ignore_index=-100, reduction=r), t),
                 (lambda v, r=r: nll_cotangent_p.bind(v, target, classes=5, axis=1, ignore_index=-100,
                                                      reduction=r), _rand())]
    for f, v in maps:
        out, back = vjp(f, v)
        c = _rand(*out.shape, seed=2)
        (vt,) = back(c)
        assert abs(_dot(out, c) - _dot(v, vt)) <= 1e-12 * (1 + abs(_dot(out, c)))
    (ct,) = vjp(maps[1][0], t)[1](c := _rand(4, 5, seed=3))
    np.testing.assert_allclose(ct.numpy(), log_softmax_cotangent_p.bind(y, c, axis=1).numpy(), rtol=1e-14)


def test_jvp_rules_match_finite_differences_to_second_order(backend_device):
    x = _rand(3, 4)
    x = xp.where(xp.abs(x) < 0.1, x + 0.5, x)  # away from relu's kink
    t = _rand(3, 4, seed=1)
    kw = {"order": 2, "atol": 1e-6, "rtol": 1e-5}
    check_grads(relu_tangent_p.bind, (x, t), **kw)
    for axis in (0, 1):
        for op in (log_softmax_tangent_p, log_softmax_cotangent_p):
            check_grads(lambda y, v, o=op, a=axis: o.bind(log_softmax_p.bind(y, axis=a), v, axis=a),
                        (x, t), **kw)
    target = xp.asarray(np.array([3, -100, 0]))
    check_grads(lambda c: nll_cotangent_p.bind(c, target, classes=4, axis=1, ignore_index=-100),
                (_rand(3),), **kw)
    for r in ("sum", "mean"):
        check_grads(lambda c, r=r: nll_cotangent_p.bind(c, target, classes=4, axis=1, ignore_index=-100,
                                                        reduction=r), (_rand(),), **kw)
        check_grads(lambda z, r=r: nll_p.bind(log_softmax_p.bind(z, axis=1), target, axis=1,
                                              ignore_index=-100, reduction=r), (x,), **kw)


def test_batch_rules(backend_device):
    xs = [_rand(3, 4, seed=s) for s in range(3)]
    vs = [_rand(3, 4, seed=s + 5) for s in range(3)]
    for in_axes in ((0, 0), (1, 0), (None, 1)):
        exs = list(zip(xs if in_axes[0] is not None else xs[:1] * 3, vs))  # None: one shared value
        check_vmap(relu_tangent_p.bind, exs, in_axes)
        for op in (log_softmax_tangent_p, log_softmax_cotangent_p):
            check_vmap(lambda y, v, o=op: o.bind(y, v, axis=1), exs, in_axes)
    ts = [xp.asarray(np.array([1, 3, -100]) if s else np.array([0, 0, 2])) for s in range(3)]
    cs = [_rand(3, seed=s) for s in range(3)]
    f = lambda c, t: nll_cotangent_p.bind(c, t, classes=4, axis=1, ignore_index=-100)  # noqa: E731
    for in_axes in ((0, 0), (None, 0), (0, None)):
        exs = list(zip(cs if in_axes[0] is not None else cs[:1] * 3,
                       ts if in_axes[1] is not None else ts[:1] * 3))
        check_vmap(f, exs, in_axes)
    for r in ("sum", "mean"):
        g = lambda c, t, r=r: nll_cotangent_p.bind(c, t, classes=4, axis=1, ignore_index=-100,  # noqa: E731
                                                   reduction=r)
        h = lambda z, t, r=r: nll_p.bind(z, t, axis=1, ignore_index=-100, reduction=r)  # noqa: E731
        for in_axes in ((0, 0), (None, 0), (0, None)):
            exs = list(zip([_rand(seed=s) for s in range(3)] if in_axes[0] is not None else [_rand()] * 3,
                           ts if in_axes[1] is not None else ts[:1] * 3))
            check_vmap(g, exs, in_axes)
            zs = list(zip(xs if in_axes[0] is not None else xs[:1] * 3,
                          ts if in_axes[1] is not None else ts[:1] * 3))
            check_vmap(h, zs, in_axes)


def test_shape_rules_raise_typed_errors(backend_device):
    x, t = _rand(3, 4), _rand(3, 4)
    with pytest.raises(ShapeError, match="one shape and dtype"):
        relu_tangent_p.bind(x, _rand(4, 3))
    with pytest.raises(DTypeError, match="real floating"):
        ints = xp.asarray(np.ones((2, 2), np.int64))
        log_softmax_cotangent_p.bind(ints, ints, axis=0)
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        log_softmax_tangent_p.bind(x, t, axis=2)
    target = xp.asarray(np.array([0, 1, 2]))
    with pytest.raises(ShapeError, match="expected a cotangent of shape"):
        nll_cotangent_p.bind(_rand(2), target, classes=4, axis=1, ignore_index=-100)
    with pytest.raises(DTypeError, match="integer class indices"):
        nll_cotangent_p.bind(_rand(3), _rand(3), classes=4, axis=1, ignore_index=-100)
    with pytest.raises(ShapeError, match="axis 3 is out of range"):
        nll_cotangent_p.bind(_rand(3), target, classes=4, axis=3, ignore_index=-100)
    with pytest.raises(ShapeError, match="classes must be >= 0"):
        nll_cotangent_p.bind(_rand(3), target, classes=-1, axis=1, ignore_index=-100)


@given(lead=st.lists(st.integers(0, 3), min_size=0, max_size=2).map(tuple), k=st.integers(0, 4),
       n=st.integers(0, 4), data=st.data())
@example(lead=(0,), k=3, n=2, data=None)
@example(lead=(), k=1, n=1, data=None)
@example(lead=(2,), k=0, n=3, data=None)
def test_linear_matches_numpy(backend_device, lead, k, n, data):
    dtype = data.draw(st.sampled_from(_dtypes(backend_device))) if data else "float32"
    transpose = data.draw(st.booleans()) if data else False
    rng = np.random.default_rng(k * 7 + n)
    a, w, b = rng.normal(size=lead + (k,)), rng.normal(size=(n, k)), rng.normal(size=n)
    x, wt, bt = _tensor(a, dtype, transpose), _tensor(w, dtype, transpose), _tensor(b, dtype, False)
    got = linear_p.bind(x, wt, bt)
    assert got.dtype is x.dtype and got.shape == lead + (n,)
    want = _host(x) @ _host(wt).T + _host(bt)
    tol = TOL[dtype] * max(k, 1) * 4
    np.testing.assert_allclose(_host(got), want, rtol=tol, atol=tol)


def test_linear_rules(backend_device):
    x, w, b = _rand(3, 4), _rand(5, 4, seed=1), _rand(5, seed=2)
    check_grads(linear_p.bind, (x, w, b), order=2, atol=1e-6, rtol=1e-5)
    check_grads(lambda v: linear_p.bind(v, w, b), (_rand(2, 3, 4),), order=1, atol=1e-6, rtol=1e-5)
    xs, ws, bs = ([_rand(*s, seed=i + j) for i in range(3)] for j, s in enumerate(((3, 4), (5, 4), (5,))))
    for in_axes in ((0, None, None), (1, None, None), (None, 0, None), (0, 0, 0), (None, None, 0)):
        exs = [(xs[i] if in_axes[0] is not None else xs[0], ws[i] if in_axes[1] is not None else ws[0],
                bs[i] if in_axes[2] is not None else bs[0]) for i in range(3)]
        check_vmap(linear_p.bind, exs, in_axes)
    with pytest.raises(ShapeError, match=r"expected input \(..., in\)"):
        linear_p.bind(x, _rand(5, 3), b)
    with pytest.raises(ShapeError, match="bias"):
        linear_p.bind(x, w, _rand(4))
    with pytest.raises(DTypeError, match="one dtype"):
        linear_p.bind(x, w, xp.astype(b, D.float32))
    from tenferro_core.avals import Aval

    dev = default_runtime().device("numpy:cpu")
    avals = (Aval((8, 4), D.float32, dev), Aval((5, 4), D.float32, dev), Aval((5,), D.float32, dev))
    cost = default_runtime().rule("cost", linear_p)(avals, (Aval((8, 5), D.float32, dev),))
    assert cost.flops == 2 * 8 * 5 * 4 + 40
    from tenferro_ad.checkpoint_policies import dots_saveable

    assert dots_saveable(linear_p) and not dots_saveable(relu_tangent_p)  # a contraction, saved by remat
