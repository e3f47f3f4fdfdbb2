"""vmap's arguments, errors, custom ops, custom derivative rules, and its composition with
grad, jvp, vjp, jacfwd, jacrev, hessian, GradientTape and compile (against loops, finite
differences and torch.func)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad.plugin as ad_plugin
import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import hook_plugin
from tenferro_ad import (
    GradientTape,
    PerformanceWarning,
    custom_jvp,
    custom_vjp,
    grad,
    hessian,
    jacfwd,
    jacrev,
    jvp,
    vjp,
    vmap,
)
from tenferro_core.errors import (
    ArgumentError,
    AxisError,
    ConcretizationError,
    KernelError,
    ShapeError,
)
from tenferro_core.extension import define_op
from tenferro_runtime import Runtime, compile, lax, use_runtime
from tenferro_runtime import array_api as xp

RNG = np.random.default_rng(0)


def arr(*shape, device="numpy:cpu"):
    return xp.asarray(RNG.standard_normal(shape), device=device)


def close(a, b, tol=1e-9):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


# ---- arguments -----------------------------------------------------------------------------


def test_in_axes_pytree_none_and_negative_axes():
    x, w, b = arr(3, 4), arr(4, 5), arr(5)

    def f(inputs, bias):
        return {"y": inputs["x"] @ inputs["w"] + bias, "x": inputs["x"]}

    out = vmap(f, in_axes=({"x": -1, "w": None}, None), out_axes={"y": 1, "x": 0})(
        {"x": x.mT, "w": w}, b)
    close(out["y"], (x.numpy() @ w.numpy() + b.numpy()).T)
    close(out["x"], x.numpy())


def test_axis_size_broadcasts_unmapped_function():
    y = vmap(lambda v: v * 2.0, in_axes=None, axis_size=3)(arr(2))
    assert y.shape == (3, 2)
    close(y.numpy()[0], y.numpy()[2])


@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
def test_nested_vmap_equals_double_loop(device):
    x, y = arr(2, 3, 4, device=device), arr(3, 4, device=device)
    f = vmap(vmap(lambda a, b: xp.sum(a * b) + xp.max(a), in_axes=(0, 0)), in_axes=(0, None))
    want = [[np.sum(x.numpy()[i, j] * y.numpy()[j]) + np.max(x.numpy()[i, j]) for j in range(3)]
            for i in range(2)]
    close(f(x, y), want)


# ---- errors --------------------------------------------------------------------------------


def test_bad_in_axes_are_typed_errors_before_anything_runs():
    x, y = arr(3, 2), arr(4, 2)
    calls = []

    def f(a, b):
        calls.append(1)
        return a + b

    with pytest.raises(ShapeError, match=r"argument 0 has size 3 on axis 0, but argument 1 has size 4"):
        vmap(f)(x, y)
    with pytest.raises(AxisError, match=r"in_axes 2 is out of range for argument 0"):
        vmap(f, in_axes=(2, 0))(x, x)
    with pytest.raises(ArgumentError, match="in_axes has 3 entries but the function was called with 2"):
        vmap(f, in_axes=(0, 0, 0))(x, x)
    with pytest.raises(ArgumentError, match="no argument is mapped"):
        vmap(f, in_axes=None)(x, x)
    with pytest.raises(ArgumentError, match="in_axes entries must be ints or None"):
        vmap(f, in_axes=(0, 1.5))
    with pytest.raises(ArgumentError, match="Python number"):
        vmap(f)(x, 2.0)
    with pytest.raises(ArgumentError, match="expects a function"):
        vmap(3)
    assert not calls
    with pytest.raises(ShapeError, match="out_axes gives it None"):
        vmap(lambda a: a * 2, out_axes=None)(x)
    with pytest.raises(ConcretizationError, match="differs between the 3 examples"):
        vmap(lambda a: a * 2 if float(a[0]) > 0 else a)(x)


def _same(x):
    return x.shape, x.dtype


def _runtime(op, kernel, rule=None):
    def register(registry):
        registry.add_op(op)
        registry.add_kernel("numpy", op, kernel)
        if rule is not None:
            registry.add_rule("batch", op, rule)

    return Runtime([numpy_plugin, ad_plugin, hook_plugin("test_vmap_transforms", register)])


def test_custom_op_without_batch_rule_loops_with_a_performance_warning():
    cube = define_op("test_vmap_transforms.cube.v1", _same)
    with use_runtime(_runtime(cube, lambda x: x ** 3)):
        x = xp.asarray(RNG.standard_normal((4, 3)))
        with pytest.warns(PerformanceWarning, match=r"'test_vmap_transforms.cube.v1' has no batch "
                                                    r"rule.*registry.add_rule\('batch'"):
            y = vmap(cube.bind, in_axes=1)(x)
        close(y, (x.numpy() ** 3).T)


def test_batch_rule_with_a_wrong_batch_axis_is_a_kernel_error():
    sq = define_op("test_vmap_transforms.sq.v1", _same)

    def bad_rule(args, dims):
        return sq.bind(args[0]), 1  # says axis 1; the batch is on axis 0

    with use_runtime(_runtime(sq, lambda x: x * x, bad_rule)):
        x = xp.asarray(RNG.standard_normal((4, 3)))
        with pytest.raises(KernelError, match=r"batch rule of extension op 'test_vmap_transforms.sq.v1'"
                                              r".*batch axis 1.*expects float64\[3\] per example"):
            vmap(sq.bind)(x)


def test_custom_op_with_batch_rule_uses_it():
    sq = define_op("test_vmap_transforms.sq2.v1", _same)
    seen = []

    def rule(args, dims):
        seen.append(dims)
        return sq.bind(args[0]), dims[0]

    with use_runtime(_runtime(sq, lambda x: x * x, rule)):
        x = xp.asarray(RNG.standard_normal((4, 3)))
        with warnings.catch_warnings():
            warnings.simplefilter("error", PerformanceWarning)
            close(vmap(sq.bind, in_axes=1)(x), (x.numpy() ** 2).T)
    assert seen == [(1,)]


# ---- custom derivative rules under vmap ----------------------------------------------------


@custom_vjp
def clip_gradient(x):
    return x


def _clip_fwd(x):
    return x, None


def _clip_bwd(_, ct):
    return (xp.clip(ct, -0.1, 0.1),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


@custom_jvp
def doubled_derivative(x):
    return xp.sin(x)


@doubled_derivative.defjvp
def _doubled_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return xp.sin(x), 2.0 * xp.cos(x) * t


def test_custom_vjp_rule_holds_under_vmap_in_every_order():
    x = xp.asarray([1.0, -2.0, 3.0])
    f = lambda v: xp.sum(clip_gradient(v) * 5.0)  # noqa: E731
    close(vmap(grad(lambda s: clip_gradient(s) * 5.0))(x), [0.1, 0.1, 0.1])
    close(grad(lambda v: xp.sum(vmap(lambda s: clip_gradient(s) * 5.0)(v)))(x), [0.1] * 3)
    close(grad(f)(x), [0.1] * 3)
    w = xp.asarray(2.0)  # unbatched argument: its cotangent sums over the examples
    g = grad(lambda w_: xp.sum(vmap(lambda s, ww: clip_gradient(s * ww), in_axes=(0, None))(x, w_)))
    close(g(w), np.sum(np.clip(1.0, -0.1, 0.1) * x.numpy()))


def test_custom_jvp_rule_holds_under_vmap():
    x = xp.asarray([0.5, 1.0, 2.0])
    _, t = jvp(vmap(doubled_derivative), (x,), (xp.ones_like(x),))
    close(t, 2 * np.cos(x.numpy()))
    close(vmap(grad(doubled_derivative))(x), 2 * np.cos(x.numpy()))
    close(jacfwd(vmap(doubled_derivative))(x), np.diag(2 * np.cos(x.numpy())))


# ---- composition ---------------------------------------------------------------------------


def mlp_loss(params, x, y):
    w1, b1, w2 = params
    h = xp.tanh(x @ w1 + b1)
    return xp.sum((h @ w2 - y) ** 2)


def _params(device="numpy:cpu"):
    return (arr(5, 8, device=device), arr(8, device=device), arr(8, 2, device=device))


@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
def test_per_example_gradients_equal_a_loop_and_torch_func(device):
    import torch

    params = _params(device)
    xs, ys = arr(6, 5, device=device), arr(6, 2, device=device)
    per = vmap(grad(mlp_loss), in_axes=(None, 0, 0))(params, xs, ys)
    for i in range(6):
        one = grad(mlp_loss)(params, xs[i], ys[i])
        for a, b in zip(per, one):
            close(a.numpy()[i], b.numpy())

    def tloss(p, x, y):
        h = torch.tanh(x @ p[0] + p[1])
        return torch.sum((h @ p[2] - y) ** 2)

    tp = tuple(torch.tensor(p.numpy()) for p in params)
    want = torch.func.vmap(torch.func.grad(tloss), in_dims=(None, 0, 0))(
        tp, torch.tensor(xs.numpy()), torch.tensor(ys.numpy()))
    for a, b in zip(per, want):
        close(a, b.numpy(), 1e-8)


@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
def test_grad_of_vmap_equals_grad_of_the_summed_loop(device):
    params = _params(device)
    xs, ys = arr(4, 5, device=device), arr(4, 2, device=device)

    def batched(p):
        return xp.sum(vmap(mlp_loss, in_axes=(None, 0, 0))(p, xs, ys))

    def looped(p):
        return sum(mlp_loss(p, xs[i], ys[i]) for i in range(4))

    for a, b in zip(grad(batched)(params), grad(looped)(params)):
        close(a, b)


def _fd_jacobian(f, x, eps=1e-6):
    x0 = x.numpy()
    cols = []
    for i in range(x0.size):
        d = np.zeros_like(x0).reshape(-1)
        d[i] = eps
        d = d.reshape(x0.shape)
        cols.append((f(xp.asarray(x0 + d)).numpy() - f(xp.asarray(x0 - d)).numpy()) / (2 * eps))
    out = f(x).numpy()
    if not cols:
        return np.zeros(out.shape + x0.shape)
    return np.stack(cols, axis=-1).reshape(out.shape + x0.shape)


def _g(v):
    return xp.sin(v) * xp.sum(v ** 2) + xp.cumulative_sum(v)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(0, 5), seed=st.integers(0, 1000))
def test_jacobians_and_hessian_against_finite_differences_and_torch(n, seed):
    import torch

    x = xp.asarray(np.random.default_rng(seed).standard_normal(n))
    tx = torch.tensor(x.numpy())
    tg = lambda v: torch.sin(v) * torch.sum(v ** 2) + torch.cumsum(v, 0)  # noqa: E731
    jf, jr = jacfwd(_g)(x), jacrev(_g)(x)
    assert jf.shape == jr.shape == (n, n)
    close(jf, jr)
    close(jr, _fd_jacobian(_g, x), 1e-6)
    h = hessian(lambda v: xp.sum(_g(v) ** 2))(x)
    if n:  # torch.func cannot take the Jacobian of a 0-size input (IndexError in select)
        close(jr, torch.func.jacrev(tg)(tx).numpy(), 1e-9)
        close(h, torch.func.hessian(lambda v: torch.sum(tg(v) ** 2))(tx).numpy(), 1e-8)
    close(h, _fd_jacobian(grad(lambda v: xp.sum(_g(v) ** 2)), x), 1e-5)


def test_vmap_composes_with_jvp_vjp_and_second_order():
    x = arr(3, 4)

    def f(v):
        return xp.sum(xp.exp(v) * v)

    _, t = jvp(vmap(f), (x,), (xp.ones_like(x),))
    close(t, np.sum(np.exp(x.numpy()) * (1 + x.numpy()), axis=1))
    out, back = vjp(vmap(f), x)
    (ct,) = back(xp.ones_like(out))
    close(ct, np.exp(x.numpy()) * (1 + x.numpy()))
    per_hess = vmap(hessian(f))(x)  # (3, 4, 4): each example's diagonal Hessian
    for i in range(3):
        v = x.numpy()[i]
        close(per_hess.numpy()[i], np.diag(np.exp(v) * (2 + v)), 1e-8)
    g2 = vmap(grad(grad(lambda s: xp.sin(s) * s)))(x[0])
    v = x.numpy()[0]
    close(g2, 2 * np.cos(v) - v * np.sin(v))


@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
def test_compile_and_vmap_in_both_orders(device):
    params = _params(device)
    xs, ys = arr(6, 5, device=device), arr(6, 2, device=device)
    per_example = vmap(grad(mlp_loss), in_axes=(None, 0, 0))
    want = per_example(params, xs, ys)
    got = compile(per_example)(params, xs, ys)
    inner = vmap(compile(grad(mlp_loss)), in_axes=(None, 0, 0))(params, xs, ys)
    for a, b, c in zip(want, got, inner):
        close(a, b)
        close(a, c)
    # a compiled function under vmap runs one batched callee: the second call reuses it
    f = compile(lambda v: xp.sum(xp.tanh(v) ** 2))
    close(vmap(f)(xs), np.sum(np.tanh(xs.numpy()) ** 2, axis=1))
    close(vmap(f, in_axes=1)(xs), np.sum(np.tanh(xs.numpy()) ** 2, axis=0))


def test_gradient_tape_records_vmapped_work():
    x = arr(3, 4)
    with GradientTape() as tape:
        tape.watch(x)
        y = xp.sum(vmap(lambda r: xp.sum(xp.sin(r)) * r)(x))
    close(tape.gradient(y, x), grad(lambda v: xp.sum(vmap(lambda r: xp.sum(xp.sin(r)) * r)(v)))(x))


def test_vmap_of_lax_primitives_inside_compile_is_traced_once():
    calls = []

    def f(v):
        calls.append(1)
        return lax.reduce_sum(lax.mul(v, v), axes=(0,))

    g = compile(vmap(f))
    for _ in range(3):
        x = arr(5, 3)
        close(g(x), np.sum(x.numpy() ** 2, axis=1))
    assert len(calls) == 1
