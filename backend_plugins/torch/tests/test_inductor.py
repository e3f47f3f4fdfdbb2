"""The ``inductor`` executor (tenferro_torch.inductor): `compile(f, backend="inductor")` on
torch:cpu lowers the optimized graph to torch.fx and runs it under torch.compile; its values
match eager tenferro (and NumPy), and what cannot be lowered falls back with a logged reason.

Every distinct graph is a torch.compile of a few seconds on 2 cores, so each test compiles
one graph covering many ops and hypothesis varies values only (one signature per test)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import tenferro_ad
import tenferro_ad.plugin as ad_plugin
import tenferro_nn as nn
import tenferro_runtime as tr
import tenferro_runtime.passes as passes_plugin
import tenferro_torch.plugin as torch_plugin
from tenferro_core.extension import define_op
from tenferro_core.plugins import hookimpl
from tenferro_nn import functional as F
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.compiled import Callee
from tenferro_runtime.executor import BackendCompileWarning

DEVICE = "torch:cpu"
LOGGER = "tenferro_torch.inductor"
# importing Inductor's machinery warns from torch.jit (nothing of tenferro's)
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
# Inductor runs complex ops as aten calls inside the compiled graph, and says so
COMPLEX_OK = pytest.mark.filterwarnings("ignore:Torchinductor does not support code generation")


def on(a, dtype=None):
    return xp.asarray(np.asarray(a, dtype=dtype), device=DEVICE)


def inductor(fn, **kw):
    return tr.compile(fn, backend="inductor", **kw)


def kinds(c) -> set[str]:
    """The executor kinds of every executable a compiled function built (its callees and the
    ones derived from them for AD)."""
    seen, todo = set(), [entry[0] for entry in c._cache.values()]
    while todo:
        callee = todo.pop()
        if callee._exe is not None:
            seen.add(callee._exe.kind)
        for d in callee._derived.values():
            todo += [x for x in (d if isinstance(d, tuple) else (d,)) if isinstance(x, Callee)]
    return seen


def kind(c) -> str:
    return c._cache[next(iter(c._cache))][0].executable().kind


def close(got, want, rtol=1e-12, atol=1e-12):
    """`got` (a tenferro tensor) has `want`'s dtype, shape and values (want: tensor or array)."""
    w = want.numpy() if isinstance(want, tr.Tensor) else np.asarray(want)
    assert isinstance(got._buf, torch.Tensor) and got.device == DEVICE
    g = got.numpy()
    assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


finite = st.floats(-3, 3, allow_nan=False, width=64)


def chain(x, y):
    h = xp.tanh(x * y + 0.5) - xp.sin(x) / (1.0 + y * y)
    h = xp.where(h > 0, xp.exp(-h), h * 2.0)
    return h, xp.maximum(xp.abs(h), xp.astype(y, h.dtype)) ** 2


_chain = inductor(chain)


@given(arrays(np.float64, (3, 4), elements=finite), arrays(np.float64, (3, 4), elements=finite))
def test_elementwise_chain_matches_eager_and_numpy(a, b):
    x, y = on(a), on(b)
    got, want = _chain(x, y), chain(x, y)
    h = np.tanh(a * b + 0.5) - np.sin(a) / (1.0 + b * b)
    h = np.where(h > 0, np.exp(-h), h * 2.0)
    for g, w, ref in zip(got, want, (h, np.maximum(np.abs(h), b) ** 2)):
        close(g, w)
        close(g, ref, rtol=1e-10)
    assert kind(_chain) == "inductor"


def reductions(a, b, c):
    return (xp.sum(a, axis=1), xp.max(a, axis=0), xp.mean(a), xp.argmax(a, axis=1),
            xp.prod(a, axis=(0, 1)), xp.cumulative_sum(a, axis=1), xp.sort(a, axis=1),
            xp.matmul(b, c),  # batched: dot_general with batch dims
            lax.dot_general(c, b, contracting_dims=((1,), (2,)), batch_dims=((0,), (0,))),
            a @ xp.matrix_transpose(a))


_reductions = inductor(reductions)


