"""compile(fn): values and derivatives agree with eager, the signature cache, recompile logs,
static and donated arguments, and every bad input as a typed error."""

from __future__ import annotations

import logging
import threading
import warnings

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tenferro_runtime as tr
from tenferro_ad import GradientTape, grad, hessian, jvp, value_and_grad
from tenferro_core.errors import ArgumentError, ArgumentValueError, ConcretizationError, PluginError
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.compiled import DonatedTensor, RecompileWarning
from tenferro_runtime.graph_prims import call_p
from tenferro_runtime.pipeline import PassWarning


def _t(a):
    return xp.asarray(np.asarray(a))


def loss(w, x):
    h = xp.tanh(x @ w + 0.5)
    return xp.sum(h * h) + xp.sum(w[:1] ** 3)


def _close(a, b, tol=1e-10):
    np.testing.assert_allclose(np.asarray(a.numpy()), np.asarray(b.numpy()), rtol=tol, atol=tol)


@given(st.integers(0, 5), st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**31 - 1))
@example(1, 1, 1, 0)  # torch:cpu: a product's out form was given its own operand's buffer
def test_values_and_gradients_agree_with_eager(n, k, m, seed):
    rng = np.random.default_rng(seed)
    w, x = _t(rng.standard_normal((k, m))), _t(rng.standard_normal((n, k)))
    c = tr.compile(loss)
    _close(c(w, x), loss(w, x))
    _close(grad(c)(w, x), grad(loss)(w, x))
    _close(tr.compile(grad(loss))(w, x), grad(loss)(w, x))
    v1, g1 = tr.compile(value_and_grad(loss, argnums=(0, 1)))(w, x)
    v2, g2 = value_and_grad(loss, argnums=(0, 1))(w, x)
    _close(v1, v2)
    for a, b in zip(g1, g2):
        _close(a, b)
    _close(jvp(c, (w, x), (w, x))[1], jvp(loss, (w, x), (w, x))[1])
    _close(tr.compile(tr.compile(loss))(w, x), loss(w, x))


def test_higher_order_and_nesting_agree_with_eager():
    rng = np.random.default_rng(1)
    w, x = _t(rng.standard_normal((3, 2))), _t(rng.standard_normal((4, 3)))
    c = tr.compile(loss)
    _close(hessian(lambda w: c(w, x))(w), hessian(lambda w: loss(w, x))(w))
    _close(grad(grad(lambda s: c(w * s, x)))(_t(1.3)), grad(grad(lambda s: loss(w * s, x)))(_t(1.3)))
    _close(tr.compile(grad(c))(w, x), grad(loss)(w, x))
    inner = tr.compile(lambda a: xp.sin(a) * a)
    outer = tr.compile(lambda a: inner(a) + inner(a * 2.0))
    graph = outer.lower(w)
    assert all(n.prim is not call_p for n in graph.nodes)  # the inner call was inlined
    _close(outer(w), xp.sin(w) * w + xp.sin(w * 2.0) * (w * 2.0))


def test_gradient_tape_records_one_call_and_differentiates_it():
    rng = np.random.default_rng(2)
    w, x = _t(rng.standard_normal((3, 2))), _t(rng.standard_normal((4, 3)))
    c = tr.compile(loss)
    with GradientTape() as tape:
        tape.watch(w)
        out = c(w, x)
    assert [r[0] for r in tape._records] == [call_p]
    _close(tape.gradient(out, w), grad(loss)(w, x))


def test_pytrees_static_values_and_python_numbers():
    def f(params, x, scale, *, mode):
        y = x @ params["w"] + params["b"]
        return {"out": y * scale if mode == "scale" else y + scale, "n": [x]}

    c = tr.compile(f, static_argnames="mode")
    p = {"w": _t(np.ones((3, 2))), "b": _t(np.zeros(2))}
    x = _t(np.arange(6.0).reshape(2, 3))
    for mode in ("scale", "shift", "scale"):
        got, want = c(p, x, 2.0, mode=mode), f(p, x, 2.0, mode=mode)
        _close(got["out"], want["out"])
        _close(got["n"][0], x)
    assert c.cache_info().misses == 2 and c.cache_info().hits == 1
    c(p, x, 3.0, mode="scale")  # a Python number is static: a new value traces again
    assert c.cache_info().misses == 3


