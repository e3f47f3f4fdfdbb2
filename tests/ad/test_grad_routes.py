"""Eager `grad` runs on a GradientTape, `grad` under a transformation runs `vjp`: both give
the same gradients, with the same rules (custom_jvp/custom_vjp functions included), the same
treatment of closed-over and repeated tensors, and the same errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, tracing

X = np.array([0.5, -1.25, 2.0, 3.0])


def _t(a):
    return xp.asarray(np.asarray(a, dtype=np.float64))


def both_routes(fn, *args, **kw):
    """(eager grad: the tape route, vjp route: the same grad under compile)."""
    assert tracing.interpreters() is tracing.BOTTOM
    eager = ad.grad(fn, **kw)(*args)
    traced = compile(lambda *a: ad.grad(fn, **kw)(*a))(*args)
    return eager, traced


def _close(a, b):
    for u, v in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-12)


@ad.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda r, ct: (xp.clip(ct, -0.1, 0.1),))


@ad.custom_jvp
def scaled_tangent(x):
    return xp.sin(x)


scaled_tangent.defjvp(lambda p, t: (xp.sin(p[0]), 10.0 * t[0]))  # deliberately not cos


def test_custom_vjp_rule_is_used_on_a_tape_and_by_eager_grad():
    x = _t(X)

    def f(y):
        return xp.sum(clip_gradient(y) * 5.0)

    eager, traced = both_routes(f, x)
    np.testing.assert_array_equal(eager.numpy(), np.full(4, 0.1))
    _close(eager, traced)
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = f(x)
    np.testing.assert_array_equal(tape.gradient(y, x).numpy(), np.full(4, 0.1))


def test_custom_jvp_rule_is_used_on_a_tape_and_by_eager_grad():
    x = _t(X)

    def f(y):
        return xp.sum(scaled_tangent(y * 2.0))

    eager, traced = both_routes(f, x)
    np.testing.assert_allclose(eager.numpy(), np.full(4, 20.0))
    _close(eager, traced)


def test_closed_over_argument_is_a_constant():
    """grad(lambda w: w * x)(x): the x closed over is a constant, as under vjp."""
    x = _t(X)
    eager, traced = both_routes(lambda w: xp.sum(w * x), x)
    np.testing.assert_allclose(eager.numpy(), X)
    _close(eager, traced)


def test_one_tensor_passed_twice_gives_two_partials():
    x = _t(X)
    eager, traced = both_routes(lambda a, b: xp.sum(a * xp.sin(b)), x, x, argnums=(0, 1))
    np.testing.assert_allclose(eager[0].numpy(), np.sin(X))
    np.testing.assert_allclose(eager[1].numpy(), X * np.cos(X))
    _close(eager, traced)


def test_pytree_arguments_aux_and_unused_inputs():
    p = {"w": _t(X), "b": _t([1.0]), "unused": _t([2.0, 3.0])}

    def f(q, scale):
        v = xp.sum(xp.tanh(q["w"]) * scale) + xp.sum(q["b"] ** 2)
        return v, {"v": v}

    (g, aux) = ad.grad(f, has_aux=True)(p, 3.0)
    traced, _ = compile(lambda q: ad.grad(f, has_aux=True)(q, 3.0))(p)
    for k in p:
        np.testing.assert_allclose(g[k].numpy(), traced[k].numpy(), rtol=1e-12)
    np.testing.assert_array_equal(g["unused"].numpy(), [0.0, 0.0])
    np.testing.assert_allclose(float(aux["v"]), np.sum(np.tanh(X) * 3.0) + 1.0)


def test_repeated_calls_replay_and_stay_exact():
    """The second call builds the tape's backward graph, later calls replay it: every call
    gives the vjp route's gradient, for new values of the same signature too."""
    rng = np.random.default_rng(0)
    w = _t(rng.standard_normal((5, 3)))
    g = ad.grad(lambda w, x: xp.sum(xp.maximum(x @ w, 0.0) ** 2))
    for _ in range(4):
        x = _t(rng.standard_normal((2, 5)))
        _close(g(w, x), compile(g)(w, x))


def test_errors_match_the_vjp_route():
    x = _t(X)
    for route in (lambda f: ad.grad(f)(x), lambda f: compile(ad.grad(f))(x)):
        with pytest.raises(ShapeError, match="real scalar"):
            route(lambda y: y * 2.0)
        with pytest.raises(ArgumentError, match="must be a tenferro Tensor"):
            route(lambda y: "not a tensor")
    with pytest.raises(ArgumentError, match="pair"):
        ad.grad(lambda y: xp.sum(y), has_aux=True)(x)


def test_grad_inside_a_tape_is_second_order():
    x = _t(X)
    with ad.GradientTape() as tape:
        tape.watch(x)
        g = ad.grad(lambda y: xp.sum(xp.sin(y) * y))(x)
        s = xp.sum(g)
    np.testing.assert_allclose(tape.gradient(s, x).numpy(), 2 * np.cos(X) - X * np.sin(X), rtol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=1, max_size=6), st.floats(0.1, 2.0))
def test_routes_agree_on_generated_inputs(values, scale):
    x = _t(values)

    def f(y):
        z = xp.where(y > 0, xp.exp(-y * scale), y**2)
        return xp.sum(clip_gradient(z) * xp.tanh(y)) / (1.0 + xp.sum(y * y))

    eager, traced = both_routes(f, x)
    _close(eager, traced)
