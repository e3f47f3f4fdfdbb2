"""Nothing trusted unchecked: executors' results, passes that edit their graph in place, donated
calls that fail part-way, copies and DLPack exports of immutable tensors, and compiled calls
without tensor arguments under an observer (kernels: test_kernel_contract.py)."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import tenferro_ad
import tenferro_ad.plugin
import tenferro_numpy.plugin as numpy_plugin
import tenferro_runtime as tr
import tenferro_runtime.passes as passes_plugin
from plugin_fixtures import BackendPlugin, Broken, hook_plugin
from tenferro_core.errors import ArgumentError, KernelError, TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph_prims import call_p
from tenferro_runtime.pipeline import PassWarning

DEVICES = ("numpy:cpu",)  # builds its own runtimes of NumPy-based backends


def f(x, y):
    return xp.sum(xp.tanh(x * y + 1.0), axis=0), x - y


# ---- executors -------------------------------------------------------------------------------

BAD_RUNNERS = {
    "dtype": lambda outs: [o.astype(np.float32) for o in outs],
    "shape": lambda outs: [np.zeros(o.size + 1) for o in outs],
    "None": lambda outs: None,
    "a buffer None": lambda outs: [None, outs[1]],
    "a list for a buffer": lambda outs: [list(outs[0]), outs[1]],
    "too few": lambda outs: outs[:1],
    "a tuple of too many": lambda outs: (*outs, outs[0]),
}


def _executor_runtime(spoil):
    calls = []

    def bad(graph, device):
        plan = tr.graph.build_plan(graph)

        def run(bufs):
            calls.append(1)
            return spoil(plan.run_buffers(list(bufs)))
        return run

    reg = hook_plugin("exec", lambda r: r.add_executor("bad", bad))
    return tr.Runtime([numpy_plugin, tenferro_ad.plugin, passes_plugin, reg]), calls


@pytest.mark.parametrize("how", BAD_RUNNERS)
def test_an_executor_returning_a_wrong_result_is_a_kernel_error_naming_it(how):
    rt, calls = _executor_runtime(BAD_RUNNERS[how])
    with tr.use_runtime(rt):
        x, y = xp.asarray(np.arange(6.0).reshape(2, 3)), xp.asarray(np.ones((2, 3)))
        c = tr.compile(f, backend="bad")
        for _ in range(2):  # a failed check never marks the runner as trusted
            with pytest.raises(KernelError, match=r"executor 'bad' running a graph of \d+ node\(s\) "
                                                  r"on numpy:cpu returned .*fix the executor"):
                c(x, y)
        assert len(calls) == 2
        np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3))  # inputs whole


def test_an_executor_that_raises_is_a_kernel_error_naming_it_with_the_cause():
    def boom(outs):
        raise RuntimeError("device lost")

    rt, _ = _executor_runtime(boom)
    with tr.use_runtime(rt):
        x, y = xp.asarray(np.arange(6.0).reshape(2, 3)), xp.asarray(np.ones((2, 3)))
        with pytest.raises(KernelError, match=r"executor 'bad' .* raised RuntimeError: device lost") as info:
            tr.compile(f, backend="bad")(x, y)
        assert isinstance(info.value.__cause__, RuntimeError) and isinstance(info.value, RuntimeError)


def test_a_good_executor_is_checked_once_then_trusted_unless_checks_are_on():
    seen = []

    def spy(outs):
        seen.append(outs)
        return outs

    rt, calls = _executor_runtime(spy)
    rt.set_check_kernels(False)
    with tr.use_runtime(rt):
        x, y = xp.asarray(np.arange(6.0).reshape(2, 3)), xp.asarray(np.ones((2, 3)))
        c = tr.compile(f, backend="bad")
        for _ in range(3):
            for o, w in zip(c(x, y), f(x, y)):
                np.testing.assert_array_equal(o.numpy(), w.numpy())
        exe = c._cache[next(iter(c._cache))][0].executable()
        assert exe.kind == "bad" and exe._check is False and len(calls) == 3


# ---- passes ----------------------------------------------------------------------------------

def _vandal(graph):
    """A pass that edits its graph in place, every way it can reach, then fails."""
    graph.nodes.reverse()
    for n in graph.nodes:
        n.params["vandalized"] = True
        n.inputs.clear()
    graph.outputs.clear()
    graph.consts.clear()
    graph.meta["memory"] = "garbage"
    raise RuntimeError("half-way through")


def test_a_pass_that_edits_in_place_and_raises_leaves_the_fallback_correct():
    reg = hook_plugin("vandal", lambda r: r.add_pass("vandal", _vandal, position=450))
    rt = tr.Runtime([numpy_plugin, tenferro_ad.plugin, passes_plugin, reg])
    with tr.use_runtime(rt):
        c_np = np.linspace(-1, 1, 6).reshape(2, 3)
        const = xp.asarray(c_np)  # a captured constant: the pass clears the consts it sees
        x, y = xp.asarray(np.arange(6.0).reshape(2, 3)), xp.asarray(np.ones((2, 3)))
        c = tr.compile(lambda x, y: (f(x * const, y)[0], x - y))
        with pytest.warns(PassWarning, match="half-way through"):
            out = c(x, y)
        want = f(x * const, y)[0], x - y
        for o, w in zip(out, want):
            np.testing.assert_array_equal(o.numpy(), w.numpy())
        callee = c._cache[next(iter(c._cache))][0]
        traced = callee.graph
        tr.graph.verify_graph(traced)
        assert all("vandalized" not in n.params and n.inputs for n in traced.nodes if n.prim.name != "full")
        assert len(traced.outputs) == 2 and traced.consts and "memory" not in callee.optimized().meta
        g = tenferro_ad.grad(lambda x: xp.sum(c(x, y)[0]))(x)  # the traced graph still differentiates
        want = tenferro_ad.grad(lambda x: xp.sum(f(x * const, y)[0]))(x)
        np.testing.assert_allclose(g.numpy(), want.numpy())


def test_graph_vars_are_immutable():
    graph = tr.trace(lambda x: xp.exp(x), xp.asarray([1.0]))
    with pytest.raises(AttributeError, match="immutable"):
        graph.inputs[0].aval = None


# ---- donation --------------------------------------------------------------------------------

def _raise(*args, **params):
    raise RuntimeError("device lost")


def test_a_donated_call_that_fails_part_way_leaves_the_tensor_unusable_with_a_clear_error():
    """The plan writes w - g * 0.1 into w's buffer (donated, held by nothing else), then tanh
    fails: w holds a partial result, so it must not be readable as if it were whole."""
    rt = tr.Runtime([numpy_plugin, tenferro_ad.plugin, passes_plugin,
                     BackendPlugin(Broken({"tanh": _raise}))])
    with tr.use_runtime(rt):
        dev = rt.device("broken:cpu")
        step = tr.compile(lambda w, g: xp.tanh(w - g * 0.1), donate_argnums=0, passes=["memory"])
        g = xp.asarray(np.ones(4), device=dev)
        w = xp.asarray(np.full(4, 2.0), device=dev)  # held by the tensor alone: donatable
        with pytest.raises(KernelError, match="device lost"):
            step(w, g)
        with pytest.raises(ArgumentError, match="failed part-way.*partial results") as info:
            w.numpy()
        assert isinstance(info.value, TypeError)
        with pytest.raises(ArgumentError, match="failed part-way"):
            w + 1.0
        assert "donated" in repr(w)
        mine = np.full(4, 2.0)
        w2 = xp.asarray(mine, device=dev)  # the caller holds the array too: never overwritten
        with pytest.raises(KernelError):
            step(w2, g)
        np.testing.assert_array_equal(mine, np.full(4, 2.0))


def test_a_donated_call_that_fails_before_running_leaves_the_tensor_intact():
    step = tr.compile(lambda w, g: w @ g, donate_argnums=0)
    w = xp.asarray(np.full((2, 3), 2.0))
    with pytest.raises(TenferroError):
        step(w, xp.asarray(np.ones((2, 3))))  # a shape error at trace time: nothing ran
    np.testing.assert_array_equal(w.numpy(), np.full((2, 3), 2.0))


# ---- copies and DLPack -----------------------------------------------------------------------

@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
def test_deepcopy_owns_its_memory_and_dlpack_exports_are_read_only(device):
    t = xp.asarray(np.arange(4.0), device=device)
    d = copy.deepcopy(t)
    assert not np.shares_memory(np.from_dlpack(d), np.from_dlpack(t))
    for tensor in (t, d):
        host = np.from_dlpack(tensor)
        assert not host.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            host[0] = 5.0
    np.testing.assert_array_equal(t.numpy(), np.arange(4.0))
    np.testing.assert_array_equal(d.numpy(), np.arange(4.0))
    assert copy.copy(t).numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    # a consumer without DLPack's read-only flag gets a copy, never the tensor's memory
    legacy = np.from_dlpack(_Legacy(t))
    assert not np.shares_memory(legacy, np.from_dlpack(t))
    np.testing.assert_array_equal(legacy, np.arange(4.0))


class _Legacy:
    """An object exporting `t` as a DLPack 0.x producer would be asked (no max_version)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