def test_one_trace_over_a_thousand_calls_with_a_fixed_signature():
    traced = []

    def f(x):
        traced.append(1)
        return x * 2.0 + 1.0

    c = tr.compile(f)
    x = _t(np.ones(4))
    for _ in range(1000):
        out = c(x)
    _close(out, x * 3.0)
    assert len(traced) == 1
    info = c.cache_info()
    assert (info.hits, info.misses, info.currsize) == (999, 1, 1)


def test_bounded_under_ten_thousand_signatures():
    c = tr.compile(lambda x, k: x, static_argnums=1, maxsize=64, recompile_warning=10**6)
    x = _t(np.ones(2))
    for k in range(10_000):
        c(x, k)
    info = c.cache_info()
    assert info.currsize == 64 and info.misses == 10_000 and info.maxsize == 64
    c(x, 9_999)
    assert c.cache_info().hits == 1


def test_every_recompile_logs_why_and_too_many_warn_once(caplog):
    c = tr.compile(lambda x, y: x + y, recompile_warning=2)
    caplog.set_level(logging.INFO, logger="tenferro_runtime.compile")
    c(_t(np.ones(3)), _t(np.ones(3)))
    c(_t(np.ones(4)), _t(np.ones(4)))
    assert "argument x changed from float64[3]" in caplog.text and "to float64[4]" in caplog.text
    with pytest.warns(RecompileWarning, match="traced 3 times"):
        c(_t(np.ones(4, np.float32)), _t(np.ones(4)))
    assert "float32[4]" in caplog.text
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c(_t(np.ones(6)), _t(np.ones(6)))  # warned once only


def test_lower_prints_the_optimized_graph_with_call_sites():
    c = tr.compile(loss)
    text = str(c.lower(_t(np.ones((2, 2))), _t(np.ones((3, 2)))))
    assert "dot_general" in text and "test_compile.py:" in text


def test_donated_tensors_are_unusable_afterwards():
    c = tr.compile(lambda x, y: x * 2.0 + y, donate_argnums=0)
    x, y = _t(np.arange(4.0)), _t(np.ones(4))
    out = c(x, y)
    np.testing.assert_array_equal(out.numpy(), np.arange(4.0) * 2 + 1)
    assert type(x) is DonatedTensor and "donated" in repr(x)
    with pytest.raises(ArgumentError, match="donated to a compiled function"):
        x + y
    with pytest.raises(ArgumentError, match="donated"):
        x.numpy()
    np.testing.assert_array_equal(y.numpy(), np.ones(4))  # not donated: untouched


def test_donation_invalidates_exactly_the_donated_arguments_on_every_call():
    """The donated arguments' tensors are found by where they sit in the call (after a static
    argument, a pytree before them, a NumPy leaf); each call of the signature invalidates its
    own donated tensors and no other."""
    c = tr.compile(lambda s, a, b, d: ({k: v * s for k, v in a.items()}, [t + d for t in b]),
                   static_argnums=0, donate_argnums=(2,))
    for _ in range(3):  # the first call traces; the others take the cached positions
        a = {"p": _t(np.ones(2)), "q": _t(np.zeros(3))}
        b = [_t(np.arange(2.0)), _t(np.arange(3.0))]
        out_a, out_b = c(2.0, a, b, np.ones(1))
        assert all(type(t) is DonatedTensor for t in b)
        assert all(type(t) is not DonatedTensor for t in a.values())
        np.testing.assert_array_equal(out_b[1].numpy(), np.arange(3.0) + 1)
        np.testing.assert_array_equal(a["p"].numpy(), np.ones(2))


