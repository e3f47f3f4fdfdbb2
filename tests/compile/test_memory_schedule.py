"""Memory planning (liveness, reuse, donation), the plan executor freeing buffers, inlining of
fused/call nodes in plans, and energy-aware scheduling."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest
from graphgen import graphs
from hypothesis import given, settings
from hypothesis import strategies as st

from plugin_fixtures import node_by_node
from tenferro_core.primitive import Primitive
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime, lax, trace
from tenferro_runtime.graph import eval_graph, verify_graph
from tenferro_runtime.graph_prims import call_p, fused_p
from tenferro_runtime.passes.memory import last_uses, live_bytes_peak, nbytes, plan_memory
from tenferro_runtime.passes.schedule import ScheduleReport, schedule
from tenferro_runtime.plan import build_plan


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def _arr(shape, seed=0, dtype="float32"):
    return xp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _check_reuse(graph, plan):
    """Every hint maps to a dead var of the same aval, and each dead buffer is handed out once."""
    last, index = last_uses(graph), {v: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    outs = set(graph.outputs)
    donated = {graph.inputs[i] for i in plan.donated}
    for v, u in plan.reuse.items():
        assert u.aval is v.aval and u not in outs
        assert u in index or u in donated  # a node result, or a donated input
        assert last.get(u, -1) < index[v] and index.get(u, -1) < index[v]  # dead by then
    assert len(set(plan.reuse.values())) == len(plan.reuse)


def test_passes_are_registered_in_order():
    passes = default_runtime().passes
    assert passes["schedule"][1] == 800.0 and passes["memory"][1] == 900.0


def test_liveness_of_a_small_graph():
    def f(x):
        a = xp.exp(x)
        b = xp.sin(a)
        dead = xp.cos(x)  # noqa: F841  (nothing reads it: freed right after it is made)
        c = a * b
        return xp.tanh(c), b

    g = trace(f, _arr((4, 3)))
    assert [n.prim.name for n in g.nodes] == ["exp", "sin", "cos", "mul", "tanh"]
    a, b, dead, c = (g.nodes[i].outputs[0] for i in range(4))
    plan = plan_memory(g).meta["memory"]
    assert plan.free_after == ((), (), (dead,), (a,), (c,))  # b and tanh's result are outputs
    _check_reuse(g, plan)
    # dead is freed after node 2, before mul makes c (a is still live there); a after mul
    assert plan.reuse == {c: dead, g.nodes[4].outputs[0]: a}
    assert "memory plan" in str(plan)


def test_a_chain_drops_from_n_buffers_to_a_constant_number():
    n, x = 20, _arr((32, 32))

    def f(v):
        for _ in range(n):
            v = xp.tanh(v)
        return v

    g = plan_memory(trace(f, x))
    plan, size = g.meta["memory"], nbytes(g.inputs[0])
    assert plan.peak_bytes_before == (n + 1) * size
    assert plan.peak_bytes_after == 3 * size == live_bytes_peak(g)  # input, operand, result
    assert len(plan.reuse) == n - 2  # from the third tanh on, the one before last is dead
    _check_reuse(g, plan)
    p = build_plan(g)
    assert sum(len(s[-1]) for s in p.steps) == n - 1  # every temporary but the output
    _same(p.run((x,)), build_plan(trace(f, x)).run((x,)))


def test_donated_inputs_are_candidates_only_after_their_last_use():
    x = _arr((8, 8))

    def f(v):
        a = v * 2.0
        b = xp.exp(a)
        return b + 1.0

    g = trace(f, x)
    nodes = [n for n in g.nodes if n.prim.name in ("mul", "exp", "add")]
    a, b, c = (n.outputs[0] for n in nodes)
    x_var = g.inputs[0]
    plain = plan_memory(g).meta["memory"]
    assert x_var not in plain.reuse.values() and plain.donated == ()
    donated = plan_memory(g.replace(meta={"donated": (0,)})).meta["memory"]
    assert donated.donated == (0,)
    assert a not in donated.reuse  # x is still read by the node that makes a
    assert donated.reuse[b] is x_var and donated.reuse[c] is a
    assert donated.peak_bytes_after < plain.peak_bytes_after
    _check_reuse(g, donated)


@settings(deadline=None, max_examples=40)
@given(data=st.data())
def test_random_graphs_keep_values_with_a_memory_plan(backend_device, data):
    graph, args = data.draw(graphs(backend_device))
    planned = plan_memory(graph.replace(meta={"donated": (0,)}))
    verify_graph(planned)
    memory = planned.meta["memory"]
    _check_reuse(graph, memory)
    assert live_bytes_peak(graph) <= memory.peak_bytes_before
    new = schedule(graph)
    verify_graph(new)
    assert new.meta["schedule"].peak_bytes_after <= new.meta["schedule"].peak_bytes_before
    _same(node_by_node(new, *args), node_by_node(graph, *args))
    with_plan, without = build_plan(planned), build_plan(graph)
    if without is None:
        assert with_plan is None
        return
    want = without.run(tuple(args))
    # last: input 0 is donated, so the planned run may write its result into that buffer
    _same(with_plan.run(tuple(args)), want)


def _mlp(h, w1, b1, w2, b2, w3, b3):
    for w, b in ((w1, b1), (w2, b2), (w3, b3)):
        h = xp.tanh(xp.matmul(h, w) + b)
    return h


def _mlp_args(width=256):
    shapes = [(128, width)] + [(width, width), (width,)] * 3
    return [_arr(s, seed=i) for i, s in enumerate(shapes)]


def test_memory_plan_keeps_mlp_values_bitwise(backend_device):
    args = _mlp_args(32)
    g = trace(_mlp, *args)
    fast, slow = build_plan(plan_memory(g)), build_plan(g)
    assert any(s[-1] for s in fast.steps) and not any(s[-1] for s in slow.steps)
    _same(fast.run(tuple(args)), slow.run(tuple(args)))
    _same(fast.run(tuple(args)), node_by_node(g, *args))


def _traced_peak(plan, args):
    plan.run(args)  # warm
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = plan.run(args)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    del out
    return peak


def test_mlp_peak_memory_drops_by_at_least_30_percent(backend_device):
    if backend_device != "numpy:cpu":
        pytest.skip("tracemalloc sees NumPy's allocations, not torch's")
    args = tuple(_mlp_args())
    g = trace(_mlp, *args)
    without = _traced_peak(build_plan(g), args)
    with_plan = _traced_peak(build_plan(plan_memory(g)), args)
    assert with_plan <= 0.7 * without, (with_plan, without)


class _Callee:
    """Enough of a compiled callee for `call`: its graph, and running it."""

    def __init__(self, graph):
        self.graph = graph

    def run(self, args):
        return eval_graph(self.graph, *args)


def test_plans_inline_fused_and_call_nodes(backend_device):
    x = _arr((5, 4))
    group = trace(lambda v: xp.tanh(v) * 2.0 + v, x)
    callee = _Callee(trace(lambda v: fused_p.bind(xp.sin(v), graph=group)[0], x))

    def f(v):
        (u,) = fused_p.bind(v, graph=group)
        (w,) = call_p.bind(u, fn=callee)
        return w * u

    g = trace(f, x)
    for graph in (g, plan_memory(g)):
        p = build_plan(graph)
        names = {s[1].name for s in p.steps}  # a backend with a fused kernel runs the group as one
        assert p is not None and names >= {"sin", "mul"} and ("tanh" in names or "fused" in names)
        _same(p.run((x,)), node_by_node(g, x))
    assert any(s[-1] for s in build_plan(plan_memory(g)).steps)


def _bad_order(v):
    big = [f(v) for f in (xp.exp, xp.sin, xp.cos, xp.tanh, xp.negative, xp.abs)]  # all first ...
    sums = [xp.sum(t) for t in big]  # ... then each reduced
    out = sums[0]
    for s in sums[1:]:
        out = out + s
    return out


def test_schedule_lowers_the_peak_of_a_bad_order(backend_device):
    x = _arr((256, 512), dtype="float64")  # 1 MiB: the traced order reads them back from DRAM
    g = trace(_bad_order, x)
    new = schedule(g)
    verify_graph(new)
    report = new.meta["schedule"]
    assert isinstance(report, ScheduleReport) and report.moved > 0
    assert report.peak_bytes_before == live_bytes_peak(g)
    assert report.peak_bytes_after == live_bytes_peak(new)
    assert report.peak_bytes_after <= report.peak_bytes_before // 3
    assert report.joules_after < report.joules_before  # each read right after it was made
    assert sorted(map(id, new.nodes)) == sorted(map(id, g.nodes))
    assert "schedule: peak" in str(report)
    _same(eval_graph(new, x), eval_graph(g, x))
    _same(node_by_node(new, x), node_by_node(g, x))
    again = schedule(new)  # already good: kept as it is
    assert again.meta["schedule"].moved == 0 and again.nodes == new.nodes


def test_schedule_keeps_effects_in_order_and_notes_uncosted_ops(backend_device):
    tap = Primitive("testsched.tap.v1", lambda a: (a.shape, a.dtype), effects=True, family=True,
                    decomposition=lambda a: lax.copy(a))

    def f(v):
        big = tap.bind(xp.exp(v))  # the greedy order would rather run the small tap first
        small = tap.bind(xp.sum(v))
        return xp.sum(big) + small

    x = _arr((64, 64))
    g = trace(f, x)
    new = schedule(g)
    verify_graph(new)
    taps = [n for n in new.nodes if n.prim is tap]
    assert taps == [n for n in g.nodes if n.prim is tap]
    assert new.meta["schedule"].uncosted == ("testsched.tap.v1",)
    assert "no cost rule" in str(new.meta["schedule"])
    _same(node_by_node(new, x), node_by_node(g, x))


def test_pipeline_runs_schedule_then_memory_and_a_stale_plan_is_still_safe(backend_device):
    import warnings

    from tenferro_runtime.pipeline import optimize

    x = _arr((64, 64))
    g = trace(_bad_order, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = optimize(g, default_runtime(), passes="schedule,memory")
    assert {"schedule", "memory"} <= out.meta.keys()
    assert out.meta["memory"].peak_bytes_after == out.meta["schedule"].peak_bytes_after
    _same(build_plan(out).run((x,)), node_by_node(g, x))
    # the traced order's buffer plan on the scheduled nodes: frees the plan cannot honour
    # (a value read later) are dropped, so values stay right
    stale = out.replace(meta={"memory": plan_memory(g).meta["memory"]})
    _same(build_plan(stale).run((x,)), node_by_node(g, x))
