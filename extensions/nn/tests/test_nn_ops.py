"""tenferro-nn's ops (relu, log_softmax, nll and their derivative ops): the torch kernels
against NumPy/SciPy on generated shapes (0-size, 1-size, 0-d targets), every float dtype and
non-contiguous operands; special values as PyTorch gives them on both devices; jvp rules
against finite differences to second order; transpose rules by the dot-product identity;
batch rules; and which calls bind the ops (eager calls and, for log_softmax and nll, traces
on a device with a kernel) and which get the composition."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from nn_ops_helpers import dtypes_of as _dtypes
from nn_ops_helpers import host as _host
from nn_ops_helpers import tensor as _tensor

import tenferro_nn as nn
import tenferro_nn.functional as F
from tenferro_ad import GradientTape, grad
from tenferro_ad.testing import check_grads, check_vmap
from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError, ShapeError, TenferroIndexError
from tenferro_nn.functional._activation import safe_softmax
from tenferro_nn.ops import (
    log_softmax_cotangent_p,
    log_softmax_p,
    log_softmax_tangent_p,
    nll_cotangent_p,
    nll_p,
    relu_p,
    relu_tangent_p,
)
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, default_runtime
from tenferro_runtime.graph import trace

TOL = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 2e-6, "float64": 1e-13}


shapes = st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple)


@given(shape=shapes, data=st.data(), transpose=st.booleans())
@example(shape=(0,), data=None, transpose=False)
def test_relu_gives_the_compositions_bits(backend_device, shape, data, transpose):
    dtype = data.draw(st.sampled_from(_dtypes(backend_device))) if data else "float32"
    a = np.random.default_rng(len(shape)).normal(size=shape)
    a.flat[: min(a.size, 3)] = [-0.0, np.nan, 0.0][: min(a.size, 3)]
    x = _tensor(a, dtype, transpose)
    got, want = relu_p.bind(x), xp.where(x <= 0, 0, x)
    assert got.dtype is x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(np.signbit(_host(got)), np.signbit(_host(want)))
    np.testing.assert_array_equal(_host(got), _host(want))


@given(shape=shapes, data=st.data(), transpose=st.booleans())
@example(shape=(3, 0), data=None, transpose=False)
@example(shape=(1,), data=None, transpose=False)
def test_log_softmax_matches_scipy(backend_device, shape, data, transpose):
    dtype = data.draw(st.sampled_from(_dtypes(backend_device))) if data else "float32"
    axis = data.draw(st.integers(0, len(shape) - 1)) if data else len(shape) - 1
    a = np.random.default_rng(sum(shape)).normal(scale=4.0, size=shape)
    x = _tensor(a, dtype, transpose)
    got = log_softmax_p.bind(x, axis=axis)
    assert got.dtype is x.dtype and got.shape == x.shape
    xv = _host(x).astype(np.float64)
    want = scipy.special.log_softmax(xv, axis=axis) if xv.size else xv
    np.testing.assert_allclose(_host(got), want, rtol=TOL[dtype], atol=TOL[dtype] * 10)


@given(shape=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple), data=st.data(),
       transpose=st.booleans())
@example(shape=(4,), data=None, transpose=False)
@example(shape=(0, 3), data=None, transpose=False)
def test_nll_matches_numpy(backend_device, shape, data, transpose):
    dtype = data.draw(st.sampled_from(_dtypes(backend_device))) if data else "float32"
    axis = data.draw(st.integers(0, len(shape) - 1)) if data else 0
    tdtype = data.draw(st.sampled_from(["int64", "int32", "uint8"])) if data else "int64"
    rng = np.random.default_rng(sum(shape) + axis)
    c = shape[axis]
    rest = shape[:axis] + shape[axis + 1:]
    a = rng.normal(size=shape)
    tgt = rng.integers(0, max(c, 1), size=rest)
    ignore = -100 if tdtype != "uint8" else 255
    if c == 0:
        tgt = np.full(rest, ignore)
    elif tgt.size:
        tgt.flat[0] = ignore
    reduction = data.draw(st.sampled_from(["none", "sum", "mean"])) if data else "none"
    x = _tensor(a, dtype, transpose)
    target = xp.asarray(tgt.astype(tdtype))
    got = nll_p.bind(x, target, axis=axis, ignore_index=ignore, reduction=reduction)
    assert got.dtype is x.dtype and got.shape == (rest if reduction == "none" else ())
    xv = _host(x).astype(np.float64)
    safe = np.where(tgt == ignore, 0, tgt)
    picked = np.take_along_axis(xv, np.expand_dims(safe, axis), axis=axis).squeeze(axis) if c else \
        np.zeros(rest)
    want = np.where(tgt == ignore, 0.0, -picked)
    if reduction != "none":
        with np.errstate(invalid="ignore"):  # every target ignored: the mean is 0/0
            want = want.sum() / (np.sum(tgt != ignore) if reduction == "mean" else 1)
    tol = TOL[dtype] * (1 if reduction == "none" else max(want.size, 4))
    np.testing.assert_allclose(_host(got), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(0, 0, 0), (2, 3, 2), (3, 4), (1, 0, 1), (0, 1, 1)])
def test_nll_takes_every_integer_target_dtype(backend_device, shape):
    """torch's nll_loss takes int64 targets only in its (N, C, d1, ...) form (hypothesis found
    uint8 failing on a (0, 0, 0) input) and mis-sizes empty inputs (a (0, 1, 1) one)."""
    x = _rand(*shape)
    want = None
    for tdtype in ("int64", "int32", "uint8", "int16"):
        t = xp.asarray(np.full(shape[:1] + shape[2:], 0 if shape[1] else 7, dtype=tdtype))
        ignore = -100 if shape[1] else 7
        got = nll_p.bind(x, t, axis=1, ignore_index=ignore).numpy()
        want = got if want is None else want
        np.testing.assert_array_equal(got, want)
    expect = -np.take(x.numpy(), 0, axis=1) if shape[1] else np.zeros(shape[:1] + shape[2:])
    np.testing.assert_array_equal(want, expect)


def test_special_values_are_pytorchs_on_every_device(backend_device):
    """Rows with +inf or NaN give NaN rows and rows of -inf give NaN (torch's log_softmax and
    softmax, and JAX's); before, a +inf row gave [nan, -inf, -inf] on both devices."""
    rows = np.array([[np.inf, 1.0, 2.0], [-np.inf] * 3, [np.nan, 0.0, 1.0], [1.0, -np.inf, 0.0]])
    x = xp.asarray(rows)
    want = torch.log_softmax(torch.from_numpy(rows), 1).numpy()
    np.testing.assert_allclose(F.log_softmax(x, 1).numpy(), want, rtol=1e-15)
    np.testing.assert_allclose(log_softmax_p.bind(x, axis=1).numpy(), want, rtol=1e-15)
    np.testing.assert_allclose(F.softmax(x, 1).numpy(), torch.softmax(torch.from_numpy(rows), 1).numpy(),
                               rtol=1e-15)
    safe = safe_softmax(x, 1).numpy()
    np.testing.assert_array_equal(safe[1], [0.0, 0.0, 0.0])
    assert np.isnan(safe[0]).all()
    r = F.relu(xp.asarray(np.array([-0.0, np.nan, -np.inf, 3.0]))).numpy()
    np.testing.assert_array_equal(r, [0.0, np.nan, 0.0, 3.0])
    assert not np.signbit(r[0])


def _rand(*shape, seed=0):
    return xp.asarray(np.random.default_rng(seed).normal(size=shape))


def test_jvp_rules_match_finite_differences_to_second_order(backend_device):
    x = _rand(3, 4)
    x = xp.where(xp.abs(x) < 0.1, x + 0.5, x)  # away from relu's kink
    check_grads(relu_p.bind, (x,), order=2, atol=1e-6, rtol=1e-5)
    for axis in (0, 1):
        check_grads(lambda z, a=axis: log_softmax_p.bind(z, axis=a), (x,), order=2, atol=1e-6, rtol=1e-5)
    target = xp.asarray(np.array([3, -100, 0]))
    check_grads(lambda z: nll_p.bind(z, target, axis=1, ignore_index=-100), (x,), order=2, atol=1e-6,
                rtol=1e-5)
    check_grads(lambda z: nll_p.bind(log_softmax_p.bind(z, axis=1), target, axis=1, ignore_index=-100),
                (x,), order=2, atol=1e-6, rtol=1e-5)


def test_batch_rules(backend_device):
    xs = [_rand(3, 4, seed=s) for s in range(3)]
    ts = [xp.asarray(np.array([1, 3, -100]) if s else np.array([0, 0, 2])) for s in range(3)]
    check_vmap(relu_p.bind, [(x,) for x in xs], (0,))
    check_vmap(relu_p.bind, [(x,) for x in xs], (1,))
    for axis in (0, 1):
        for in_axis in (0, 1, 2):
            check_vmap(lambda z, a=axis: log_softmax_p.bind(z, axis=a), [(x,) for x in xs], (in_axis,))
    f = lambda z, t: nll_p.bind(z, t, axis=1, ignore_index=-100)  # noqa: E731
    for in_axes in ((0, 0), (1, 0), (None, 0)):
        check_vmap(f, list(zip(xs if in_axes[0] is not None else xs[:1] * 3, ts)), in_axes)
    check_vmap(f, [(x, ts[1]) for x in xs], (2, None))


def _ops_recorded(fn, *args) -> set[str]:
    tape = GradientTape()
    with tape:
        tape.watch(args[0])
        fn(*args)
    return {r[0].name for r in tape._records if r[0].name.startswith("tenferro_nn.")}


def test_eager_calls_bind_the_ops_where_a_kernel_exists_and_traces_get_the_composition(backend_device):
    logits = _rand(5, 4)
    target = xp.asarray(np.array([0, 3, 1, 1, 2]))

    def loss(z, t):
        return nn.cross_entropy(F.log_softmax(F.relu(z), 1), t)

    torch_dev = backend_device.startswith("torch")
    ops = {"tenferro_nn.relu.v1", "tenferro_nn.log_softmax.v1", "tenferro_nn.nll.v1"}
    assert _ops_recorded(loss, logits, target) == (ops if torch_dev else set())
    graph = trace(loss, logits._aval, target._aval)
    traced = {n.prim.name for n in graph.nodes if n.prim.name.startswith("tenferro_nn.")}
    assert traced == ({"tenferro_nn.log_softmax.v1", "tenferro_nn.nll.v1"} if torch_dev else set())
    eager, compiled = loss(logits, target), compile(loss)(logits, target)
    np.testing.assert_allclose(eager.numpy(), compiled.numpy(), rtol=1e-12)
    g_eager = grad(lambda z: loss(z, target))(logits)
    g_compiled = compile(grad(lambda z: loss(z, target)))(logits)
    np.testing.assert_allclose(g_eager.numpy(), g_compiled.numpy(), rtol=1e-12, atol=1e-15)
    zt = torch.tensor(logits.numpy(), requires_grad=True)
    torch.nn.functional.cross_entropy(torch.log_softmax(torch.relu(zt), 1),
                                      torch.tensor(target.numpy())).backward()
    np.testing.assert_allclose(g_eager.numpy(), zt.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_cross_entropy_with_ignored_targets_is_the_mean_over_the_rest(backend_device):
    z = np.random.default_rng(3).normal(size=(6, 5))
    t = np.array([0, -100, 4, 2, -100, 1])
    want = torch.nn.functional.cross_entropy(torch.from_numpy(z), torch.from_numpy(t)).item()
    assert math.isclose(float(nn.cross_entropy(xp.asarray(z), xp.asarray(t))), want, rel_tol=1e-12)
    t[:] = -100
    assert math.isnan(float(nn.cross_entropy(xp.asarray(z), xp.asarray(t))))


@pytest.mark.parametrize("tdtype", ["int64", "int32", "uint8"])
@pytest.mark.parametrize("shape", [(3,), (4, 3), (2, 3, 4), (1, 3, 2, 2), (4, 0)])
def test_a_target_out_of_range_is_a_typed_error_eager_taped_and_traced(backend_device, shape, tdtype):
    """Eager losses leave the range check to torch's kernel (nll_p's contract), the numpy
    device checks on the host; either way the first bad target is named, under a tape, by
    `grad` and (concrete target, traced logits) by `compile`."""
    classes = shape[1] if len(shape) > 1 else shape[0]
    rest = shape[:1] + shape[2:] if len(shape) > 1 else ()
    z = xp.asarray(np.random.default_rng(0).normal(size=shape))
    ignore = 255 if tdtype == "uint8" else -100
    tgt = np.zeros(rest, dtype=tdtype)
    tgt.flat[-1] = classes + 2
    if tgt.size > 1:
        tgt.flat[0] = ignore
    if tgt.size > 2 and tdtype != "uint8":
        tgt.flat[-2] = -1
    wide = tgt.astype(np.int64)
    wrong = (wide != ignore) & ((wide < 0) | (wide >= classes))
    bad = wide.flat[int(np.argmax(wrong))]  # the first in C order: the one named
    t = xp.asarray(tgt)
    msg = rf"target class {bad} is out of bounds for {classes} classes; expected indices in \[0, {classes}\)"
    for loss in (nn.cross_entropy, nn.nll_loss):
        for reduction in ("mean", "sum", "none"):
            with pytest.raises(TenferroIndexError, match=msg):
                loss(z, t, ignore_index=ignore, reduction=reduction)
        with pytest.raises(IndexError, match=msg):
            with GradientTape() as tape:
                tape.watch(z)
                loss(z, t, ignore_index=ignore)
        with pytest.raises(IndexError, match=msg):
            grad(lambda q, loss=loss: loss(q, t, ignore_index=ignore))(z)
        with pytest.raises(IndexError, match=msg):
            compile(lambda q, loss=loss: loss(q, t, ignore_index=ignore))(z)
    good = np.where(wrong, 0, wide).astype(tdtype)
    if classes:  # the same call with the bad entries fixed runs, as torch's does
        want = torch.nn.functional.cross_entropy(torch.tensor(np.array(z)), torch.from_numpy(
            good.astype(np.int64)), ignore_index=ignore, reduction="sum")
        assert math.isclose(float(nn.cross_entropy(z, xp.asarray(good), ignore_index=ignore,
                                                   reduction="sum")), want.item(), rel_tol=1e-12)


def test_shape_rules_raise_typed_errors(backend_device):
    x = _rand(3, 4)
    with pytest.raises(DTypeError, match="real floating"):
        relu_p.bind(xp.asarray(np.array([1, 2])))
    with pytest.raises(ShapeError, match="axis 2 is out of range"):
        log_softmax_p.bind(x, axis=2)
    with pytest.raises(ShapeError, match=r"expected a target of shape \[3\]"):
        nll_p.bind(x, xp.asarray(np.array([0, 1])), axis=1, ignore_index=-100)
    with pytest.raises(DTypeError, match="integer class indices"):
        nll_p.bind(x, xp.asarray(np.zeros(3)), axis=1, ignore_index=-100)


def test_cost_rules_count_the_elements():
    rt = default_runtime()
    f32 = rt.device("numpy:cpu")
    from tenferro_core.avals import Aval

    x = Aval((8, 10), D.float32, f32)
    assert rt.rule("cost", relu_p)((x,), (x,)).flops == 80
    assert rt.rule("cost", relu_tangent_p)((x, x), (x,)).flops == 80
    assert rt.rule("cost", log_softmax_p)((x,), (x,), axis=1).flops > 80
    for op in (log_softmax_tangent_p, log_softmax_cotangent_p):
        assert rt.rule("cost", op)((x, x), (x,), axis=1).flops > 80
    t = Aval((8,), D.int64, f32)
    c = rt.rule("cost", nll_p)((x, t), (Aval((8,), D.float32, f32),), axis=1, ignore_index=-100)
    assert c.flops == 8 and c.bytes == 8 * 8 + 8 * 4 + 8 * 4
    c = rt.rule("cost", nll_cotangent_p)((Aval((8,), D.float32, f32), t), (x,), classes=10, axis=1,
                                         ignore_index=-100)
    assert c.flops == 80


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_relu_keeps_a_nans_bits_in_half_precision_on_torch(dtype):
    """torch's vectorized 16-bit threshold kernels turn a NaN into 0xffff (-nan), where the
    composition where(x <= 0, 0, x) keeps it (a thorough hypothesis run: bfloat16, 32
    elements); relu and relu_tangent take a select there."""
    bits = torch.tensor([0x7FC0 if dtype is torch.bfloat16 else 0x7E00] * 4 + [0] * 60, dtype=torch.int16)
    bits[1] |= -32768  # one negative NaN
    base = torch.linspace(-3, 3, 64).to(dtype)
    x_t = torch.where(torch.arange(64) < 4, bits.view(dtype), base)
    x = xp.asarray(x_t)
    for got, want in ((relu_p.bind(x), xp.where(x <= 0, 0, x)),
                      (relu_tangent_p.bind(xp.abs(x), x), xp.where(xp.abs(x) <= 0, 0, x))):
        assert got._buf.view(torch.int16).tolist() == want._buf.view(torch.int16).tolist()
