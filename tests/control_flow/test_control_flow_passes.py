"""Graphs holding control flow through every built-in pass, `verify_graph` into sub-graphs,
DCE keeping bodies with effects, fold leaving loops alone, and the Inductor executor running
control flow outside its compiled graph with the reason logged."""

from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest
from cf_programs import close, values

from tenferro_core.errors import TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, debug, lax
from tenferro_runtime.compiled import Callee
from tenferro_runtime.control_flow_prims import scan_p, while_p
from tenferro_runtime.graph import Node, Var, trace, verify_graph
from tenferro_runtime.passes import BUILTIN, builtin_pass


def program(x, w):
    a = xp.sin(x) * 2.0
    c, ys = lax.scan(lambda c, xi: (c * w + xi, xp.tanh(c) * xi), xp.zeros(2), xp.reshape(a, (3, 2)))
    b = lax.cond(xp.sum(c) > 0, lambda v: v * v, lambda v: -v, c + 1.0)
    n, d = lax.while_loop(lambda s: s[0] < 4, lambda s: (s[0] + 1, s[1] * 0.5 + w), (0, b))
    unused = lax.fori_loop(0, 3, lambda i, v: v + 1.0, a)  # noqa: F841  (DCE drops it)
    return d + xp.sum(ys), n


@pytest.mark.parametrize("name", list(BUILTIN))
def test_every_pass_keeps_the_values_of_graphs_with_control_flow(name):
    x, w = xp.asarray(values(1, 6)), xp.asarray(values(2, 2))
    want = program(x, w)
    graph = trace(program, x, w)
    out = builtin_pass(name)(graph.copy())
    verify_graph(out)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = compile(program, passes=[name])(x, w)
    close(got[0], want[0].numpy())
    assert got[1].item() == want[1].item() == 4


def test_dce_drops_unused_loops_but_keeps_one_whose_body_prints(capsys):
    x = xp.asarray(values(3, 2))

    def f(x):
        lax.fori_loop(0, 2, lambda i, v: v + 1.0, x)  # unused: dropped
        lax.scan(lambda c, xi: (debug.print("step {}", xi) or c, None), 0.0, x)  # unused, prints
        return x * 2.0

    graph = compile(f).lower(x)
    opt = builtin_pass("dce")(graph)
    assert [n.prim.name for n in opt.nodes].count("scan") == 1
    compile(f)(x)
    assert capsys.readouterr().out.count("step") == 2


def test_fold_leaves_loops_on_constant_inputs_alone():
    graph = trace(lambda i: lax.while_loop(lambda i: i < 10, lambda i: i + 1, i), xp.asarray(0))
    (v,) = graph.inputs
    const = graph.replace(inputs=[], consts={**graph.consts, v: xp.asarray(0)})  # a loop on constants
    folded = builtin_pass("fold")(const)
    assert [n.prim for n in folded.nodes] == [while_p]


def test_verify_graph_checks_sub_graphs():
    x = xp.asarray(values(4, 3, 2))
    graph = trace(lambda xs: lax.scan(lambda c, xi: (c + xi, c), xp.zeros(2), xs), x)
    verify_graph(graph)
    node = next(n for n in graph.nodes if n.prim is scan_p)
    body = node.params["body"].graph
    broken = body.replace(nodes=[Node(body.nodes[0].prim, [Var(body.inputs[0].aval), body.inputs[1]],
                                      body.nodes[0].params, body.nodes[0].outputs)])
    params = {**node.params, "body": Callee(broken, "broken")}
    bad = graph.replace(nodes=[Node(n.prim, n.inputs, params if n is node else n.params, n.outputs)
                               for n in graph.nodes])
    with pytest.raises(TenferroError, match=r"node \d+ \(scan\): a sub-graph: node 0 \(add\) reads"):
        verify_graph(bad)


def test_inductor_lowers_a_scan_into_its_graph(caplog):
    pytest.importorskip("torch")
    import tenferro_runtime as tr

    x, w = xp.asarray(values(1, 6), device="torch:cpu"), xp.asarray(values(2, 2), device="torch:cpu")

    def f(x, w):
        c0 = xp.zeros(2, device="torch:cpu")
        c, ys = lax.scan(lambda c, xi: (c * w + xi, c), c0, xp.reshape(x, (3, 2)))
        return xp.exp(c) * 2.0 + xp.sum(ys)

    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="tenferro_torch.inductor"):
        warnings.simplefilter("ignore", DeprecationWarning)
        got = tr.compile(f, backend="inductor")(x, w)
    np.testing.assert_allclose(got.numpy(), f(x, w).numpy(), rtol=1e-12)
    assert not any("scan" in r.getMessage() and "falls back" in r.getMessage()
                   for r in caplog.records)


def test_a_printed_graph_shows_each_loop_body():
    graph = trace(lambda x: lax.scan(lambda c, xi: (c * 2.0 + xi, c), xp.zeros(2), x),
                  xp.ones((3, 2)))
    text = str(graph)
    assert "= scan[" in text and "    body 0:" in text
    assert "      d:float64[2] = mul b a" in text  # the body's nodes, indented under it
