"""Energy accounting: per-op shares add up to the measured total, nested windows form a tree,
monitors see only their own thread's ops, broken meters fall back with a note, compiled calls
count as their graph's cost, and the process total adds up the outermost windows."""

from __future__ import annotations

import math
import random
import threading

import numpy as np
import pytest

from tenferro_ad import GradientTape
from tenferro_core.errors import ArgumentError, TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, tracing, use_runtime
from tenferro_runtime.cost import graph_cost
from tenferro_runtime.energy import EnergyMonitor, measure, process_region
from tenferro_runtime.energy.accounting import split

DEV = "numpy:cpu"


def _work(n: int = 3):
    x = xp.ones((32, 32))
    for _ in range(n):
        x = xp.tanh(x @ x * 0.01) + x
    return xp.sum(x)


def _device_ops(region, dev=DEV):
    return [op for op in region.ops.values() if op.device == dev]


def test_per_op_shares_add_up_to_the_measured_delta(counter):
    counter.joules = 100.0
    with measure("work") as r:
        _work()
        counter.joules = 112.345
    d = r.devices[DEV]
    assert (d.source, d.meter, d.approximate) == ("rapl", "counter", False)
    assert d.joules == 112.345 - 100.0
    ops = _device_ops(r)
    assert sum(op.joules for op in ops) == d.joules == r.joules  # exactly, summed in order
    names = {op.name: op for op in ops}
    assert names["dot_general"].count == 3 and names["dot_general"].category == "contraction"
    assert names["dot_general"].flops == 3 * 2 * 32**3
    # cost-weighted: the matmul (more flops, same bytes) gets more than the add
    assert names["dot_general"].joules > names["add"].joules > 0
    assert r.seconds > 0 and r.watts == r.joules / r.seconds and r.sources == "rapl"


def test_estimate_only_is_labelled_and_covers_the_ops(estimate_only):
    with measure() as r:
        _work()
    d = r.devices[DEV]
    assert (d.source, d.meter) == ("estimate", "estimate") and "profile" in d.note
    assert r.sources == "estimate"
    ops = _device_ops(r)
    assert sum(op.joules for op in ops) == d.joules
    assert d.joules > 0


@pytest.mark.parametrize("seed", range(20))
def test_split_is_exact_and_proportional(seed):
    rnd = random.Random(seed)
    weights = [rnd.random() * 10 ** rnd.randint(-12, 3) for _ in range(rnd.randint(1, 40))]
    total = rnd.random() * 10 ** rnd.randint(-6, 4)
    out = split(total, weights)
    assert sum(out) == sum(reversed(out)) == math.fsum(out) == total and min(out) >= 0
    for w, s in zip(weights, out):
        assert math.isclose(s, total * w / math.fsum(weights), rel_tol=1e-9, abs_tol=1e-12 * total)
    assert split(3.0, [0.0, 0.0, 0.0]) == [1.0, 1.0, 1.0] and split(1.0, []) == []


def test_nested_windows_form_a_tree(counter):
    with measure("epoch 1", kind="epoch") as outer:
        _work(1)
        counter.joules += 5.0
        with measure("step 1", kind="step") as s1:
            _work(2)
            counter.joules += 3.0
            with measure("inner") as deep:
                xp.ones(4) + 1.0
                counter.joules += 1.0
        with measure("step 2", kind="step") as s2:
            _work(1)
            counter.joules += 2.0
    assert [c.label for c in outer.children] == ["step 1", "step 2"]
    assert s1.children == [deep] and deep.children == [] and s2.children == []
    assert (outer.joules, s1.joules, deep.joules, s2.joules) == (11.0, 4.0, 1.0, 2.0)
    assert s1.joules + s2.joules <= outer.joules and deep.joules <= s1.joules
    # the outer window counts the inner windows' ops too
    count = {k: op.count for k, op in outer.ops.items()}
    for child in (s1, s2):
        for k, op in child.ops.items():
            assert op.count <= count[k]
    assert count[("dot_general", DEV)] == 4
    for r in (outer, s1, deep, s2):
        assert sum(op.joules for op in _device_ops(r)) == r.joules