@settings(max_examples=25)
@given(arrays(np.float32, (3, 4), elements=st.floats(-2, 2, width=32)),
       arrays(np.float32, (2, 3, 4), elements=st.floats(-2, 2, width=32)),
       arrays(np.float32, (2, 4, 5), elements=st.floats(-2, 2, width=32)))
def test_reductions_and_matmul_with_batch_dims(a, b, c):
    got, want = _reductions(on(a), on(b), on(c)), reductions(on(a), on(b), on(c))
    refs = (a.sum(1), a.max(0), np.float32(a.mean()), np.argmax(a, 1), np.float32(a.prod()),
            np.cumsum(a, 1), np.sort(a, 1), b @ c, np.einsum("bkn,bmk->bnm", c, b), a @ a.T)
    for g, w, ref in zip(got, want, refs):
        close(g, w, rtol=1e-5, atol=1e-5)
        close(g, np.asarray(ref).astype(w.numpy().dtype), rtol=1e-4, atol=1e-4)
    assert kind(_reductions) == "inductor"


def mixed(flags, i32, i64, f32, z):
    return (xp.logical_and(flags, i32 > 2), xp.logical_not(flags), i32 // 3 + i32 % 3,
            xp.where(flags, i64 * 7, -i64), xp.astype(f32, xp.int32), xp.astype(i32, xp.float64),
            xp.sum(flags), xp.abs(z * (1 + 2j)), xp.astype(xp.exp(f32), xp.float16))


@COMPLEX_OK
def test_bool_int_float_and_complex_dtypes():
    rng = np.random.default_rng(0)
    flags = rng.random(6) > 0.5
    i32 = rng.integers(-9, 9, 6).astype(np.int32)
    i64 = rng.integers(-2**40, 2**40, 6)
    f32 = rng.standard_normal(6).astype(np.float32)
    z = (rng.standard_normal(6) + 1j * rng.standard_normal(6)).astype(np.complex128)
    args = [on(v) for v in (flags, i32, i64, f32, z)]
    c = inductor(mixed)
    got, want = c(*args), mixed(*args)
    refs = (flags & (i32 > 2), ~flags, None, np.where(flags, i64 * 7, -i64), f32.astype(np.int32),
            i32.astype(np.float64), np.int64(flags.sum()), np.abs(z * (1 + 2j)),
            np.exp(f32).astype(np.float16))
    for g, w, ref in zip(got, want, refs):
        close(g, w, rtol=1e-3 if w.dtype == xp.float16 else 1e-6)
        if ref is not None:
            close(g, ref, rtol=1e-3 if w.dtype == xp.float16 else 1e-6)
    assert kind(c) == "inductor"


def test_zero_dimensional_and_zero_size_inputs():
    def f(s, e, x):
        return s * 2.0 + 1.0, xp.sum(e, axis=0), e * s, xp.sum(x[:, 4:] * s, axis=1), xp.max(x) * s

    s, e, x = on(1.5), on(np.zeros((0, 3))), on(np.arange(12.0).reshape(3, 4))
    c = inductor(f)
    got = c(s, e, x)
    for g, w, ref in zip(got, f(s, e, x), (4.0, np.zeros(3), np.zeros((0, 3)), np.zeros(3), 16.5)):
        close(g, w)
        close(g, ref)
    assert kind(c) == "inductor"


def test_non_contiguous_inputs():
    def f(x, y):
        return xp.exp(x) @ y + xp.sum(x, axis=1, keepdims=True), xp.matrix_transpose(x) * 2.0

    base = on(np.arange(12.0).reshape(4, 3) / 12)
    xt = xp.matrix_transpose(base)  # a torch view with swapped strides
    assert not xt._buf.is_contiguous()
    x = on(np.ascontiguousarray(base.numpy().T))
    y = on(np.linspace(-1, 1, 8).reshape(4, 2))
    c = inductor(f)
    # the same signature, two memory layouts: dynamo specializes on strides, values agree
    for arg in (x, xt, x):
        for g, w in zip(c(arg, y), f(x, y)):
            close(g, w)
    assert c.cache_info().currsize == 1 and kind(c) == "inductor"


