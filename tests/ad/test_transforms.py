"""The AD machinery: traced transforms, nesting, tape, custom rules, errors (float64 vs FD)."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_ad as ad
from tenferro_core import define_op
from tenferro_core.errors import ArgumentError, DTypeError, MissingRuleError, ShapeError, TenferroError
from tenferro_runtime import Runtime, compile, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import eval_graph, trace

RNG = np.random.default_rng(0)


def t(a):
    return xp.asarray(np.asarray(a, dtype=np.float64))


def fd_grad(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of a scalar function of a NumPy array."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (float(f(t(x + e))) - float(f(t(x - e)))) / (2 * h)
    return g


def f_composite(x):
    return xp.sum(xp.tanh(x) * xp.exp(-x * x) + xp.sin(x) ** 2) / 3.0


def test_grad_matches_finite_differences():
    x = RNG.standard_normal((3, 2))
    got = ad.grad(f_composite)(t(x)).numpy()
    np.testing.assert_allclose(got, fd_grad(f_composite, x), rtol=1e-6, atol=1e-8)


def test_value_and_grad_argnums_and_aux():
    def f(a, b):
        return xp.sum(a * b * b), {"b2": b * b}

    a, b = t([1.0, 2.0]), t([3.0, -1.0])
    (val, aux), (ga, gb) = ad.value_and_grad(f, argnums=(0, 1), has_aux=True)(a, b)
    assert float(val) == pytest.approx(1 * 9 + 2 * 1)
    np.testing.assert_allclose(ga.numpy(), [9.0, 1.0])
    np.testing.assert_allclose(gb.numpy(), [6.0, -4.0])
    np.testing.assert_allclose(aux["b2"].numpy(), [9.0, 1.0])


def test_pytree_inputs_and_outputs():
    def f(params):
        return xp.sum(params["w"] * params["b"][0])

    p = {"w": t([1.0, 2.0]), "b": [t([3.0, 4.0])]}
    g = ad.grad(f)(p)
    np.testing.assert_allclose(g["w"].numpy(), [3.0, 4.0])
    np.testing.assert_allclose(g["b"][0].numpy(), [1.0, 2.0])


def test_second_order_grad_grad():
    f = lambda x: xp.sum(xp.sin(x) * x)  # noqa: E731
    x = RNG.standard_normal(4)
    d2 = ad.grad(lambda y: xp.sum(ad.grad(f)(y)))(t(x)).numpy()
    np.testing.assert_allclose(d2, 2 * np.cos(x) - x * np.sin(x), rtol=1e-10)


def test_jacobians_and_hessian():
    def f(x):
        return xp.stack([xp.sum(x * x), xp.prod(xp.sin(x))])

    x = RNG.standard_normal(3)
    jf, jr = ad.jacfwd(f)(t(x)).numpy(), ad.jacrev(f)(t(x)).numpy()
    np.testing.assert_allclose(jf, jr, rtol=1e-12)
    np.testing.assert_allclose(jf[0], 2 * x, rtol=1e-12)
    h = ad.hessian(lambda y: xp.sum(y * y * y))(t(x)).numpy()
    np.testing.assert_allclose(h, np.diag(6 * x), atol=1e-12)
    h2 = ad.jacfwd(ad.jacrev(lambda y: xp.sum(xp.exp(y[0] * y[1]))))(t(x)).numpy()
    e = np.exp(x[0] * x[1])
    np.testing.assert_allclose(h2[:2, :2], [[x[1] ** 2 * e, e + x[0] * x[1] * e],
                                            [e + x[0] * x[1] * e, x[0] ** 2 * e]], rtol=1e-10)


def test_jvp_and_linearize_agree():
    x, v = t(RNG.standard_normal(3)), t(RNG.standard_normal(3))
    f = lambda y: xp.exp(y) * xp.cos(y)  # noqa: E731
    out, tangent = ad.jvp(f, (x,), (v,))
    out2, f_jvp = ad.linearize(f, x)
    np.testing.assert_allclose(out.numpy(), out2.numpy())
    np.testing.assert_allclose(tangent.numpy(), f_jvp(v).numpy(), rtol=1e-12)
    assert "mul" in str(f_jvp.graph)


def test_tape_matches_traced_grad_and_nests():
    x = t(RNG.standard_normal((2, 3)))
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = f_composite(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), ad.grad(f_composite)(x).numpy(), rtol=1e-12)
    with ad.GradientTape() as outer:
        outer.watch(x)
        with ad.GradientTape() as inner:
            inner.watch(x)
            z = xp.sum(xp.sin(x))
        g = inner.gradient(z, x)
    np.testing.assert_allclose(outer.gradient(g, x).numpy(), -np.sin(x.numpy()), rtol=1e-12)


def test_tape_persistence_and_stop_recording():
    x = t([1.0, 2.0])
    with ad.GradientTape() as tape:
        tape.watch(x)
        y = xp.sum(x * x)
    tape.gradient(y, x)
    with pytest.raises(TenferroError, match="persistent=True"):
        tape.gradient(y, x)
    with ad.GradientTape(persistent=True) as tape:
        tape.watch(x)
        a = xp.sum(x * x)
        with tape.stop_recording():
            b = xp.sum(x * x)
    np.testing.assert_allclose(tape.gradient(a, x).numpy(), [2.0, 4.0])
    np.testing.assert_allclose(tape.gradient(b, x).numpy(), [0.0, 0.0])


def test_stop_gradient():
    x = t([1.0, 2.0])
    g = ad.grad(lambda y: xp.sum(y * ad.stop_gradient(y)))(x)
    np.testing.assert_allclose(g.numpy(), [1.0, 2.0])


def _naive_log1pexp(x):
    return xp.log(1.0 + xp.exp(x))


def test_custom_jvp_and_vjp_stay_finite_where_naive_overflows():
    @ad.custom_jvp
    def log1pexp(x):
        return xp.logaddexp(x, xp.zeros_like(x))

    @log1pexp.defjvp
    def _(primals, tangents):
        (x,), (tx,) = primals, tangents
        return log1pexp(x), tx * (1.0 / (1.0 + xp.exp(-x)))

    @ad.custom_vjp
    def log1pexp_v(x):
        return xp.logaddexp(x, xp.zeros_like(x))

    log1pexp_v.defvjp(lambda x: (log1pexp_v(x), x), lambda x, ct: (ct / (1.0 + xp.exp(-x)),))
    x = t([-20.0, 0.0, 800.0])
    naive = ad.grad(lambda y: xp.sum(_naive_log1pexp(y)))(x).numpy()
    assert not np.isfinite(naive).all()
    for fn in (log1pexp, log1pexp_v):
        g = ad.grad(lambda y, f=fn: xp.sum(f(y)))(x).numpy()
        np.testing.assert_allclose(g, 1 / (1 + np.exp(-x.numpy())), rtol=1e-12)
    assert ad.jvp(log1pexp, (x,), (xp.ones_like(x),))[1].numpy()[2] == pytest.approx(1.0)
    with pytest.raises(MissingRuleError, match="reverse mode only"):
        ad.jvp(log1pexp_v, (x,), (xp.ones_like(x),))


def test_bad_input_errors():
    x = t([1.0, 2.0])
    with pytest.raises(DTypeError, match="floating and complex"):
        ad.grad(lambda y: xp.sum(y))(xp.asarray([1, 2]))
    with pytest.raises(ArgumentError, match="argnums"):
        ad.grad(lambda a, b: xp.sum(a * b), argnums=2)(x, x)
    with pytest.raises(ShapeError, match="real scalar"):
        ad.grad(lambda y: y * 2.0)(x)
    _, vjp_fn = ad.vjp(lambda y: y * 2.0, x)
    with pytest.raises(ShapeError, match="cotangent 0 must match"):
        vjp_fn(t([1.0, 2.0, 3.0]))
    with pytest.raises(ShapeError, match="cotangent 0 must match"):
        vjp_fn(xp.asarray([1.0, 2.0], dtype=xp.float32))

    @ad.custom_vjp
    def f(y):
        return y * 2.0

    f.defvjp(lambda y: (y * 2.0, None), lambda r, ct: ct * 2.0)
    with pytest.raises(ArgumentError, match="tuple"):
        ad.grad(lambda y: xp.sum(f(y)))(x)


def test_missing_rule_names_the_extension_op():
    import tenferro_ad.plugin as ad_plugin
    import tenferro_numpy.plugin as numpy_plugin
    from tenferro_core.plugins import hookimpl

    op = define_op("mypkg.twice.v1", lambda a: (a.shape, a.dtype))

    class Plugin:
        __name__ = "mypkg"

        @hookimpl
        def tenferro_register(self, registry):
            registry.add_op(op)
            registry.add_kernel("numpy", op, lambda a: a * 2)

    with use_runtime(Runtime([numpy_plugin, Plugin()])):
        x = t([1.0])
        with pytest.raises(MissingRuleError, match=r"mypkg\.twice\.v1.*add_rule"):
            ad.grad(lambda y: xp.sum(op.bind(y)))(x)
    with use_runtime(Runtime([numpy_plugin, ad_plugin, Plugin()])):
        x = t([1.0])
        both = compile(lambda y: (op.bind(y), op.bind(y)))
        with ad.GradientTape() as tape:  # a compiled call recorded: its forward pass runs
            tape.watch(x)
            a, b = both(x)
            loss = xp.sum(a)
        np.testing.assert_array_equal(a.numpy(), [2.0])
        with pytest.raises(MissingRuleError, match=r"mypkg\.twice\.v1.*add_rule"):
            tape.gradient(loss, x)


def test_linearize_and_transpose_are_printable_graph_transforms():
    x, v, ct = t([0.5, 1.5]), t([1.0, -2.0]), t([3.0, 0.25])
    f = lambda y: xp.sin(y) * y  # noqa: E731
    _, f_jvp = ad.linearize(f, x)
    lin, tr = f_jvp.graph, ad.transpose_graph(f_jvp.graph)
    assert "mul" in str(lin) and "mul" in str(tr)
    (back,) = eval_graph(tr, ct)
    _, vjp_fn = ad.vjp(f, x)
    np.testing.assert_allclose(back.numpy(), vjp_fn(ct)[0].numpy(), rtol=1e-12)
    forward = float(xp.sum(ct * f_jvp(v)))
    assert forward == pytest.approx(float(xp.sum(back * v)), rel=1e-12)


def test_trace_prints_graph_with_call_sites():
    def f(x, y):
        return xp.sum(xp.sin(x) * y)

    g = trace(f, t([1.0, 2.0]), t([3.0, 4.0]))
    text = str(g)
    assert "sin a" in text and "reduce_sum" in text and "test_transforms.py" in text
    with pytest.raises(ShapeError, match=r"test_transforms\.py:\d+"):
        trace(lambda x: xp.reshape(x, (3,)), t([1.0, 2.0]))


def test_compiled_graphs_run_without_stop_gradient_and_still_differentiate_through_it():
    import tenferro_runtime as tr

    x = t([1.0, 2.0])
    f = tr.compile(lambda y: xp.sum(y * ad.stop_gradient(xp.exp(y))))
    assert "stop_gradient" not in str(f.lower(x))
    np.testing.assert_allclose(f(x).numpy(), np.sum([1.0, 2.0] * np.exp([1.0, 2.0])))
    np.testing.assert_allclose(ad.grad(f)(x).numpy(), np.exp([1.0, 2.0]))
    h = tr.compile(lambda y: ad.stop_gradient(y))  # an output that is the input
    np.testing.assert_array_equal(h(x).numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(ad.grad(lambda y: xp.sum(h(y)))(x).numpy(), [0.0, 0.0])