def test_monitor_begin_end_reuse_and_misuse(estimate_only):
    mon = EnergyMonitor("loop", kind="step")
    regions = []
    for _ in range(2):
        assert mon.begin() is mon.region and mon.open
        _work(1)
        regions.append(mon.end())
        assert not mon.open
    assert regions[0] is not regions[1] and all(r.ops for r in regions)
    with pytest.raises(TenferroError, match="not open"):
        mon.end()
    with mon, pytest.raises(TenferroError, match="already open"):
        mon.begin()
    with pytest.raises(ArgumentError):
        EnergyMonitor(label=3)
    assert tracing.interpreters() is tracing.BOTTOM


def test_a_monitor_sees_only_its_own_threads_ops(estimate_only):
    opened, other_done = threading.Event(), threading.Event()
    results = {}

    def monitored():
        with use_runtime(estimate_only), measure("a") as r:
            opened.set()
            assert other_done.wait(30)  # the other thread's ops all run inside this window
            xp.ones(8) + xp.ones(8)
        results["a"] = r

    def other():
        assert opened.wait(30)
        with use_runtime(estimate_only):
            x = xp.ones((16, 16))
            with measure("b") as r:
                for _ in range(5):
                    x = x @ x
        results["b"] = r
        other_done.set()

    threads = [threading.Thread(target=monitored), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    a, b = results["a"], results["b"]
    assert ("add", DEV) in a.ops and ("dot_general", DEV) not in a.ops
    assert b.ops[("dot_general", DEV)].count == 5 and ("add", DEV) not in b.ops
    assert a.children == [] and b.children == []


def test_a_monitor_in_another_thread_cannot_be_ended_here(estimate_only):
    mon = EnergyMonitor()
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("r", mon.begin()))
    t.start()
    t.join(30)
    with pytest.raises(TenferroError, match="another thread"):
        mon.end()


@pytest.mark.parametrize("fail, why", [("raise", "OSError: sensor unplugged"), ("nan", "nan"),
                                       ("garbage", "not a Reading"), ("decrease", "decreased")])
def test_a_broken_meter_falls_back_with_a_note(counter, fail, why):
    counter.joules = 50.0
    with measure() as r:
        y = _work(1)
        if fail == "decrease":
            counter.joules = 10.0
        else:
            counter.fail = fail
    assert np.isfinite(y.numpy())  # the program went on
    d = r.devices[DEV]
    assert (d.source, d.meter) == ("estimate", "estimate")
    assert "counter failed" in d.note and why in d.note and "fell back to estimate" in d.note
    assert sum(op.joules for op in _device_ops(r)) == d.joules


def test_a_meter_broken_from_the_start_is_noted(counter):
    counter.fail = "raise"
    with measure() as r:
        _work(1)
    d = r.devices[DEV]
    assert d.source == "estimate" and "counter unusable" in d.note and "sensor unplugged" in d.note


def test_short_windows_are_labelled_approximate(make_counter):
    slow = make_counter("slow", update_period=60.0)
    with measure() as r:
        _work(1)
        slow.joules = 2.0
    d = r.devices[DEV]
    assert d.source == "rapl" and d.approximate and "update period" in d.note
    assert r.sources == "rapl ~"


def test_compiled_calls_count_as_their_graphs_cost(counter):
    x = xp.ones((16, 16))

    @compile
    def f(x):
        return xp.sum(xp.tanh(x @ x) * 2.0)

    f(x)  # traced and optimized outside the window
    callee = next(iter(f._cache.values()))[0]
    cost = graph_cost(callee.optimized())
    with measure() as r:
        for _ in range(3):
            f(x)
        counter.joules = 7.0
    ops = [op for (name, _), op in r.ops.items() if name.startswith("f: ")]
    assert len(ops) == len(r.ops) and {op.name for op in ops} >= {"f: contraction", "f: elementwise"}
    assert all(op.count == 3 and op.name == f"f: {op.category}" for op in ops)  # one entry per category
    assert sum(op.flops for op in ops) == 3 * cost.flops and sum(op.bytes for op in ops) == 3 * cost.bytes
    assert sum(op.joules for op in ops) == 7.0  # the call's measured energy, split by category