def test_outputs_that_are_inputs_or_constants_and_nested_compiled_calls():
    const = on([10.0, 20.0])
    inner = tr.compile(lambda a, b: (a, a * b))

    def f(x, y):
        passthrough, prod = inner(x, y)
        return passthrough, y, const, prod + const, x

    c = inductor(f)
    x, y = on([1.0, 2.0]), on([3.0, 4.0])
    got = c(x, y)
    for g, ref in zip(got, ([1.0, 2.0], [3.0, 4.0], [10.0, 20.0], [13.0, 28.0], [1.0, 2.0])):
        close(g, np.asarray(ref))
    assert got[0]._buf is x._buf and got[1]._buf is y._buf  # returned as they are
    assert kind(c) == "inductor"
    only = inductor(lambda x: (x, const))  # no node at all: nothing for torch.compile
    a, b = only(x)
    assert a._buf is x._buf and b._buf is const._buf and kind(only) == "inductor"


def test_creation_nodes_of_a_hand_built_graph():
    """Tracing evaluates `full` and `iota` at once (constants), but a graph may hold them as
    nodes: their device param reaches the kernels as a plain object dynamo reads."""
    from tenferro_core import catalog
    from tenferro_runtime.graph import Graph, Node, Var
    from tenferro_torch.inductor import compile_graph

    x = on(np.arange(3.0))
    dev = x.device
    nodes, outs = [], []
    for prim, params in ((catalog.full, dict(shape=(3,), fill_value=2.5, dtype=xp.float64, device=dev)),
                         (catalog.iota, dict(dtype=xp.float64, shape=(3,), dimension=0, device=dev))):
        params = prim.check_params(params)
        (aval,) = prim.abstract_eval((), params)
        outs.append(Var(aval))
        nodes.append(Node(prim, [], params, [outs[-1]]))
    a = Var(x._aval)
    total = Var(x._aval)
    nodes.append(Node(catalog.add, [outs[0], outs[1]], {}, [total]))
    run = compile_graph(Graph(inputs=[a], nodes=nodes, outputs=[total, a]), dev)
    got, same = run([x._buf])
    np.testing.assert_array_equal(got.numpy(), [2.5, 3.5, 4.5])
    assert same is x._buf


def loss(x, w):
    return xp.sum(xp.tanh(x @ w) ** 2)


def _loss_grads(a, b):
    t = np.tanh(a @ b)
    g = 2 * t * (1 - t * t)
    return g @ b.T, a.T @ g


def test_grad_of_compiled_and_compiled_grad():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    x, w = on(a), on(b)
    want = tenferro_ad.grad(loss, argnums=(0, 1))(x, w)
    c = inductor(loss)
    g1 = tenferro_ad.grad(c, argnums=(0, 1))(x, w)
    g2_fn = inductor(tenferro_ad.grad(loss, argnums=(0, 1)))
    g2 = g2_fn(x, w)
    for got in (g1, g2):
        for g, wv, ref in zip(got, want, _loss_grads(a, b)):
            close(g, wv)
            close(g, ref, rtol=1e-10)
    assert kinds(c) == {"inductor"} and kinds(g2_fn) == {"inductor"}


@settings(max_examples=20)
@given(arrays(np.float64, (2, 3, 5), elements=st.floats(-30, 30, width=64)))
def test_softmax_and_layer_norm(a):
    x, w, b = on(a), on(np.linspace(0.5, 1.5, 5)), on(np.linspace(-1, 1, 5))
    got, want = _norms(x, w, b), norms(x, w, b)
    e = np.exp(a - a.max(-1, keepdims=True))
    mu, var = a.mean(-1, keepdims=True), a.var(-1, keepdims=True)
    refs = (e / e.sum(-1, keepdims=True), (a - mu) / np.sqrt(var + 1e-5) * w.numpy() + b.numpy())
    for g, wv, ref in zip(got, want, refs):
        close(g, wv, rtol=1e-9, atol=1e-12)
        close(g, ref, rtol=1e-7, atol=1e-9)


def norms(x, w, b):
    return F.softmax(x, dim=-1), F.layer_norm(x, 5, w, b)


_norms = inductor(norms)


