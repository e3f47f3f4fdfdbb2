"""`scan` and `map` against Python loops on generated programs (eager and compiled, numpy:cpu
and torch:cpu, forwards and reversed), their gradients against finite differences (second
order), vmap, and a compiled 1,000-step scan traced once into one sub-graph."""

from __future__ import annotations

import numpy as np
import pytest
from cf_programs import DEVICES, close, programs, run, values
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_ad.testing import check_grads
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax
from tenferro_runtime.control_flow_prims import scan_p


def python_scan(f, init, xs, reverse=False):
    idx = range(len(xs))[::-1] if reverse else range(len(xs))
    c, ys = init, {}
    for i in idx:
        c, ys[i] = f(c, xs[i])
    return c, np.stack([ys[i] for i in range(len(xs))]) if len(xs) else None


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=10, deadline=None)
@given(programs, programs, st.integers(0, 5), st.booleans(), st.integers(0, 2**16), st.booleans())
def test_scan_equals_python_loop(device, p_c, p_y, length, reverse, seed, compiled):
    xs0, c0 = values(seed, length, 2), values(seed + 1, 2)

    def body(lib_ref):
        def f(c, x):
            return run(p_c, c, lib_ref) * 0.5 + x, run(p_y, c * x, lib_ref)
        return f

    def f(c, xs):
        return lax.scan(body(False), c, xs, reverse=reverse)

    fn = compile(f) if compiled else f
    c, ys = fn(xp.asarray(c0, device=device), xp.asarray(xs0, device=device))
    want_c, want_ys = python_scan(body(True), c0, xs0, reverse)
    close(c, want_c)
    assert ys.shape == (length, 2)
    if length:
        close(ys, want_ys)


@pytest.mark.parametrize("device", DEVICES)
def test_pytrees_length_without_xs_and_map(device):
    x = xp.asarray(np.arange(6.0).reshape(3, 2), device=device)
    def body(c, d):
        return (c[0] + d["a"], c[1] + 1), {"s": xp.sum(d["a"]), "b": d["b"] * 2}

    (c, n), ys = lax.scan(body, (xp.zeros(2, device=device), 0), {"a": x, "b": x[:, 0]})
    close(c, [6.0, 9.0])
    assert n.item() == 3
    close(ys["s"], [1.0, 5.0, 9.0])
    close(ys["b"], [0.0, 4.0, 8.0])
    c, none = lax.scan(lambda c, _: (c * 2.0, None), 1.0, None, length=4)
    assert c.item() == 16.0 and none is None
    close(lax.map(lambda r: xp.sum(r * r), x), [1.0, 13.0, 41.0])


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=6, deadline=None)
@given(programs, st.integers(1, 4), st.booleans(), st.integers(0, 2**16))
def test_scan_gradients_match_finite_differences(device, prog, length, reverse, seed):
    xs = xp.asarray(values(seed, length, 2), device=device)
    w = xp.asarray(values(seed + 1, 2), device=device)

    def f(w, xs):  # w is closed over by the body: lifted to a loop constant
        c, ys = lax.scan(lambda c, x: (run(prog, c) * w + x, xp.sin(c * x)),
                         xp.ones(2, device=device) * 0.5, xs, reverse=reverse)
        return xp.sum(c) + xp.sum(ys * ys)

    check_grads(f, (w, xs), order=2, atol=1e-5, rtol=1e-5)
    g = ad.grad(f, argnums=(0, 1))
    want = g(w, xs)
    for got in (compile(g)(w, xs), ad.grad(compile(f), argnums=(0, 1))(w, xs)):
        close(got[0], want[0].numpy())
        close(got[1], want[1].numpy())


def test_vmap_of_scan_against_a_loop():
    xs, w = xp.asarray(values(5, 4, 3, 2)), xp.asarray(values(6, 4, 2))

    def f(xs, w):
        return lax.scan(lambda c, x: (c * w + x, xp.sum(c)), xp.zeros(2), xs)

    got = ad.vmap(f)(xs, w)
    for i in range(4):
        want = f(xs[i], w[i])
        close(got[0][i], want[0].numpy())
        close(got[1][i], want[1].numpy())
    got = ad.vmap(f, in_axes=(1, None))(xs, w[0])  # xs batched on the scanned axis's neighbour
    for i in range(3):
        close(got[0][i], f(xs[:, i], w[0])[0].numpy())
        close(got[1][i], f(xs[:, i], w[0])[1].numpy())


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_1000_step_scan_is_traced_once_into_one_sub_graph(device):
    calls = []

    def step(c, x):
        calls.append(1)
        return c * 0.999 + xp.sin(x), c

    f = compile(lambda c, xs: lax.scan(step, c, xs))
    xs0 = values(1, 1000)
    xs = xp.asarray(xs0, device=device)
    c, ys = f(xp.asarray(0.0, device=device), xs)
    c2, _ = f(xp.asarray(1.0, device=device), xs)
    assert len(calls) == 1  # traced once, neither unrolled nor retraced per step or per call
    graph = f.lower(xp.asarray(0.0, device=device), xs)
    scans = [n for n in graph.nodes if n.prim is scan_p]
    assert len(scans) == 1 and scans[0].params["length"] == 1000
    assert len(graph.nodes) == 1 and len(scans[0].params["body"].graph.nodes) <= 4
    want_c, want_ys = python_scan(lambda c, x: (c * 0.999 + np.sin(x), c), 0.0, xs0)
    close(c, want_c)
    close(ys, want_ys)
    g = compile(ad.grad(lambda c, xs: lax.scan(step, c, xs)[0], argnums=1))(
        xp.asarray(0.5, device=device), xs)
    assert g.shape == (1000,)
    close(g.numpy()[-1], np.cos(xs0[-1]))


def test_a_scan_whose_body_reads_no_operand_keeps_one_when_pruned():
    """Dead-code elimination drops a scan's unread consts and xs; one that reads none keeps
    its first, which tells eager evaluation the scan's device (a gradient's VJP graph held
    such a scan: 'scan: expected tensor operands, got none', where the other routes named
    the program's real obstacle)."""
    from tenferro_runtime.graph import Node, Var, eval_graph, trace

    xs = xp.asarray(np.arange(6.0).reshape(3, 2))
    g = trace(lambda xs: lax.scan(lambda c, x: (c, x * 2.0), (), xs)[1], xs)
    (node,) = [n for n in g.nodes if n.prim is scan_p]
    body = node.params["body"]
    fill = Var(body.graph.outputs[0].aval)  # the body's result becomes one of its constants
    const_body = body.graph.replace(nodes=[], outputs=[fill], consts={fill: xp.asarray(np.full(2, 7.0))})
    params = {**node.params, "body": type(body)(const_body, body.name, body.passes, (),
                                                  body.executor)}
    scan = Node(scan_p, node.inputs, params, node.outputs, node.site)
    pruned = scan_p.pruned(scan, set(node.outputs))
    assert len(pruned.inputs) == 1  # xs is unread; kept as the one operand
    out = eval_graph(g.replace(nodes=[pruned]), xs)[0]
    np.testing.assert_array_equal(out.numpy(), np.full((3, 2), 7.0))