def test_tracing_inside_a_window_counts_only_the_call(estimate_only):
    @compile
    def g(x):
        return x * 2.0 + 1.0

    with measure() as r:
        g(xp.ones(8))
    names = [k[0] for k in r.ops if k[0] != "full"]
    assert names and all(n.startswith("g: ") for n in names)
    assert all(r.ops[(n, DEV)].count == 1 for n in names)


def test_tapes_and_monitors_stack(estimate_only):
    x = xp.asarray(np.linspace(0.1, 1.0, 8))
    with measure() as r:
        with GradientTape() as tape:
            tape.watch(x)
            y = xp.sum(xp.sin(x) * x)
        g = tape.gradient(y, x)
    np.testing.assert_allclose(g.numpy(), np.sin(x.numpy()) + x.numpy() * np.cos(x.numpy()))
    assert r.ops[("sin", DEV)].count == 1 and r.ops[("cos", DEV)].count == 1  # the backward pass too


def test_a_replayed_graph_counts_as_its_ops_one_by_one(estimate_only):
    """With only monitors open, a tape's backward replays each VJP graph as one plan and the
    monitor is told once per graph; the counts, costs and estimate are those of the same ops
    run node by node (as they are when another observer needs each op)."""

    class PerOp(tracing.Observer):
        seen = 0

        def observe(self, prim, args, params, out):
            PerOp.seen += 1

    def step():
        x = xp.asarray(np.linspace(0.1, 1.0, 8))
        with GradientTape() as tape:
            tape.watch(x)
            y = xp.sum(xp.tanh(x @ xp.ones((8, 8)) * 0.5) * x)
        return tape.gradient(y, x)

    step()
    with measure() as replayed:
        g1 = step()
    token = tracing.push_observer(PerOp())
    try:
        with measure() as one_by_one:
            g2 = step()
    finally:
        tracing.pop(token)
    np.testing.assert_array_equal(g1.numpy(), g2.numpy())
    assert PerOp.seen > 0
    counts = {k: (op.count, op.flops, op.bytes) for k, op in replayed.ops.items()}
    assert counts == {k: (op.count, op.flops, op.bytes) for k, op in one_by_one.ops.items()}
    assert counts[("dot_general", DEV)][0] >= 2  # the forward matmul and the backward's


def test_an_op_run_by_its_decomposition_counts_its_parts_once():
    import tenferro_numpy.plugin as numpy_plugin
    from plugin_fixtures import hook_plugin
    from tenferro_core import define_op
    from tenferro_runtime import Runtime

    twice_sin = define_op("test_accounting.twice_sin.v1", lambda x: (x.shape, x.dtype),
                          decomposition=lambda x: xp.sin(x) + x, category="elementwise")
    with use_runtime(Runtime([numpy_plugin, hook_plugin("ops", lambda r: r.add_op(twice_sin))])):
        x = xp.ones(8)
        with measure() as r:
            y = twice_sin.bind(x)
    np.testing.assert_allclose(y.numpy(), np.sin(1.0) + 1.0)
    assert {k[0] for k in r.ops} == {"sin", "add"} and r.ops[("sin", DEV)].count == 1


def test_a_window_without_ops_reports_its_device(counter):
    with measure("idle") as r:
        counter.joules = 0.5
    assert list(r.devices) == [DEV] and r.joules == 0.5 and r.ops == {}


def test_process_region_adds_up_outermost_windows(counter):
    process_region(reset=True)
    with measure("one") as one:
        counter.joules += 1.0
        with measure("nested"):
            _work(1)
            counter.joules += 1.0
    with measure("two") as two:
        _work(2)
        counter.joules += 0.5
    p = process_region()
    assert p.kind == "process" and p.devices[DEV].joules == one.joules + two.joules == 2.5
    assert p.ops[("dot_general", DEV)].count == 3
    assert p.start == one.start and p.end == two.end
    assert process_region(reset=True).joules == 2.5 and process_region().joules == 0.0
