"""define_op passes the whole Primitive contract through: effects (kept by dead-code
elimination), category, and resolve (rank-dependent defaults filled once, so every spelling
of a call gives one canonical node)."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_numpy.plugin as numpy_plugin
from tenferro_core.avals import Aval
from tenferro_core.dtypes import float64
from tenferro_core.errors import ArgumentError
from tenferro_core.extension import define_op
from tenferro_core.params import p_int, p_optional
from tenferro_core.plugins import hookimpl
from tenferro_runtime import Runtime, eval_graph, lax, trace, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import dead_code_elimination


def _same(x):
    return x.shape, x.dtype


def _runtime(*ops, kernels=()):
    class Plugin:
        __name__ = "test_define_op"

        @hookimpl
        def tenferro_register(self, registry):
            for op in ops:
                registry.add_op(op)
            for op, fn in kernels:
                registry.add_kernel("numpy", op, fn)

    return Runtime([numpy_plugin, Plugin()])


def test_effectful_op_survives_dead_code_elimination_and_a_pure_one_does_not():
    seen = []

    def tap_kernel(x):
        seen.append(x.copy())
        return x

    tap = define_op("test_define_op.tap.v1", _same, effects=True)
    ident = define_op("test_define_op.ident.v1", _same, decomposition=lambda x: lax.copy(x))
    assert tap.effects and not ident.effects

    def f(v):
        tap.bind(v)    # result unused: kept for its effect
        ident.bind(v)  # result unused: dead
        return xp.sin(v)

    with use_runtime(_runtime(tap, ident, kernels=[(tap, tap_kernel)])):
        x = xp.asarray([0.1, 0.2])
        graph = trace(f, x)
        assert [n.prim.name for n in graph.nodes] == [tap.name, ident.name, "sin"]
        pruned = dead_code_elimination(graph)
        assert [n.prim.name for n in pruned.nodes] == [tap.name, "sin"]
        out = eval_graph(pruned, x)[0]
    np.testing.assert_array_equal(out.numpy(), np.sin([0.1, 0.2]))
    assert len(seen) == 1  # the effect ran, once (tracing runs no kernel)
    np.testing.assert_array_equal(seen[0], [0.1, 0.2])


def test_category_is_passed_through_and_validated():
    assert define_op("test_define_op.plain.v1", _same).category == "extension"
    assert define_op("test_define_op.ew.v1", _same, category="elementwise").category == "elementwise"
    with pytest.raises(ArgumentError, match="category must be one of"):
        define_op("test_define_op.bad.v1", _same, category="fused")


def _resolve_axis(avals, payload):
    """axis=None means the last axis; a negative axis counts from the end."""
    axis, ndim = payload["axis"], len(avals[0].shape)
    if axis is None:
        payload["axis"] = ndim - 1
    elif axis < 0:
        payload["axis"] = axis + ndim
    return payload


def _sum_rule(x, *, axis):
    return x.shape[:axis] + x.shape[axis + 1:], x.dtype


sum_along = define_op(
    "test_define_op.sum_along.v1", _sum_rule, payload={"axis": (p_optional(p_int), None)},
    resolve=_resolve_axis, category="reduction",
    decomposition=lambda x, *, axis: lax.reduce_sum(x, axes=(axis,)),
)


def test_resolve_fills_the_rank_dependent_default_in_check_params():
    a2, a3 = Aval((2, 3), float64), Aval((2, 3, 4), float64)
    assert sum_along.check_params({}, (a2,)) == {"axis": 1}
    assert sum_along.check_params({}, (a3,)) == {"axis": 2}
    got = sum_along.check_params({"axis": np.int64(-1)}, (a3,))
    assert got == {"axis": 2} and type(got["axis"]) is int
    assert sum_along.check_params(got, (a3,)) == got  # idempotent


def test_every_spelling_traces_to_one_canonical_node():
    spellings = [{}, {"axis": None}, {"axis": -1}, {"axis": 1}, {"axis": np.int64(1)}]
    with use_runtime(_runtime(sum_along)):
        x = xp.asarray(np.arange(6.0).reshape(2, 3))
        graph = trace(lambda v: [sum_along.bind(v, **p) for p in spellings], x)
        params = [n.params for n in graph.nodes]
        assert params == [{"axis": 1}] * len(spellings)
        assert all(type(p["axis"]) is int for p in params)
        lines = {line.split("=", 1)[1].split("#")[0].strip() for line in str(graph).splitlines()[1:-1]}
        assert lines == {"test_define_op.sum_along.v1[axis=1] a"}
        for out in eval_graph(graph, x):
            np.testing.assert_array_equal(out.numpy(), [3.0, 12.0])