@pytest.mark.filterwarnings("error::tenferro_runtime.executor.BackendCompileWarning")
def test_mlp_adam_train_step_matches_the_plan_executor():
    """Compiled whole: no graph break (the one-thread wrappers, dtype-param lookups, the host
    count of nll's targets and pooling's window slices each broke it once) and no fallback to
    the plan (the CPU kernels' bit select and byte masks did not build in Inductor's C++); the
    hidden layer is large enough for the byte masks (elementwise.BYTE_MASKS)."""
    rng = np.random.default_rng(4)
    x_np = rng.standard_normal((64, 8)).astype(np.float32)
    y_np = rng.integers(0, 4, 64)

    def mlp():
        keys = tr.random.split(tr.random.key(0), 2)
        return nn.Sequential(nn.Linear(8, 160, key=keys[0]), nn.ReLU(), nn.Linear(160, 4, key=keys[1]))

    _inductor_trains_as_the_plan(mlp, x_np, y_np, atol=1e-6)


def _inductor_trains_as_the_plan(make_model, x_np, y_np, atol):
    """Three Adam steps of `make_model()` on (x, y) compiled by Inductor (whole: no graph
    break) give the plan executor's losses and parameters."""
    from torch._dynamo.utils import counters

    runs = {}
    counters.clear()
    for backend in ("inductor", "plan"):
        with tr.default_device(DEVICE):
            model = make_model()
            x, y = xp.asarray(x_np), xp.asarray(y_np)
        opt = nn.Adam(lr=1e-2)

        def train_step(model, state, x, y, opt=opt):
            value, grads = tenferro_ad.value_and_grad(lambda m: nn.cross_entropy(m(x), y))(model)
            model, state = opt.update(model, grads, state)
            return model, state, value

        step = tr.compile(train_step, donate_argnums=(0, 1), backend=backend)
        state, losses = opt.init(model), []
        for _ in range(3):
            model, state, value = step(model, state, x, y)
            losses.append(float(value))
        runs[backend] = (losses, [p.numpy() for p in model.parameters()], kind(step))
    (l_ind, p_ind, k_ind), (l_plan, p_plan, k_plan) = runs["inductor"], runs["plan"]
    assert (k_ind, k_plan) == ("inductor", "plan")
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert l_ind[-1] < l_ind[0]  # it trains
    np.testing.assert_allclose(l_ind, l_plan, rtol=1e-5)
    for a, b in zip(p_ind, p_plan):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=atol)


def convs(x1, w1, x3, w3):
    """Convolutions of 1 and 3 spatial axes with strides, dilation, asymmetric and negative
    padding, input dilation and groups, summed into one loss."""
    a = lax.conv_general(x1, w1, window_strides=(2,), padding=((2, 1),), lhs_dilation=(1,),
                         rhs_dilation=(2,), feature_group_count=2)
    b = lax.conv_general(x1, w1, window_strides=(1,), padding=((0, -1),), lhs_dilation=(2,),
                         rhs_dilation=(1,), feature_group_count=2)
    c = lax.conv_general(x3, w3, window_strides=(1, 2, 1), padding=((1, 1), (0, 2), (1, 0)),
                         lhs_dilation=(1, 1, 1), rhs_dilation=(1, 1, 2), feature_group_count=1)
    return xp.sum(a * a) + xp.sum(xp.sin(b)) + xp.sum(c * c * c)


@pytest.mark.filterwarnings("error::tenferro_runtime.executor.BackendCompileWarning")
@settings(max_examples=8)
@given(st.integers(0, 2**16))
def test_convolutions_and_their_gradients_match_the_plan_and_torch(seed):
    """The Inductor executor's convolutions (torch's aten.convolution under compile on the
    CPU, so Inductor may choose channels-last layouts) and their gradients, against the plan
    executor and torch's own conv1d/conv3d with autograd."""
    rng = np.random.default_rng(seed)
    arrays_ = [rng.standard_normal(s).astype(np.float32)
               for s in ((3, 4, 9), (6, 2, 3), (2, 3, 4, 5, 6), (2, 3, 2, 3, 2))]
    ins = [on(a) for a in arrays_]
    fn = tenferro_ad.value_and_grad(convs, argnums=(0, 1, 2, 3))
    got, want = _convs(*ins), fn(*ins)
    t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays_]
    tf = torch.nn.functional
    ref = ((tf.conv1d(tf.pad(t[0], (2, 1)), t[1], stride=2, dilation=2, groups=2) ** 2).sum()
           + torch.sin(tf.conv1d(_dilated(t[0])[..., :-1], t[1], groups=2)).sum()
           + (tf.conv3d(tf.pad(t[2], (1, 0, 0, 2, 1, 1)), t[3], stride=(1, 2, 1),
                        dilation=(1, 1, 2)) ** 3).sum())
    ref_grads = torch.autograd.grad(ref, t)
    close(got[0], want[0], rtol=1e-5, atol=1e-4)
    close(got[0], np.float32(ref.item()), rtol=1e-4, atol=1e-3)
    for g, w, r in zip(got[1], want[1], ref_grads):
        close(g, w, rtol=1e-4, atol=1e-4)
        close(g, r.numpy().astype(np.float32), rtol=1e-3, atol=1e-3)
    assert kinds(_convs) == {"inductor"}


