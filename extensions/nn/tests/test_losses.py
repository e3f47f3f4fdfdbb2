"""Losses against torch.nn.functional: values and gradients w.r.t. the logits on generated
shapes and options, stability for large logits, higher derivatives, modules, compile, and
typed errors for bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import grad
from tenferro_ad.testing import check_grads
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError, TenferroIndexError
from tenferro_nn import trainable_mask
from tenferro_nn.losses import (
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    MSELoss,
    NLLLoss,
    binary_cross_entropy_with_logits,
    cross_entropy,
    mse_loss,
    nll_loss,
)
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile

TOL = {"float32": dict(rtol=2e-5, atol=2e-6), "float64": dict(rtol=1e-12, atol=1e-13)}


def _t(a, dtype=None):
    return torch.tensor(np.asarray(a) if dtype is None else np.asarray(a, dtype=dtype))


def _close(got, want, dtype):
    np.testing.assert_allclose(np.asarray(got.numpy(), dtype=np.float64),
                               np.asarray(want.detach().numpy(), dtype=np.float64), **TOL[dtype])


def _compare(tf_fn, torch_fn, x, dtype, *rest):
    """Value and gradient w.r.t. x of tf_fn(x, *rest) vs torch_fn (sum for reduction='none')."""
    got = tf_fn(xp.asarray(x), *[None if r is None else xp.asarray(r) for r in rest])
    tx = _t(x).requires_grad_(True)
    want = torch_fn(tx, *[None if r is None else _t(r) for r in rest])
    _close(got, want, dtype)
    want.sum().backward()
    g = grad(lambda z: xp.sum(tf_fn(z, *[None if r is None else xp.asarray(r) for r in rest])))(xp.asarray(x))
    _close(g, tx.grad, dtype)


@st.composite
def _ce_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    c = draw(st.integers(1, 5))
    kind = draw(st.sampled_from(["C", "NC", "NCd"]))
    if kind == "C":
        shape = (c,)
    else:
        extra = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))) if kind == "NCd" else ()
        shape = (draw(st.integers(1, 3)), c) + extra
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    probs = draw(st.booleans())
    tshape = shape[:0] if kind == "C" else shape[:1] + shape[2:]
    if probs:
        p = rng.random(shape).astype(dtype)
        target = p / p.sum(axis=0 if kind == "C" else 1, keepdims=True)
    else:
        target = rng.integers(0, c, tshape)
    opts = dict(reduction=draw(st.sampled_from(["mean", "sum", "none"])),
                label_smoothing=draw(st.sampled_from([0.0, 0.1, 0.45])))
    weight = rng.random(c).astype(dtype) + 0.1 if draw(st.booleans()) else None
    if not probs and draw(st.booleans()):
        ignore = draw(st.sampled_from([-100, 0]))
        opts["ignore_index"] = ignore
        if ignore == -100 and target.size > 1:
            target.reshape(-1)[0] = -100
    return x, target, weight, opts, dtype


@settings(max_examples=25)
@given(_ce_case())
def test_cross_entropy_matches_torch(case):
    x, target, weight, opts, dtype = case
    _compare(lambda z, y, w: cross_entropy(z, y, weight=w, **opts),
             lambda z, y, w: F.cross_entropy(z, y, weight=w, **opts), x, dtype, target, weight)


@settings(max_examples=15)
@given(_ce_case())
def test_nll_loss_matches_torch(case):
    x, target, weight, opts, dtype = case
    if target.dtype.kind == "f":
        target = target.argmax(axis=0 if x.ndim == 1 else 1)
    opts.pop("label_smoothing")
    logp = x - np.log(np.exp(x).sum(axis=0 if x.ndim == 1 else 1, keepdims=True))
    _compare(lambda z, y, w: nll_loss(z, y, weight=w, **opts),
             lambda z, y, w: F.nll_loss(z, y, weight=w, **opts), logp, dtype, target, weight)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_and_bce_match_torch(dtype, reduction):
    rng = np.random.default_rng(1)
    x, t = rng.standard_normal((2, 3, 4)).astype(dtype) * 4, rng.random((2, 3, 4)).astype(dtype)
    w, pw = rng.random((3, 1)).astype(dtype), rng.random(4).astype(dtype) + 0.5
    _compare(lambda z, y: mse_loss(z, y, reduction=reduction),
             lambda z, y: F.mse_loss(z, y, reduction=reduction), x, dtype, t)
    for weight, pos in [(None, None), (w, None), (None, pw), (w, pw)]:
        _compare(lambda z, y, a, b: binary_cross_entropy_with_logits(z, y, a, b, reduction=reduction),
                 lambda z, y, a, b: F.binary_cross_entropy_with_logits(z, y, a, reduction=reduction,
                                                                       pos_weight=b),
                 x, dtype, t, weight, pos)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_large_logits_stay_finite(dtype):
    x = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4], [3e4, 3e4, -3e4]], dtype=dtype)
    y = np.array([1, 0, 2])
    w = np.array([1.0, 2.0, 0.5], dtype=dtype)
    for ls, weight in [(0.0, None), (0.2, w)]:
        _compare(lambda z, t, a, ls=ls: cross_entropy(z, t, weight=a, label_smoothing=ls),
                 lambda z, t, a, ls=ls: F.cross_entropy(z, t, weight=a, label_smoothing=ls),
                 x, dtype, y, weight)
        g = grad(lambda z, ls=ls: cross_entropy(z, xp.asarray(y), label_smoothing=ls))(xp.asarray(x))
        assert np.isfinite(g.numpy()).all()
    t = np.array([[1.0, 0.0, 0.5]] * 3, dtype=dtype)
    _compare(lambda z, y: binary_cross_entropy_with_logits(z, y), F.binary_cross_entropy_with_logits,
             x, dtype, t)


def test_cross_entropy_second_order_by_finite_differences():
    rng = np.random.default_rng(3)
    x = xp.asarray(rng.standard_normal((3, 4, 2)))
    y = xp.asarray(rng.integers(0, 4, (3, 2)))
    w = xp.asarray(rng.random(4) + 0.5)
    check_grads(lambda z: cross_entropy(z, y, weight=w, label_smoothing=0.1), (x,), order=2)
    p = rng.random((3, 4, 2))
    p = xp.asarray(p / p.sum(axis=1, keepdims=True))
    check_grads(lambda z: cross_entropy(z, p, weight=w, label_smoothing=0.1), (x,), order=2)
    t, pw = xp.asarray(rng.random((3, 4, 2))), xp.asarray(rng.random(2) + 0.5)
    check_grads(lambda z: binary_cross_entropy_with_logits(z, t, pos_weight=pw), (x,), order=2)


def test_modules_hold_weights_as_buffers_and_compile():
    rng = np.random.default_rng(4)
    x, y = xp.asarray(rng.standard_normal((5, 3))), xp.asarray(rng.integers(0, 3, (5,)))
    w = xp.asarray(np.array([1.0, 2.0, 3.0]))
    ce = CrossEntropyLoss(weight=w, label_smoothing=0.1)
    assert trainable_mask(ce) == [False]
    want = cross_entropy(x, y, weight=w, label_smoothing=0.1)
    f = compile(lambda m, a, b: m(a, b))
    for _ in range(3):
        np.testing.assert_allclose(f(ce, x, y).numpy(), want.numpy(), rtol=1e-14)
    assert f.cache_info().misses == 1
    logp = x - xp.log(xp.sum(xp.exp(x), axis=1, keepdims=True))
    np.testing.assert_allclose(NLLLoss(reduction="sum")(logp, y).numpy(),
                               F.nll_loss(_t(logp.numpy()), _t(y.numpy()), reduction="sum").numpy())
    np.testing.assert_allclose(MSELoss()(x, x * 2).numpy(), np.mean(x.numpy() ** 2))
    bce = BCEWithLogitsLoss(pos_weight=xp.asarray(np.array([2.0, 1.0, 0.5])))
    assert trainable_mask(bce) == [False]
    np.testing.assert_allclose(
        bce(x, xp.ones_like(x)).numpy(),
        F.binary_cross_entropy_with_logits(_t(x.numpy()), torch.ones(5, 3, dtype=torch.float64),
                                           pos_weight=_t([2.0, 1.0, 0.5])).numpy(), rtol=1e-13)
    assert "reduction='mean'" in repr(ce)


def test_bad_input_is_a_typed_error_naming_expected_and_given():
    x = xp.asarray(np.zeros((4, 3)))
    y = xp.asarray(np.array([0, 1, 2, 1]))
    with pytest.raises(ShapeError, match=r"expected a target of shape \[4\] .*got \[4, 1\]"):
        cross_entropy(x, xp.reshape(y, (4, 1)))
    with pytest.raises(DTypeError, match="must be an integer tensor, got float64"):
        cross_entropy(x, xp.astype(y, xp.float64))
    with pytest.raises(DTypeError, match="class probabilities and must be floating"):
        cross_entropy(x, xp.zeros((4, 3), dtype=xp.int64))
    with pytest.raises(TenferroIndexError, match=r"target class 3 is out of bounds for 3 classes"):
        cross_entropy(x, xp.asarray(np.array([0, 3, 1, 1])))
    with pytest.raises(IndexError, match="class -1"):
        nll_loss(x, xp.asarray(np.array([0, -1, 1, 1])))
    with pytest.raises(ArgumentError, match=r"reduction must be one of \('none', 'mean', 'sum'\), got 'avg'"):
        cross_entropy(x, y, reduction="avg")
    with pytest.raises(ShapeError, match=r"weight must have shape \(3,\)"):
        cross_entropy(x, y, weight=xp.ones(4, dtype=xp.float64))
    with pytest.raises(DTypeError, match="weight is float32 but the input is float64"):
        cross_entropy(x, y, weight=xp.ones(3, dtype=xp.float32))
    with pytest.raises(ArgumentError, match=r"label_smoothing must be a number in \[0, 1\]"):
        cross_entropy(x, y, label_smoothing=1.5)
    with pytest.raises(DTypeError, match="input must be a real floating tensor, got int64"):
        cross_entropy(y, y)
    with pytest.raises(ShapeError, match=r"target must have the input's shape \[4, 3\], got \[4\]"):
        mse_loss(x, xp.astype(y, xp.float64))
    with pytest.raises(ShapeError, match="does not broadcast"):
        binary_cross_entropy_with_logits(x, x, pos_weight=xp.ones(4, dtype=xp.float64))
    with pytest.raises(ArgumentError, match="must be a tenferro Tensor"):
        mse_loss(x, np.zeros((4, 3)))
    # ignored entries may hold any index; an all-ignored mean is nan, as in PyTorch
    assert np.isnan(cross_entropy(x, xp.full((4,), -100, dtype=xp.int64)).numpy())