# ---- observers -------------------------------------------------------------------------------

class Recorder(tr.Observer):
    def __init__(self):
        self.prims = []
        self.asked = []

    def before(self, prim, args, params):
        self.asked.append(prim.name)

    def observe(self, prim, args, params, out):
        self.prims.append(prim.name)


def test_a_compiled_call_without_tensor_arguments_is_observed():
    from tenferro_runtime.tracing import pop, push_observer

    c = tr.compile(lambda: xp.ones(3) * 2.0)
    np.testing.assert_array_equal(c().numpy(), np.full(3, 2.0))
    rec = Recorder()
    token = push_observer(rec)
    try:
        out = c()
    finally:
        pop(token)
    np.testing.assert_array_equal(out.numpy(), np.full(3, 2.0))
    assert rec.prims == [call_p.name] and rec.asked == [call_p.name]


def test_a_compiled_call_without_tensor_arguments_is_measured():
    from tenferro_runtime.energy import measure

    c = tr.compile(lambda: xp.sum(xp.ones((30, 30)) @ xp.ones((30, 30))))
    c()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with measure("no-args") as region:
            c()
    (op,) = region.ops.values()  # constant folding left one constant: the call is what ran
    assert (op.category, op.count, op.device) == ("call", 1, "numpy:cpu") and op.joules > 0