def _dilated(x):
    """`x` with a zero between neighbours along its last axis (input dilation 2)."""
    out = x.new_zeros(x.shape[:-1] + (2 * x.shape[-1] - 1,))
    out[..., ::2] = x
    return out


_convs = inductor(tenferro_ad.value_and_grad(convs, argnums=(0, 1, 2, 3)))


@pytest.mark.filterwarnings("error::tenferro_runtime.executor.BackendCompileWarning")
def test_cnn_adam_train_step_matches_the_plan_executor():
    """The digits CNN's train step (convolutions, ReLU, max pooling, dropout off) compiled
    whole by Inductor gives the plan executor's losses and parameters."""
    rng = np.random.default_rng(5)
    x_np = rng.random((16, 1, 8, 8), dtype=np.float32)
    y_np = rng.integers(0, 10, 16)

    def cnn():
        k = tr.random.split(tr.random.key(0), 3)
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, key=k[0]), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(8, 16, 3, padding=1, key=k[1]), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64, 10, key=k[2]))

    _inductor_trains_as_the_plan(cnn, x_np, y_np, atol=1e-5)


# ---- fallbacks ---------------------------------------------------------------------------

class _Ops:
    """A plugin object registering `register(registry)`; its module name is not this file's,
    whose frames would otherwise be skipped as plugin frames when finding call sites."""

    __name__ = __module__ = "inductor_test_ops"

    def __init__(self, register):
        self.register = register

    @hookimpl
    def tenferro_register(self, registry):
        self.register(registry)


def _test_ops():
    """A decomposition-only op, one whose decomposition needs concrete values (it does not
    trace), an op with effects and a torch kernel (counting its calls), and an op with a
    NumPy kernel only."""
    calls = []
    twice = define_op("test_inductor.twice.v1", lambda a: (a.shape, a.dtype), decomposition=lambda x: x + x)
    scaled = define_op("test_inductor.scaled.v1", lambda a: (a.shape, a.dtype),
                       decomposition=lambda x: x * float(x.numpy().ravel()[0]))
    noisy = define_op("test_inductor.noisy.v1", lambda a: (a.shape, a.dtype), effects=True)
    numpy_only = define_op("test_inductor.numpy_only.v1", lambda a: (a.shape, a.dtype))

    def noisy_kernel(x):
        calls.append(x.shape)
        return x * 3

    def register(r):
        for op in (twice, scaled, noisy, numpy_only):
            r.add_op(op)
        r.add_kernel("torch", noisy, noisy_kernel)
        r.add_kernel("numpy", numpy_only, lambda x: x)

    rt = tr.Runtime([torch_plugin, ad_plugin, passes_plugin, _Ops(register)])
    return rt, (twice, scaled, noisy, numpy_only), calls