def test_threads_share_one_compiled_function():
    c = tr.compile(lambda x: xp.sum(xp.tanh(x)))
    start = threading.Event()
    results, errors = {}, []

    def work(i):
        start.wait()
        try:
            x = _t(np.full((i + 1,), 0.5))
            results[i] = [float(c(x)) for _ in range(20)]
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join()
    assert not errors
    for i, vals in results.items():
        assert vals == [pytest.approx((i + 1) * np.tanh(0.5))] * 20


# ---- bad input ------------------------------------------------------------------------


def test_python_control_flow_on_traced_values_names_static_argnums():
    def f(x):
        return x if float(xp.sum(x)) > 0 else -x

    with pytest.raises(ConcretizationError, match="static_argnums"):
        tr.compile(f)(_t(np.ones(2)))


@pytest.mark.parametrize("kwargs, cls, builtin, message", [
    ({"static_argnums": -1}, ArgumentValueError, ValueError, "static_argnums must be non-negative"),
    ({"donate_argnums": (0, -2)}, ArgumentValueError, ValueError, "donate_argnums must be non-negative"),
    ({"static_argnums": "0"}, ArgumentError, TypeError, "static_argnums must be a non-negative int"),
    ({"maxsize": 0}, ArgumentValueError, ValueError, "maxsize must be an int >= 1, got 0"),
    ({"maxsize": 2.5}, ArgumentError, TypeError, "maxsize must be an int >= 1, got float"),
    ({"recompile_warning": "16"}, ArgumentError, TypeError, "recompile_warning must be an int >= 0, got str"),
    ({"recompile_warning": -1}, ArgumentValueError, ValueError, "recompile_warning must be an int >= 0"),
])
def test_bad_compile_options_are_refused_at_compile_time(kwargs, cls, builtin, message):
    """A value error is a ValueError, a type error a TypeError, raised by compile() itself (not
    at the first or second trace), and nothing is cached."""
    def fn(x, y=1):
        return x

    with pytest.raises(cls, match=message) as info:
        tr.compile(fn, **kwargs)
    assert isinstance(info.value, builtin)


def test_unhashable_static_args_and_bad_indices_are_typed_errors():
    c = tr.compile(lambda x, shape: xp.reshape(x, shape), static_argnums=1)
    with pytest.raises(ArgumentError, match="must be hashable.*tuple instead of a list"):
        c(_t(np.ones(4)), [2, 2])
    _close(c(_t(np.ones(4)), (2, 2)), _t(np.ones((2, 2))))
    with pytest.raises(ArgumentError, match="static_argnums includes 3.*2 positional"):
        tr.compile(lambda x, y: x, static_argnums=3)(_t(1.0), _t(2.0))
    with pytest.raises(ArgumentError, match="non-negative int"):
        tr.compile(lambda x: x, static_argnums=(True,))
    with pytest.raises(ArgumentError, match="both static and donated"):
        tr.compile(lambda x: x, static_argnums=0, donate_argnums=0)
    with pytest.raises(ArgumentError, match="not a parameter"):
        tr.compile(lambda x: x, static_argnames="y")
    with pytest.raises(ArgumentError, match="unknown pass"):
        tr.compile(lambda x: x, passes="no_such_pass")
    with pytest.raises(ArgumentError, match="neither a tensor nor a hashable"):
        tr.compile(lambda x: x)([_t(1.0), {1}])
    with pytest.raises(ArgumentError, match="returned a float leaf"):
        tr.compile(lambda x: 1.0)(_t(1.0))


def _broken_runtime_pass(monkeypatch, fn):
    rt = tr.default_runtime()
    monkeypatch.setitem(rt.passes, "broken", (fn, 450.0, "test"))


