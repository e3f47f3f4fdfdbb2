"""Plans replay a graph's kernels on buffers: the same values as binding node by node; and
dead_code_elimination keeps exactly what the outputs (and effects) need."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import node_by_node
from tenferro_core import catalog
from tenferro_core.primitive import Primitive
from tenferro_runtime import Runtime, lax, trace, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import Graph, Node, Var, dead_code_elimination, eval_graph
from tenferro_runtime.plan import build_plan

UNARY = [xp.tanh, xp.sin, xp.exp, xp.negative, lambda v: v * 0.5 + 1.0, lambda v: xp.sum(v, axis=-1,
         keepdims=True) + v, lambda v: xp.flip(v, axis=0), lambda v: v[::2] if v.shape[0] > 1 else v,
         lambda v: xp.cumulative_sum(v, axis=0), lambda v: xp.where(v > 0, v, -v)]


@settings(deadline=None)
@given(ops=st.lists(st.integers(0, len(UNARY) - 1), min_size=0, max_size=8),
       shape=st.sampled_from([(3, 4), (1, 1), (5, 1), (0, 3)]),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2**16))
def test_plan_matches_node_by_node_evaluation(ops, shape, dtype, seed):
    x0 = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    c = xp.asarray(np.full(shape[1:], 0.25, dtype))  # a captured constant

    def f(v):
        for i in ops:
            v = UNARY[i](v)
        return v * c, xp.sum(v)

    x = xp.asarray(x0)
    graph = trace(f, x)
    fast = eval_graph(graph, x)
    assert graph.derived("plan", lambda: None) is not None  # eval_graph built and kept its plan
    slow = node_by_node(graph, x)
    for a, b in zip(fast, slow):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    eager = f(x)
    for a, b in zip(fast, eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6 if dtype == "float32" else 1e-14)


def test_non_contiguous_inputs_and_constant_folding():
    base = np.arange(24.0).reshape(4, 6)
    x = xp.asarray(base.T)  # a transposed (non-contiguous) NumPy buffer
    c = xp.asarray(np.full((6, 4), 0.5))
    v, cv, e, out = Var(x.aval), Var(c.aval), Var(c.aval), Var(x.aval)
    graph = Graph([v], [Node(catalog.exp, [cv], {}, [e]), Node(catalog.mul, [v, e], {}, [out])],
                  [out], {cv: c})
    fast = eval_graph(graph, x)[0]
    np.testing.assert_array_equal(fast.numpy(), node_by_node(graph, x)[0].numpy())
    np.testing.assert_array_equal(fast.numpy(), base.T * np.exp(0.5))
    assert len(graph.derived("plan", lambda: None).steps) == 1  # exp of the constant ran at build


def test_a_node_without_a_kernel_is_a_step_running_its_decomposition():
    twice = Primitive("testplan.twice.v1", lambda a: (a.shape, a.dtype), family=True,
                      decomposition=lambda a: lax.add(a, a))

    class Plugin:
        __name__ = "testplan"

        from tenferro_core.plugins import hookimpl

        @hookimpl
        def tenferro_register(self, registry):
            registry.add_op(twice)

    with use_runtime(Runtime([numpy_plugin, Plugin()])):
        x = xp.asarray([1.0, 2.0])
        graph = trace(lambda v: twice.bind(v) * 3.0, x)
        plan = build_plan(graph)
        assert [s[1].name for s in plan.steps] == ["testplan.twice.v1", "mul"]
        np.testing.assert_array_equal(plan.run((x,))[0].numpy(), [6.0, 12.0])
        np.testing.assert_array_equal(eval_graph(graph, x)[0].numpy(), [6.0, 12.0])


def test_inputs_of_other_avals_take_the_node_by_node_path():
    graph = trace(lambda v: xp.exp(v), xp.asarray(np.zeros(3, np.float32)))
    with pytest.raises(Exception, match="float"):
        eval_graph(graph, xp.asarray(np.zeros(3, np.int32)))


def test_dead_code_elimination_keeps_what_outputs_and_effects_need():
    tap = Primitive("testplan.tap.v1", lambda a: (a.shape, a.dtype), effects=True, family=True,
                    decomposition=lambda a: lax.copy(a))

    def f(v):
        dead = xp.exp(v) * 2.0  # noqa: F841  (no output needs it)
        tap.bind(v)
        return xp.sin(v)

    x = xp.asarray([0.1, 0.2])
    graph = trace(f, x)
    pruned = dead_code_elimination(graph)
    names = [n.prim.name for n in pruned.nodes]
    assert names == ["testplan.tap.v1", "sin"]
    assert catalog.exp.name in [n.prim.name for n in graph.nodes]
    np.testing.assert_array_equal(node_by_node(pruned, x)[0].numpy(), np.sin([0.1, 0.2]))


def _reuse_of(steps, forms, known, donated=(), protected=frozenset()):
    """plan_reuse on abstract steps (kernel, prim, ins, outs, params, multiple, frees) whose
    slots are all float32 (4,)."""
    from types import SimpleNamespace

    from tenferro_runtime.plan_reuse import plan_reuse

    full = [(None, None, ins, outs, None, len(outs) > 1, ()) for ins, outs in steps]
    avals = {s: SimpleNamespace(shape=(4,), dtype="f4") for ins, outs in steps for s in (*ins, *outs)}
    return plan_reuse(full, avals, set(protected), forms, donated, known)


def test_results_go_into_dying_operands_and_never_into_one_a_view_shares():
    """A kernel that can write its results into operands (a generated loop's in-place form)
    takes dying buffers the plan owns before donated ones; not an operand another operand of
    the same step views; and a buffer taken leaves the pool with every view of it."""
    form = object()
    # 0 (donated) and 1 (protected) are inputs; step 0 makes 2 (a new array), step 1 views it
    # as 3, step 2 reads 0, 2 and 3 and may write result 0 into any of them
    steps = [((1,), (2,)), ((2,), (3,)), ((0, 2, 3), (4, 5)), ((4,), (6,)), ((6,), (7,))]
    known = {0: ({}, {}, (0,)), 2: ({0: [0, 1, 2], 1: [0, 1, 2]}, {}, (0, 1))}
    reuse = _reuse_of(steps, [None, None, None, form, form], known, donated=(0,), protected={1, 5})
    assert reuse[2] == ((0,), ((0, 0),))  # 2 is viewed by 3 (read here too): only 0
    assert reuse[3] == (4, False)  # in place into its own dying operand
    assert 4 not in {e[0] for k, e in reuse.items() if k != 3}
    # without the view, the plan's own buffer first, then the donated one
    steps = [((1,), (2,)), ((0, 2), (4, 5)), ((4,), (6,))]
    known = {0: ({}, {}, (0,)), 1: ({0: [0, 1], 1: [0, 1]}, {}, (0, 1))}
    reuse = _reuse_of(steps, [None, None, form], known, donated=(0,), protected={1, 5, 6})
    assert reuse[1] == ((2, 0), ((0, 1), (1, 0)))
    assert all(e[0] != 2 for k, e in reuse.items() if k != 1)  # taken: not pooled for later steps


def test_an_unknown_result_shares_every_operands_buffer():
    """A result that is neither new nor a known alias may be a view of any operand: those
    operands stay alive (and out of the pool) while it lives."""
    form = object()
    steps = [((1,), (2,)), ((2,), (3, 4)), ((3,), (5,)), ((4,), (6,))]
    known = {0: ({}, {}, (0,)), 1: ({}, {}, (0,))}  # step 1's result 1 (slot 4): unknown
    reuse = _reuse_of(steps, [None, None, form, form], known, protected={1, 5, 6})
    assert reuse.get(2) is None or reuse[2][0] != 2  # 2 may live on in 4
    assert reuse.get(3) is None or reuse[3][0] != 2