def test_nodes_that_cannot_be_lowered_fall_back_with_the_reason_logged(caplog):
    rt, (twice, scaled, noisy, _), calls = _test_ops()

    def f(v):
        start = xp.asarray(1, device=v.device)
        return (twice.bind(xp.exp(v)) * 2.0, scaled.bind(v + 1.0), noisy.bind(v) - 1.0,
                lax.dynamic_slice(v, start, slice_sizes=(2,)))

    with tr.use_runtime(rt), caplog.at_level(logging.DEBUG, logger=LOGGER):
        x = xp.asarray(np.arange(1.0, 4.0), device=DEVICE)
        c = inductor(f)
        for n in (1, 2):
            got = c(x)
            assert len(calls) == n  # the effectful kernel runs on every call
        want = f(x)
        a = np.arange(1.0, 4.0)
        for g, w, ref in zip(got, want, (4 * np.exp(a), (a + 1) * 2, 3 * a - 1, a[1:])):
            close(g, w)
            close(g, ref)
        assert kind(c) == "inductor"
    logs = {r.getMessage() for r in caplog.records if r.name == LOGGER}
    site = f"{__name__.rpartition('.')[2]}.py:"
    expect = [("INFO", "test_inductor.twice.v1", "its decomposition (1 node(s)) is lowered"),
              ("INFO", "test_inductor.scaled.v1", "its decomposition does not trace"),
              ("INFO", "test_inductor.noisy.v1", "it has effects"),
              ("INFO", "dynamic_slice", "reads operand values on the host"),
              ("DEBUG", "compiling a graph of", "3 fallback(s)")]
    for level, what, why in expect:
        hits = [r for r in caplog.records if r.name == LOGGER and what in r.getMessage()
                and why in r.getMessage()]
        assert hits and hits[0].levelname == level, (what, why, logs)
        assert level == "DEBUG" or site in hits[0].getMessage()


def test_a_node_without_any_kernel_is_declined_and_reported_where_it_runs(caplog):
    from tenferro_core.errors import MissingKernelError

    rt, (*_, numpy_only), _ = _test_ops()
    with tr.use_runtime(rt), caplog.at_level(logging.INFO, logger=LOGGER):
        c = inductor(lambda v: numpy_only.bind(v * 2.0))
        with pytest.raises(MissingKernelError, match="no kernel for 'test_inductor.numpy_only.v1'"):
            c(xp.asarray([1.0, 2.0], device=DEVICE))
    assert any("declined" in r.getMessage() and "numpy_only" in r.getMessage()
               for r in caplog.records if r.name == LOGGER)


