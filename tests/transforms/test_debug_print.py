"""`tenferro_runtime.debug.print`: concrete values printed at run time under compile, grad,
vmap (str.format semantics, program order, kept by DCE), and `print(tracer)` shows the aval
and the hint instead of raising."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tenferro_ad as ad
from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, debug, trace
from tenferro_runtime.debug import debug_print_p
from tenferro_runtime.plan import build_plan

FLOATS = hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=4),
                    elements=st.floats(-10, 10))


def f(x):
    debug.print("x={x} total={}", xp.sum(x), x=x)
    y = xp.sin(x)
    debug.print("y={}", y)
    return xp.sum(y * 2.0)


def expected(a):
    return [f"x={a} total={np.sum(a)}", f"y={np.sin(a)}"]


def lines(capsys):
    """The printed lines (a multi-line array value joined back into its line)."""
    return split(capsys.readouterr().out)


def split(text):
    out = []
    for line in text.splitlines():
        if out and line.startswith(" "):
            out[-1] += "\n" + line
        else:
            out.append(line)
    return out


@settings(max_examples=15, deadline=None)
@given(FLOATS)
def test_prints_concrete_values_eager_compiled_and_differentiated(a):
    import contextlib
    import io

    x = xp.asarray(a)
    routes = {
        "eager": lambda: f(x),
        "compile": lambda: compile(f)(x),
        "grad (tape)": lambda: ad.grad(f)(x),
        "compile(grad)": lambda: compile(ad.grad(f))(x),
        "jvp": lambda: ad.jvp(f, (x,), (xp.ones_like(x),)),
        "vjp": lambda: ad.vjp(f, x)[1](xp.asarray(1.0)),
    }
    want = expected(a)
    for name, run in routes.items():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            run()
        assert split(buf.getvalue()) == want, name


def test_gradients_are_unchanged_and_compiled_prints_every_call(capsys):
    x = xp.asarray([0.5, -1.0, 2.0])
    g = ad.grad(f)(x)
    np.testing.assert_allclose(g.numpy(), 2 * np.cos(x.numpy()))
    c = compile(f)
    c(x)
    c(x)
    assert lines(capsys) == expected(x.numpy()) * 3
    x2 = xp.asarray([1.0, 2.0])
    compile(ad.grad(f))(x2)
    assert lines(capsys) == expected(x2.numpy())


def test_grad_of_compiled_prints_the_forward_values(capsys):
    x = xp.asarray([0.25, 3.0])
    g = ad.grad(compile(f))(x)
    np.testing.assert_allclose(g.numpy(), 2 * np.cos(x.numpy()))
    out = lines(capsys)
    assert out[:2] == expected(x.numpy())
    assert set(out) == set(expected(x.numpy()))  # the tape's backward may run the forward again


def test_second_order_prints_primal_values(capsys):
    x = xp.asarray([0.5, 1.5])
    h = ad.grad(lambda y: xp.sum(ad.grad(f)(y) ** 2))(x)
    np.testing.assert_allclose(h.numpy(), -8 * np.cos(x.numpy()) * np.sin(x.numpy()), rtol=1e-12)
    out = lines(capsys)
    assert out and set(out) == set(expected(x.numpy()))


def test_kept_by_dce_and_in_program_order(capsys):
    def g(x):
        debug.print("first {}", x)
        unused = xp.exp(x)
        debug.print("second {}", unused)  # the only use of `unused`
        debug.print("third {:.2f}", xp.sum(x))
        return x * 2.0

    x = xp.asarray([1.0, 2.0])
    graph = compile(g).lower(x)
    assert [n.prim for n in graph.nodes].count(debug_print_p) == 3
    assert build_plan(graph) is not None  # runs in the plan, not node by node
    compile(g)(x)
    assert lines(capsys) == [f"first {x.numpy()}", f"second {np.exp(x.numpy())}", "third 3.00"]
    assert [n.prim for n in trace(g, x).nodes].count(debug_print_p) == 3


def test_vmap_prints_the_batched_values(capsys):
    a = np.arange(6.0).reshape(2, 3)
    out = ad.vmap(lambda x: (debug.print("row {}", x), xp.sum(x))[1])(xp.asarray(a))
    np.testing.assert_allclose(out.numpy(), a.sum(1))
    assert lines(capsys) == [f"row {a}"]
    ad.vmap(lambda x: (debug.print("col {} {}", x, 7), x)[1], in_axes=1)(xp.asarray(a))
    assert lines(capsys) == [f"col {a.T} 7"]
    compile(ad.vmap(lambda x: (debug.print("c {}", x), x * 1.0)[1]))(xp.asarray(a))
    assert lines(capsys) == [f"c {a}"]


def test_static_values_and_specs(capsys):
    x = xp.asarray(1.23456)
    compile(lambda x: (debug.print("{:.3f} {} {name}", x, [1, 2], name="n"), x)[1])(x)
    assert lines(capsys) == ["1.235 [1, 2] n"]


def test_print_of_a_tracer_shows_the_aval_and_hint(capsys):
    def g(x):
        print(x)
        print(f"{x} {x:.2f}")
        return x

    compile(g)(xp.ones((3, 4), dtype=xp.float32))
    out = lines(capsys)
    assert out[0] == ("Traced<float32[3,4]> (inside compile(g): use tenferro_runtime.debug.print "
                      "to see its value at run time)")
    assert out[1].startswith("Traced<float32[3,4]> (inside compile(g)")
    ad.jvp(g, (xp.ones(2),), (xp.ones(2),))
    assert "inside grad/jvp" in lines(capsys)[0]
    leaked = []
    compile(lambda x: leaked.append(x) or x)(xp.ones(2))
    assert "finished" in str(leaked[0])


def test_errors_are_typed_and_raised_before_running(capsys):
    x = xp.asarray([1.0])
    with pytest.raises(ArgumentError, match="format string"):
        debug.print(x)
    with pytest.raises(ArgumentError, match=r"names field\(s\) \['x'\].*keyword\(s\) \[\]"):
        compile(lambda x: (debug.print("{x}", x), x)[1])(x)
    with pytest.raises(ArgumentError, match="1 positional"):
        debug.print("{} {}", x)
    with pytest.raises(ArgumentError, match="malformed"):
        debug.print("{", x)
    assert lines(capsys) == []
