"""Executors: a backend's compile(graph, device) runs whole graphs, a failing one falls back
to the generic plan with a warning, and graphs no plan can run go node by node."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_ad
import tenferro_runtime as tr
from plugin_fixtures import BackendPlugin, TwinBackend
from tenferro_runtime import array_api as xp
from tenferro_runtime.executor import BackendCompileWarning, PlanExecutable, build_executable
from tenferro_runtime.graph import trace

DEVICES = ("numpy:cpu",)  # builds its own runtimes of NumPy-based backends


class WholeGraphBackend(TwinBackend):
    """Runs a graph by eval_graph of its own (counting compiles), or declines / fails."""

    def __init__(self, name, mode):
        super().__init__(name)
        self.mode = mode
        self.compiled = []

    def compile(self, graph, device):
        if self.mode == "decline":
            return None
        if self.mode == "fail":
            raise RuntimeError("no codegen for this graph")
        self.compiled.append(graph)
        plan = tr.graph.build_plan(graph)

        def run(bufs):
            env = plan.template.copy()
            env[:len(bufs)] = bufs
            tr.plan._execute(plan.steps, env, device)
            return [env[s] for s, _ in plan.outputs]

        return run


def _runtime(mode):
    import tenferro_numpy.plugin as numpy_plugin
    import tenferro_runtime.passes as passes_plugin

    backend = WholeGraphBackend(f"whole{mode}", mode)
    rt = tr.Runtime([numpy_plugin, tenferro_ad.plugin, passes_plugin, BackendPlugin(backend)])
    return rt, backend


def f(x, y):
    return xp.sum(xp.tanh(x * y + 1.0), axis=0), x - y


@pytest.mark.filterwarnings("ignore::tenferro_runtime.executor.BackendCompileWarning")  # after the first
@pytest.mark.parametrize("mode", ["run", "decline", "fail"])
def test_backend_compile_runs_declines_or_falls_back(mode):
    rt, backend = _runtime(mode)
    with tr.use_runtime(rt):
        dev = rt.device(f"{backend.name}:cpu")
        a = np.arange(6.0).reshape(2, 3)
        x, y = xp.asarray(a, device=dev), xp.asarray(a[::-1].copy(), device=dev)
        c = tr.compile(f)
        if mode == "fail":
            with pytest.warns(BackendCompileWarning, match="no codegen"):
                out = c(x, y)
        else:
            out = c(x, y)
        want = f(x, y)
        for o, w in zip(out, want):
            np.testing.assert_array_equal(o.numpy(), w.numpy())
        exe = c._cache[next(iter(c._cache))][0].executable()
        assert exe.kind == ("backend" if mode == "run" else "plan")
        assert len(backend.compiled) == (1 if mode == "run" else 0)
        g = tenferro_ad.grad(lambda x: xp.sum(c(x, y)[0]))(x)  # derived callees compile too
        np.testing.assert_allclose(g.numpy(), tenferro_ad.grad(lambda x: xp.sum(f(x, y)[0]))(x).numpy())


def _executor_runtime(default_for=()):
    """A runtime with an executor 'counting' that runs graphs by their plan, counting them."""
    import tenferro_numpy.plugin as numpy_plugin
    import tenferro_runtime.passes as passes_plugin
    from plugin_fixtures import hook_plugin

    seen = []

    def counting(graph, device):
        if graph.meta.get("decline"):
            return None
        seen.append(device.name)
        plan = tr.graph.build_plan(graph)
        return lambda bufs: [o._buf for o in plan.run([tr.Tensor._new(b, v.aval) for b, v in
                                                        zip(bufs, graph.inputs)])]

    reg = hook_plugin("exec", lambda r: r.add_executor("counting", counting, default_for=default_for))
    return tr.Runtime([numpy_plugin, tenferro_ad.plugin, passes_plugin, reg]), seen


@pytest.mark.parametrize("how", ["named", "default", "plan", "unset"])
def test_a_registered_executor_runs_when_named_or_when_it_is_the_devices_default(how):
    rt, seen = _executor_runtime(("numpy:",) if how == "default" else ())
    with tr.use_runtime(rt):
        x, y = xp.asarray(np.arange(6.0).reshape(2, 3)), xp.asarray(np.ones((2, 3)))
        c = tr.compile(f, backend={"named": "counting", "plan": "plan"}.get(how))
        for o, w in zip(c(x, y), f(x, y)):
            np.testing.assert_array_equal(o.numpy(), w.numpy())
        exe = c._cache[next(iter(c._cache))][0].executable()
        used = how in ("named", "default")
        assert exe.kind == ("counting" if used else "plan")
        assert seen == (["numpy:cpu"] if used else [])
        out, back = tenferro_ad.vjp(lambda x: xp.sum(c(x, y)[0]), x)  # derived callees keep the executor
        g = back(xp.ones_like(out))[0]
        np.testing.assert_allclose(g.numpy(), tenferro_ad.grad(lambda x: xp.sum(f(x, y)[0]))(x).numpy())
        assert len(seen) == (3 if used else 0)  # the call, then the JVP's primal and transpose
        g = tenferro_ad.grad(lambda x: xp.sum(c(x, y)[0]))(x)  # eager grad: the call runs on a tape
        np.testing.assert_allclose(g.numpy(), tenferro_ad.grad(lambda x: xp.sum(f(x, y)[0]))(x).numpy())
        assert len(seen) == (3 if used else 0)  # the call's executable again; the backward: a tape plan


def test_an_unknown_executor_is_refused_when_compiling_and_names_the_installed_ones():
    rt, _ = _executor_runtime()
    with tr.use_runtime(rt), pytest.raises(ValueError, match=r"backend='nope'.*\['plan', 'counting'\]"):
        tr.compile(f, backend="nope")


@pytest.mark.parametrize("bad", [("plan", lambda g, d: None, ()), ("ok", 3, ()),
                                 ("ok", lambda g, d: None, (1,)), ("no name", lambda g, d: None, ())])
def test_bad_executor_registrations_are_plugin_errors(bad):
    from plugin_fixtures import hook_plugin

    name, fn, default_for = bad
    rt = tr.Runtime([hook_plugin("bad", lambda r: r.add_executor(name, fn, default_for=default_for))])
    (report,) = [r for r in rt.reports if r.name == "bad"]
    assert not report.ok and "add_executor" in str(report.error)
    assert not rt.executors


def test_ops_without_a_kernel_run_through_their_decomposition_inside_plans():
    import tenferro_numpy.plugin as numpy_plugin
    import tenferro_runtime.passes as passes_plugin
    from plugin_fixtures import hook_plugin
    from tenferro_core.extension import define_op

    twice = define_op("test_executors.twice.v1", lambda a: (a.shape, a.dtype),
                      decomposition=lambda x: x + x)
    rt = tr.Runtime([numpy_plugin, passes_plugin, hook_plugin("ops", lambda r: r.add_op(twice))])
    with tr.use_runtime(rt):
        x = xp.asarray(np.arange(3.0))
        g = lambda v: twice.bind(xp.exp(v)) * 2.0  # noqa: E731
        exe = build_executable(trace(g, x))
        assert isinstance(exe, PlanExecutable)  # one step runs the decomposition eagerly
        want = np.exp(np.arange(3.0)) * 4
        np.testing.assert_array_equal(exe.run((x,))[0].numpy(), want)
        np.testing.assert_array_equal(tr.compile(g)(x).numpy(), want)
        with tenferro_ad.GradientTape() as tape:  # the decomposition's ops are not recorded
            tape.watch(x)
            y = xp.sum(exe.run((x,))[0])
        grad = tape.gradient(y, x)
        assert grad is None or not np.any(grad.numpy())


def test_single_device_graphs_get_the_generic_plan():
    x = xp.asarray(np.arange(3.0))
    exe = build_executable(trace(lambda v: xp.exp(v) - v, x))
    assert isinstance(exe, PlanExecutable)


def _plan_of(c):
    return c._cache[next(iter(c._cache))][0].executable().plan


def test_planned_buffers_are_written_into_and_values_stay():
    def f(x):
        y = (x + 1.0) * 2.0 - x
        return xp.exp(y) * x

    x = xp.asarray(np.linspace(-1, 1, 12).reshape(3, 4))
    planned, plain = tr.compile(f, passes=["memory"]), tr.compile(f, passes=())
    np.testing.assert_array_equal(planned(x).numpy(), plain(x).numpy())
    np.testing.assert_array_equal(planned(x).numpy(), f(x).numpy())
    plan = _plan_of(planned)
    assert plan.reuse and not _plan_of(plain).reuse
    assert f"o{next(iter(plan.reuse))}(" in plan.source()


def test_a_buffer_still_seen_through_a_view_is_not_reused():
    def f(x):
        y = x * 2.0
        v = xp.reshape(y, (12,))  # a view of y's buffer on numpy, alive to the end
        z = (x + 3.0) * 5.0       # same shape as y, whose own var is dead by now
        return v, z

    x = xp.asarray(np.arange(12.0).reshape(3, 4))
    v, z = tr.compile(f, passes=["memory"])(x)
    np.testing.assert_array_equal(v.numpy(), np.arange(12.0) * 2)
    np.testing.assert_array_equal(z.numpy(), (np.arange(12.0).reshape(3, 4) + 3) * 5)
    np.testing.assert_array_equal(x.numpy(), np.arange(12.0).reshape(3, 4))  # inputs never written


def test_a_donated_buffer_holds_the_result_when_nothing_else_holds_it():
    # w * 0.9 goes into w's buffer (the only one dying there), the difference into that
    # product's (a buffer of the plan's own goes before a donated one: it needs no check)
    step = tr.compile(lambda w, g: w * 0.9 - g, donate_argnums=0, passes=["memory"])
    g = xp.asarray(np.ones(4))
    w = xp.asarray(np.full(4, 2.0))  # its array is held by the tensor alone
    address = w._buf.ctypes.data
    out = step(w, g)
    np.testing.assert_array_equal(out.numpy(), np.full(4, 2.0 * 0.9 - 1))
    assert out._buf.ctypes.data == address  # written in place
    mine = np.full(4, 2.0)  # the caller still holds the array behind the tensor
    out = step(xp.asarray(mine), g)
    np.testing.assert_array_equal(out.numpy(), np.full(4, 2.0 * 0.9 - 1))
    np.testing.assert_array_equal(mine, np.full(4, 2.0))
    assert not np.shares_memory(out.numpy(), mine)
    w = xp.asarray(np.full(4, 2.0))
    view = xp.reshape(w, (2, 2))  # another tensor sees the buffer: not overwritten
    step(w, g)
    np.testing.assert_array_equal(view.numpy(), np.full((2, 2), 2.0))


def test_kernel_for_runs_an_executors_own_kernels_in_place_of_the_devices():
    from tenferro_runtime.plan import build_plan

    calls = []

    def own(node):
        if node.prim.name != "reduce_sum":
            return None

        def kernel(buf):
            calls.append(buf.shape)
            return buf.sum(axis=node.params["axes"])
        return kernel

    x = xp.asarray(np.arange(6.0).reshape(2, 3))
    graph = tr.compile(lambda v: xp.sum(xp.exp(v * 2.0), axis=1) + 1.0).lower(x)
    plan = build_plan(graph, kernel_for=own)
    assert all(i not in plan.reuse for i in range(len(plan.steps)) if plan.steps[i][1].name == "reduce_sum")
    (out,) = plan.run_buffers([x._buf])
    np.testing.assert_array_equal(out, np.exp(np.arange(6.0).reshape(2, 3) * 2.0).sum(axis=1) + 1.0)
    assert calls == [(2, 3)]


def test_an_executor_with_decompose_gets_fusable_extension_ops_inlined():
    """`add_executor(..., decompose=categories)`: an extension op whose decomposition holds only
    those categories reaches the executor as its decomposition (a stop_gradient inside is
    dropped); one with other primitives (a product) stays an op; the plan executor and
    other executors get the ops themselves."""
    import tenferro_numpy.plugin as numpy_plugin
    import tenferro_runtime.passes as passes_plugin
    from plugin_fixtures import hook_plugin
    from tenferro_core.extension import define_op

    shifted = define_op("test_executors.shifted.v1", lambda a: (a.shape, a.dtype),
                        decomposition=lambda x: xp.exp(x - tenferro_ad.stop_gradient(xp.max(x))))
    gram = define_op("test_executors.gram.v1", lambda a: ((a.shape[0], a.shape[0]), a.dtype),
                     decomposition=lambda x: x @ xp.matrix_transpose(x))
    seen: list = []

    def spy(graph, device):
        seen.append(sorted({n.prim.name for n in graph.nodes}))
        return None  # decline: the plan runs it

    def register(r):
        r.add_op(shifted)
        r.add_op(gram)
        r.add_executor("fuser", spy, decompose=("elementwise", "broadcast", "reduction", "structural"))
        r.add_executor("other", spy)

    rt = tr.Runtime([numpy_plugin, tenferro_ad.plugin, passes_plugin, hook_plugin("ops", register)])
    with tr.use_runtime(rt):
        x = xp.asarray(np.arange(6.0).reshape(2, 3))
        g = lambda v: gram.bind(shifted.bind(v))  # noqa: E731
        e = np.exp(x.numpy() - 5.0)
        for backend in ("fuser", "other", "plan"):
            np.testing.assert_allclose(tr.compile(g, backend=backend)(x).numpy(), e @ e.T, rtol=1e-14)
    fused_ops = [n for n in seen[0] if n.startswith("test_executors.")]
    assert fused_ops == ["test_executors.gram.v1"]
    assert "tenferro_ad.stop_gradient.v1" not in seen[0]
    assert [n for n in seen[1] if n.startswith("test_executors.")] == ["test_executors.gram.v1",
                                                                      "test_executors.shifted.v1"]
    assert len(seen) == 2


def test_decompose_must_name_categories():
    from plugin_fixtures import hook_plugin

    bad = hook_plugin("bad", lambda r: r.add_executor("x", lambda g, d: None, decompose=("fast",)))
    rt = tr.Runtime([bad])
    (report,) = [r for r in rt.reports if r.name == "bad"]
    assert not report.ok and "decompose must be primitive categories" in str(report.error)