def test_declines_a_device_that_is_not_torch(caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        x = xp.asarray(np.arange(3.0), device="numpy:cpu")
        c = inductor(lambda v: xp.sin(v) * 2.0)
        close_np = c(x).numpy()
    np.testing.assert_allclose(close_np, np.sin(np.arange(3.0)) * 2.0)
    assert kind(c) == "plan"
    assert any("not a torch device" in r.getMessage() for r in caplog.records if r.name == LOGGER)


def test_a_failing_torch_compile_hands_the_graph_to_the_plan(monkeypatch):
    def broken(module, **kw):
        def run(*args):
            raise RuntimeError("inductor exploded")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    c = inductor(lambda v: xp.cos(v) + 1.0)
    x = on([0.0, 1.0])
    with pytest.warns(BackendCompileWarning, match="inductor exploded"):
        got = c(x)
    close(got, np.cos([0.0, 1.0]) + 1.0)
    close(c(x), np.cos([0.0, 1.0]) + 1.0)  # the plan from then on, no second warning
    assert kind(c) == "inductor"


def test_a_compiled_graph_that_raises_later_is_a_kernel_error(monkeypatch):
    from tenferro_core.errors import KernelError

    calls = []

    def flaky(module, **kw):
        def run(*args):
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("device lost")
            return module(*args)

        return run

    monkeypatch.setattr(torch, "compile", flaky)
    c = inductor(lambda v: xp.cos(v) * 2.0)
    x = on([0.0, 1.0])
    close(c(x), np.cos([0.0, 1.0]) * 2.0)  # the fx module itself, uncompiled
    with pytest.raises(KernelError, match="by Inductor on torch:cpu raised RuntimeError: device lost"):
        c(x)


def test_an_output_check_catches_a_result_of_the_wrong_dtype(monkeypatch):
    from tenferro_core.errors import KernelError

    wrong = (torch.zeros(2, dtype=torch.float32),)
    monkeypatch.setattr(torch, "compile", lambda module, **kw: lambda *a: wrong)
    rt = tr.Runtime([torch_plugin, ad_plugin, passes_plugin], check_kernels=True)
    with tr.use_runtime(rt):
        c = inductor(lambda v: xp.cos(v) * 3.0)
        with pytest.raises(KernelError, match=r"float32\[2\].*promised float64\[2\]"):
            c(xp.asarray([0.0, 1.0], device=DEVICE))


def test_each_lowered_kernel_has_its_own_code_object():
    """Dynamo keeps compiled frames per code object: kernels sharing one piled every node's
    guards onto it, hit the recompile limit (8) in the digits CNN's train step and ran
    uncompiled from then on."""
    from tenferro_torch.fx_lowering import _bound

    def pick(x, axes):
        return x[axes[0]]

    a, b = _bound(lambda x: x, {}, "neg"), _bound(pick, {"axes": (0,)}, "reduce_sum")
    c = _bound(pick, {"axes": (1,)}, "reduce_sum")
    assert len({id(k.__code__) for k in (a, b, c)}) == 3
    assert c.__code__.co_name == "tf_reduce_sum" and c((5, 6)) == 6 and b((5, 6)) == 5


def test_computed_scalars_that_arrays_read_are_extra_outputs():
    """A 0-d value computed in the graph and read by an array op (a bias correction) is an
    extra output of the fx graph, so Inductor stores it once rather than recomputing it in
    every vector iteration; the runner still returns the graph's own outputs."""
    from tenferro_torch.fx_lowering import lower

    def f(x, t):
        return x / (1.0 - 0.9 ** xp.astype(t, x.dtype)), t + 1

    x, t = on(np.linspace(1, 2, 64).reshape(8, 8), np.float32), on(3, np.int64)
    graph = tr.compile(f).lower(x, t)
    device = x._aval.device

    def n_outputs(lowered):
        return len(next(n for n in lowered.module.graph.nodes if n.op == "output").args[0])

    assert n_outputs(lower(graph, device)) == 2
    realized = lower(graph, device, realize_scalars=True)
    assert n_outputs(realized) > 2 and [k for k, _ in realized.sources] == ["fx", "fx"]
    got = inductor(f)(x, t)
    for g, w in zip(got, f(x, t)):
        close(g, w, rtol=1e-6, atol=0)


@pytest.mark.filterwarnings("error::tenferro_runtime.executor.BackendCompileWarning")
def test_unsigned_comparisons_and_selects():
    """torch has no `lt` for uint16/32/64 on the CPU: those comparisons keep the backend's
    kernel (signed twins), the others are torch's own, selects are torch.where."""
    a_np = np.array([0, 1, 2**32 - 1, 5, 2**31], np.uint32)
    b_np = np.array([3, 1, 0, 7, 2**31 - 1], np.uint32)

    def f(a, b):
        return a < b, a == b, xp.where(a >= b, a, b), xp.astype(a, xp.uint8) > xp.astype(b, xp.uint8)

    got = inductor(f)(on(a_np), on(b_np))
    want = (a_np < b_np, a_np == b_np, np.where(a_np >= b_np, a_np, b_np),
            a_np.astype(np.uint8) > b_np.astype(np.uint8))
    for g, w in zip(got, want):
        close(g, w)


def test_a_dense_result_with_an_odd_stride_on_a_size_one_axis_gets_row_major_strides():
    """Inductor may give a dense result any stride on a size-1 axis; fed back into the next
    call (a train step's parameter) it failed dynamo's stride guard and recompiled the graph.
    The runner views such results with row-major strides: the same elements, no copy."""
    from tenferro_torch.inductor import _Runner

    odd = torch.empty_strided((32, 1, 3, 3), (9, 288, 3, 1))
    odd.copy_(torch.arange(288.0).reshape(32, 1, 3, 3))
    plain = torch.arange(6.0).reshape(2, 3)
    runner = _Runner(lambda *bufs: (odd, plain), [("fx", 0), ("fx", 1), ("in", 0)], None, None)
    for _ in range(2):  # the first call finds them, later calls reuse what it found
        got, same, passed = runner([plain])
        assert got.stride() == (9, 9, 3, 1) and got.data_ptr() == odd.data_ptr()
        assert torch.equal(got, odd) and same is plain and passed is plain
