"""The example of docs/extensions.md "Your own interpreter or observer", run: an Observer
counting primitives by category, and a Trace counting FLOPs (cost rules) while delegating
to bind on the primal values."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import tenferro_ad as ad
from tenferro_core.catalog.cost import TRANSCENDENTAL_FLOPS
from tenferro_core.errors import TenferroError
from tenferro_runtime import Observer, Trace, Tracer, new_trace, trace, tracing
from tenferro_runtime import array_api as xp
from tenferro_runtime.cost import graph_cost, op_cost

# ---- the example, as in docs/extensions.md ---------------------------------------------


class CategoryCounter(Observer):
    def __init__(self):
        self.counts = Counter()

    def observe(self, prim, args, params, out):
        self.counts[prim.category] += 1


class FlopTracer(Tracer):
    __slots__ = ("primal",)


class FlopCounter(Trace):
    def __init__(self):
        self.flops = 0

    def lift(self, x):
        t = object.__new__(FlopTracer)
        t._aval, t._trace, t.primal = x._aval, self, x
        return t

    def process(self, prim, args, params):
        primals = [a.primal if isinstance(a, FlopTracer) and a._trace is self else a for a in args]
        out = prim.bind(*primals, **params)  # below this trace: runs the kernel
        outs = out if prim.multiple_results else (out,)
        in_avals = [p._aval for p in primals]
        cost = op_cost(in_avals[0].device.runtime, prim, in_avals, [o._aval for o in outs],
                       prim.check_params(params, in_avals))
        self.flops += cost.flops
        lifted = [self.lift(o) for o in outs]
        return tuple(lifted) if prim.multiple_results else lifted[0]

    def concrete(self, tracer):
        return tracer.primal.numpy()


def count_flops(f, *args):
    with new_trace(FlopCounter()) as tr:
        out = f(*[tr.lift(a) for a in args])
        return out.primal, tr.flops


# ---- tests ---------------------------------------------------------------------------------


def f(v):
    return xp.sum(xp.exp(v) * v)


def test_observer_counts_primitives_by_category():
    x = xp.asarray(np.linspace(0.0, 1.0, 12).reshape(3, 4))
    counter = CategoryCounter()
    token = tracing.push_observer(counter)
    try:
        f(x)
    finally:
        tracing.pop(token)
    assert counter.counts == {"elementwise": 2, "reduction": 1}  # exp, mul; reduce_sum
    f(x)  # popped: no longer told
    assert sum(counter.counts.values()) == 3


def test_trace_counts_flops_and_computes_the_value():
    x0 = np.linspace(0.0, 1.0, 12).reshape(3, 4)
    x = xp.asarray(x0)
    value, flops = count_flops(f, x)
    assert type(value) is type(x)  # a concrete tensor: the kernels ran
    np.testing.assert_allclose(value.numpy(), np.sum(np.exp(x0) * x0))
    assert flops == 12 * TRANSCENDENTAL_FLOPS + 12 + 12  # exp, mul, reduce_sum
    assert flops == graph_cost(trace(f, x)).flops


def test_the_flop_trace_nests_with_tracing_and_is_concrete_for_control_flow():
    x = xp.asarray([1.0, -2.0])

    def g(v):
        return -v if float(xp.sum(v)) < 0 else v  # bool/float of a tracer: FlopCounter.concrete

    value, flops = count_flops(g, x)
    np.testing.assert_array_equal(value.numpy(), [-1.0, 2.0])
    assert flops == 2 + 2  # reduce_sum, neg
    graph = trace(lambda v: count_flops(f, v)[0], x)  # FlopCounter above a GraphTrace
    assert [n.prim.name for n in graph.nodes] == ["exp", "mul", "reduce_sum"]


def test_the_flop_trace_nests_with_grad_in_either_order():
    x0 = np.linspace(0.1, 1.0, 4)
    x = xp.asarray(x0)
    want = np.exp(x0) * (1.0 + x0)
    value, flops = count_flops(ad.grad(f), x)  # the AD graphs' primitives are counted too
    np.testing.assert_allclose(value.numpy(), want)
    assert flops > count_flops(f, x)[1]
    np.testing.assert_allclose(ad.grad(lambda v: count_flops(f, v)[0])(x).numpy(), want)


def test_an_escaped_tracer_is_a_clear_error():
    leaked = []
    count_flops(lambda v: leaked.append(v) or v, xp.asarray([1.0]))
    with pytest.raises(TenferroError, match="escaped"):
        xp.exp(leaked[0])
