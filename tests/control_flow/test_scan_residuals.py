"""The scan-residual pass: a stacked output that only another scan reads, computed
elementwise from the first scan's other stacked outputs, is recomputed by the reader (the
RNN's `1 - tanh**2` rebuilt in the backward loop), bitwise the same values as without the
pass; what it must leave alone; dead code elimination dropping unread stacked outputs."""

from __future__ import annotations

import numpy as np
import pytest
from cf_programs import DEVICES, values
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_scan_products import data, rnn_loss

import tenferro_ad as ad
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, lax
from tenferro_runtime.control_flow_prims import scan_p
from tenferro_runtime.graph import trace, verify_graph
from tenferro_runtime.passes import BUILTIN, builtin_pass

WITHOUT = [name for name in BUILTIN if name != "scan_residuals"]


def scans(graph) -> list:
    return [n for n in graph.nodes if n.prim is scan_p]


def ys_count(node) -> int:
    return len(node.outputs) - node.params["num_carry"]


def xs_of(node) -> list:
    return node.inputs[node.params["num_consts"] + node.params["num_carry"]:]


def equal(got, want) -> None:
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a.numpy()), np.asarray(b.numpy()))


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=5, deadline=None)
@given(st.integers(0, 5), st.booleans(), st.integers(1, 3), st.sampled_from(["float32", "float64"]),
       st.integers(0, 2**16))
@example(0, False, 1, "float64", 0).via("no iterations")
@example(3, True, 2, "float32", 1).via("a reverse scan's residual")
def test_the_rnn_backward_loop_rebuilds_the_tanh_derivative(device, length, reverse, batch, dtype, seed):
    """grad of a tanh RNN: the forward loop no longer stacks 1 - h**2 (the backward loop
    rebuilds it from the stacked h it reads instead), and every gradient is bitwise what the
    pipeline without the pass gives, on the first (checked) and the generated-loop calls."""
    params, xs, target = data(seed, length, batch, dtype=np.dtype(dtype))
    tp = [xp.asarray(p, device=device) for p in params]
    tx, tt = xp.asarray(xs, device=device), xp.asarray(target, device=device)
    g = ad.grad(lambda p: rnn_loss(p, tx, tt, reverse))
    with_pass, without = compile(g), compile(g, passes=WITHOUT)
    for _ in range(2):
        equal(with_pass(tp), without(tp))
    fwd, bwd = scans(with_pass.lower(tp))
    fwd0, bwd0 = scans(without.lower(tp))
    assert ys_count(fwd) == ys_count(fwd0) - 1
    assert len(xs_of(bwd)) == len(xs_of(bwd0))  # one stacked operand for the other
    assert any(v in fwd.outputs for v in xs_of(bwd)) and ys_count(bwd) == ys_count(bwd0)
    verify_graph(with_pass.lower(tp))


def two_loops(xs, w, *, shared=False, returned=False, product=False, summed=False):
    """A first loop stacking `a` and `b = a * 2 + 1` (or `b = a @ w` with product), a second
    loop reading `b` (and `a` too when shared)."""
    def first(c, x):
        a = xp.sin(c + x)
        b = a @ w if product else a * 2.0 + 1.0
        return c + x * 0.5, (a, b)

    c, (a, b) = lax.scan(first, xp.zeros(xs.shape[1:], dtype=xs.dtype, device=xs.device), xs)
    def second(d, ab):
        return (d * ab[0] + ab[1], None) if shared else (d * 0.5 + ab[0], None)

    d, _ = lax.scan(second, c, (a, b) if shared else (b,))
    out = [d]
    if returned:
        out.append(b)
    if summed:
        out.append(xp.sum(b))
    return out


CASES = {
    "rebuilt from a": ({}, True),
    "a already read": ({"shared": True}, True),
    "b is also returned": ({"returned": True}, False),
    "b is also summed outside": ({"summed": True}, False),
    "b is a product, not elementwise": ({"product": True}, False),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(CASES))
def test_which_residuals_are_rebuilt(device, case):
    kw, rebuilt = CASES[case]
    xs = xp.asarray(values(3, 5, 2, 2), device=device)
    w = xp.asarray(values(4, 2, 2), device=device)
    fn = lambda xs, w: two_loops(xs, w, **kw)  # noqa: E731
    graph = trace(fn, xs, w)
    out = builtin_pass("scan_residuals")(graph.copy())
    verify_graph(out)
    first, second = scans(out)
    first0, second0 = scans(graph)
    changed = second.params["body"] is not second0.params["body"]
    assert changed == rebuilt
    if rebuilt:
        b = first0.outputs[first0.params["num_carry"] + 1]
        assert b not in second.inputs and first.outputs[first.params["num_carry"]] in second.inputs
        pruned = builtin_pass("dce")(out)
        assert ys_count(scans(pruned)[0]) == 1
    equal(compile(fn)(xs, w), compile(fn, passes=WITHOUT)(xs, w))
    equal(compile(fn)(xs, w), fn(xs, w))


@pytest.mark.parametrize("device", DEVICES)
def test_dce_drops_the_stacked_outputs_nothing_reads(device):
    xs = xp.asarray(values(5, 4, 3), device=device)

    def f(xs):
        c, (a, b) = lax.scan(lambda c, x: (c + x, (xp.sin(x), c * x)), xp.zeros(3, device=device), xs)
        return c, b

    graph = compile(f).lower(xs)
    (node,) = scans(graph)
    assert ys_count(node) == 1 and len(node.params["body"].graph.outputs) == 2
    c, b = compile(f)(xs)
    x = values(5, 4, 3)
    np.testing.assert_array_equal(c.numpy(), x.sum(0))
    np.testing.assert_allclose(b.numpy(), np.concatenate([np.zeros((1, 3)), np.cumsum(x, 0)[:-1]]) * x,
                               rtol=1e-12)
