"""`checkpoint` (remat): gradients equal the un-checkpointed ones and finite differences on
every route (tape, vjp, compile(grad), grad(compile), second order, vmap), the backward pass
recomputes instead of storing (graph contents, tape records, tracemalloc peaks)."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_ad import checkpoint, checkpoint_policies, remat
from tenferro_ad.testing import check_grads
from tenferro_core.errors import ArgumentError, ArgumentValueError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile

POLICIES = [None, "nothing_saveable", "dots_saveable", "everything_saveable",
            checkpoint_policies.dots_with_no_batch_dims_saveable]


def layer(x, w, b):
    return xp.tanh(x @ w + b)


def mlp(params, x, policy="off"):
    f = layer if policy == "off" else checkpoint(layer, policy=policy)
    for w, b in params:
        x = f(x, w, b)
    return xp.sum(x * x)


def make(rng, depth, width, batch=3):
    params = [(xp.asarray(rng.normal(size=(width, width)) / np.sqrt(width)),
               xp.asarray(rng.normal(size=(width,)) * 0.1)) for _ in range(depth)]
    return params, xp.asarray(rng.normal(size=(batch, width)))


def close(got, want, rtol=1e-10, atol=1e-12):
    got, want = ad.api.tree_flatten(got)[0], ad.api.tree_flatten(want)[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.sampled_from(range(len(POLICIES))), st.integers(0, 2**16))
def test_gradient_equals_the_uncheckpointed_one_on_every_route(depth, width, p, seed):
    policy = POLICIES[p]
    params, x = make(np.random.default_rng(seed), depth, width)
    want = ad.grad(mlp)(params, x)
    close(ad.grad(mlp)(params, x, policy), want)  # eager: the tape
    close(ad.vjp(lambda ps: mlp(ps, x, policy), params)[1](xp.asarray(1.0))[0], want)
    close(compile(ad.grad(mlp), static_argnums=(2,))(params, x, policy), want)
    close(ad.grad(compile(mlp, static_argnums=(2,)))(params, x, policy), want)
    v, g = ad.value_and_grad(mlp)(params, x, policy)
    np.testing.assert_allclose(v.numpy(), mlp(params, x).numpy(), rtol=1e-12)


@pytest.mark.parametrize("policy", POLICIES)
def test_saved_values_of_non_differentiable_ops_need_no_rule(policy):
    """A saved node of a primitive without derivatives (floor, argsort) carries no tangent, as
    under plain `grad`: `everything_saveable` asked floor for a jvp rule (MissingRuleError;
    a random-program hunt of grad(checkpoint(f)) found it)."""
    x = xp.asarray(np.array([0.5, 1.7, -2.3]))

    def f(a):
        i = xp.argsort(xp.floor(a))
        return a * 2.0 + xp.astype(i, xp.float64) + xp.floor(a) * a

    want = ad.grad(lambda a: xp.sum(f(a)))(x)
    ck = checkpoint(f, policy=policy)
    close(ad.grad(lambda a: xp.sum(ck(a)))(x), want)
    close(compile(ad.grad(lambda a: xp.sum(ck(a))))(x), want)
    np.testing.assert_array_equal(want.numpy(), [2.0, 3.0, -1.0])


@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_saveable"])
def test_finite_differences_first_and_second_order(policy):
    params, x = make(np.random.default_rng(1), 2, 3)
    (w0, b0), (w1, b1) = params

    def f(w0, b0, w1):
        return mlp([(w0, b0), (w1, b1)], x, policy)

    check_grads(f, (w0, b0, w1), order=2, modes=("fwd", "rev"), eps=1e-6, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_saveable"])
def test_second_order_matches_uncheckpointed(policy):
    params, x = make(np.random.default_rng(2), 2, 3)
    xs = xp.asarray(np.random.default_rng(3).normal(size=(3,)))

    def scalar(v, pol):
        return mlp(params, xp.reshape(v, (1, 3)), pol)

    want = ad.grad(lambda v: xp.sum(ad.grad(scalar)(v, "off") ** 2))(xs)
    close(ad.grad(lambda v: xp.sum(ad.grad(scalar)(v, policy) ** 2))(xs), want, rtol=1e-9)
    close(ad.hessian(lambda v: scalar(v, policy))(xs), ad.hessian(lambda v: scalar(v, "off"))(xs), rtol=1e-9)
    close(compile(ad.grad(lambda v: xp.sum(ad.grad(scalar)(v, policy) ** 2)))(xs), want, rtol=1e-9)


def test_jvp_and_closures_over_differentiated_values():
    params, x = make(np.random.default_rng(4), 2, 3)
    t = xp.asarray(np.random.default_rng(5).normal(size=(3, 3)))
    (w, b), rest = params[0], params[1:]
    out, tout = ad.jvp(lambda w: mlp([(w, b), *rest], x, "dots_saveable"), (w,), (t,))
    _, want = ad.jvp(lambda w: mlp([(w, b), *rest], x), (w,), (t,))
    np.testing.assert_allclose(tout.numpy(), want.numpy(), rtol=1e-10)

    def closed(w):  # the checkpointed function closes over w and b
        return xp.sum(checkpoint(lambda x: layer(x, w, b))(x) ** 2)

    close(ad.grad(closed)(w), ad.grad(lambda w: xp.sum(layer(x, w, b) ** 2))(w))
    close(compile(ad.grad(closed))(w), ad.grad(lambda w: xp.sum(layer(x, w, b) ** 2))(w))


def test_vmap_of_checkpoint_and_grad_of_vmap():
    params, x = make(np.random.default_rng(6), 2, 3)
    (w, b) = params[0]
    f = checkpoint(layer)
    np.testing.assert_allclose(ad.vmap(f, in_axes=(0, None, None))(x, w, b).numpy(),
                               layer(x, w, b).numpy(), rtol=1e-12)
    g = ad.grad(lambda w: xp.sum(ad.vmap(f, in_axes=(0, None, None))(x, w, b) ** 2))(w)
    close(g, ad.grad(lambda w: xp.sum(layer(x, w, b) ** 2))(w))


def graph_counts(policy):
    params, x = make(np.random.default_rng(7), 3, 4)
    graph = compile(ad.grad(mlp), static_argnums=(2,)).lower(params, x, policy)
    names = [n.prim.name for n in graph.nodes]
    inner = [m.prim.name for n in graph.nodes if n.prim.name == "fused"
             for m in n.params["graph"].nodes]
    return names + inner


def test_compiled_gradient_recomputes_per_policy():
    plain, nothing = graph_counts("off"), graph_counts("nothing_saveable")
    dots = graph_counts("dots_saveable")
    assert "tenferro_ad.remat_barrier.v1" not in plain
    assert nothing.count("tenferro_ad.remat_barrier.v1") == 3  # one per checkpointed layer
    assert nothing.count("tanh") == plain.count("tanh") + 3  # the forward is recomputed
    assert nothing.count("dot_general") == plain.count("dot_general") + 3
    assert dots.count("dot_general") == plain.count("dot_general")  # saved, not recomputed
    assert dots.count("tanh") == plain.count("tanh") + 3
    assert "tenferro_ad.checkpoint.v1" not in nothing  # the pass inlines them


def test_forward_only_compile_inlines_the_checkpoint():
    params, x = make(np.random.default_rng(8), 2, 3)
    graph = compile(mlp, static_argnums=(2,)).lower(params, x, "nothing_saveable")
    assert all(n.prim.name not in ("call", "tenferro_ad.checkpoint.v1") for n in graph.nodes)
    np.testing.assert_allclose(compile(mlp, static_argnums=(2,))(params, x, None).numpy(),
                               mlp(params, x).numpy(), rtol=1e-12)


def test_tape_records_one_op_per_checkpointed_call():
    params, x = make(np.random.default_rng(9), 3, 4)
    with ad.GradientTape() as tape:
        tape.watch(params)
        loss = mlp(params, x, None)
    assert [r[0].name for r in tape._records].count("tenferro_ad.checkpoint.v1") == 3
    assert "tanh" not in [r[0].name for r in tape._records]
    close(tape.gradient(loss, params), ad.grad(mlp)(params, x))


def peak_bytes(fn):
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_twenty_layer_mlp_gradient_has_a_lower_peak():
    """The acceptance check: a 20-layer MLP's gradient (numpy device), the same values as the
    un-checkpointed one and as finite differences, with a lower tracemalloc peak."""
    rng = np.random.default_rng(10)
    params, x = make(rng, 20, 256, batch=256)
    grad = ad.grad(mlp)
    want = grad(params, x)  # warm every cache first: the peaks compare steady states
    got = grad(params, x, "nothing_saveable")
    close(got, want, rtol=1e-9, atol=1e-12)
    for _ in range(2):
        grad(params, x), grad(params, x, "nothing_saveable")
    plain = peak_bytes(lambda: grad(params, x))
    remat_peak = peak_bytes(lambda: grad(params, x, "nothing_saveable"))
    assert remat_peak < 0.6 * plain, (remat_peak, plain)
    # finite differences along a random direction of the first weight
    (w, b), rest = params[0], params[1:]
    d = rng.normal(size=w.shape)
    eps = 1e-5

    def at(s):
        return float(mlp([(xp.asarray(w.numpy() + s * d), b), *rest], x).numpy())

    fd = (at(eps) - at(-eps)) / (2 * eps)
    np.testing.assert_allclose(np.sum(got[0][0].numpy() * d), fd, rtol=1e-5)


def test_compiled_memory_plan_has_a_lower_peak():
    params, x = make(np.random.default_rng(11), 8, 64, batch=64)

    def peak(policy):
        graph = compile(ad.grad(mlp), static_argnums=(2,)).lower(params, x, policy)
        return graph.meta["memory"].peak_bytes_after

    assert peak("nothing_saveable") < peak("off")


def test_remat_is_checkpoint_and_errors_are_typed():
    assert remat is checkpoint
    with pytest.raises(ArgumentValueError, match="unknown policy 'dot'.*dots_saveable"):
        checkpoint(layer, policy="dot")
    with pytest.raises(ArgumentError, match="policy must be"):
        checkpoint(layer, policy=3)
    with pytest.raises(ArgumentError, match="expects a function"):
        checkpoint(3)
    with pytest.raises(ArgumentError, match="static_argnums"):
        checkpoint(layer, static_argnums="a")
    f = checkpoint(lambda x, n: x * n, static_argnums=(1,))
    x = xp.asarray([1.0, 2.0])
    np.testing.assert_allclose(ad.grad(lambda x: xp.sum(f(x, 3)))(x).numpy(), [3.0, 3.0])
    with pytest.raises(ArgumentError, match="static_argnums includes 1"):
        ad.grad(lambda x: xp.sum(f(x)))(x)


def test_nested_tapes_give_the_second_derivative():
    from tenferro_ad.testing import tape_second_derivative

    f = checkpoint(lambda x: xp.sin(x) * xp.exp(x), policy="dots_saveable")
    x = xp.asarray([0.3, 1.2, -0.7])
    a = x.numpy()
    np.testing.assert_allclose(tape_second_derivative(f, x).numpy(), 2 * np.cos(a) * np.exp(a), rtol=1e-12)