def _retyped(graph):
    """The last node declares a float32 result its abstract eval does not give."""
    from tenferro_core.avals import Aval
    from tenferro_core.dtypes import float32
    from tenferro_runtime.graph import Node, Var

    last = graph.nodes[-1]
    a = last.outputs[0].aval
    out = Var(Aval(a.shape, float32, a.device))
    node = Node(last.prim, last.inputs, last.params, [out], last.site)
    return graph.replace(nodes=[*graph.nodes[:-1], node], outputs=[out])


@pytest.mark.parametrize("bad", [
    lambda g: 1 / 0,
    _retyped,
    lambda g: g.replace(outputs=[]),  # changes the signature
    lambda g: None,
])
def test_a_failing_pass_warns_and_the_function_runs_unoptimized(monkeypatch, bad):
    _broken_runtime_pass(monkeypatch, bad)
    c = tr.compile(lambda x: xp.exp(x) * 2.0 + x[::-1])
    x = _t(np.arange(3.0))
    with pytest.warns(PassWarning, match="'broken'") as rec:
        out = c(x)
    assert "PluginError" in str(rec[0].message) or "pass 'broken'" in str(rec[0].message)
    assert isinstance(c.lower(x).meta["pass_error"], PluginError)
    _close(out, xp.exp(x) * 2.0 + x[::-1])


def test_passes_argument_and_environment_select_passes(monkeypatch):
    f = lambda x: xp.exp(x) * 1.0 + lax.neg(lax.neg(x))  # noqa: E731
    x = _t(np.arange(3.0))
    none = tr.compile(f, passes=())
    assert len(none.lower(x).nodes) == len(tr.trace(f, x).nodes)
    monkeypatch.setenv("TENFERRO_PASSES", "none")
    assert len(tr.compile(f).lower(x).nodes) == len(tr.trace(f, x).nodes)
    monkeypatch.setenv("TENFERRO_PASSES", "bogus")
    with pytest.raises(ArgumentError, match="TENFERRO_PASSES"):
        tr.compile(f)(x)


def test_structure_is_part_of_the_signature():
    c = tr.compile(lambda t: sum(xp.sum(v) for v in tr.pytree.tree_leaves(t)))
    a, b = _t(np.ones(2)), _t(np.ones(3))
    calls = [(a, b), [a, b], {"x": a, "y": b}, {"x": a, "z": b}, (a, (b, None)), (a, (b,)),
             (a, b), [a, b], {"x": a, "y": b}, {"x": a, "z": b}, (a, (b, None)), (a, (b,))]
    for t in calls:
        np.testing.assert_allclose(float(c(t)), 5.0)
    info = c.cache_info()
    assert (info.misses, info.hits) == (6, 6)
    c((b, a))  # the same structure, other avals
    assert c.cache_info().misses == 7


def test_ieee_special_values_are_as_silent_as_in_eager():
    """In a fresh interpreter (pytest installs warning filters of its own): log(0) or cos(inf)
    warn neither eagerly nor from compiled code, whichever executor runs it."""
    import os
    import subprocess
    import sys

    code = """if True:
        import numpy as np, tenferro_runtime as tr
        from tenferro_runtime import array_api as xp
        x = xp.asarray(np.array([0.0, -1.0, np.inf]))
        f = lambda v: xp.log(v) * xp.cos(v) - v
        want = f(x).numpy()
        for passes in ((), ("memory",), None):
            np.testing.assert_array_equal(tr.compile(f, passes=passes)(x).numpy(), want)
    """
    env = {k: v for k, v in os.environ.items() if k != "TENFERRO_CHECK_KERNELS"}  # kernels unwrapped
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=env)
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr, run.stderr


def test_lower_reads_the_signature_the_call_cached():
    c = tr.compile(loss)
    w, x = _t(np.ones((2, 2))), _t(np.ones((3, 2)))
    c(w, x)
    assert c.lower(w, x) is c.lower(w, x)
    assert c.cache_info().misses == 1 and c.cache_info().currsize == 1
