"""The rewriting passes (inline, simplify, fold, cse): each does its job, keeps the graph well
formed with its signature, never edits its input, and keeps eval_graph's values bitwise."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenferro_core import catalog as C
from tenferro_core.extension import define_op
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.graph import Graph, Node, Var, dead_code_elimination, eval_graph, trace, verify_graph
from tenferro_runtime.graph_prims import call_p
from tenferro_runtime.passes.cse import common_subexpressions
from tenferro_runtime.passes.fold import fold_constants
from tenferro_runtime.passes.inline import inline_calls
from tenferro_runtime.passes.simplify import simplify

SPECIAL = np.array([1.5, -0.0, 0.0, np.nan, -np.inf, np.inf, -2.25])
TAPS: list = []


def _same(x):
    return x.shape, x.dtype


def _tap_impl(x):
    TAPS.append(1)
    return lax.copy(x)


tap = define_op("test_passes_rewrite.tap.v1", _same, effects=True, decomposition=_tap_impl)
draw = define_op("test_passes_rewrite.draw.v1", _same, category="random", decomposition=lax.copy)
broken = define_op("test_passes_rewrite.broken.v1", _same, decomposition=lambda x: 1 / 0)


@pytest.fixture(scope="module")
def dev(backend_device):
    """The device under test: numpy:cpu, then torch:cpu (tests/compile/conftest.py)."""
    return backend_device


class Callee:
    """A stand-in for a compiled function: its graph, run by eval_graph."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def run(self, args):
        return eval_graph(self.graph, *args)


def t(a, dev, dtype=None):
    return xp.asarray(np.asarray(a, dtype=dtype), device=dev)


def node(prim, ins, **params):
    """A Node of `prim` on vars `ins` with fresh output vars."""
    avals = tuple(v.aval for v in ins)
    p = prim.check_params(params, avals)
    return Node(prim, list(ins), p, [Var(a) for a in prim.abstract_eval(avals, p)], "test")


def const_graph(inputs, consts, nodes, outputs):
    return Graph(inputs=inputs, nodes=nodes, outputs=outputs, consts=consts)


def snapshot(g):
    return ([(n, list(n.inputs), list(n.outputs), dict(n.params)) for n in g.nodes], list(g.outputs),
            dict(g.consts))


def bits(x):
    a = np.asarray(x.numpy())
    return a.shape, a.dtype, a.tobytes()


def check(pass_fn, g, *args):
    """Run `pass_fn` on `g`: verified, same signature, input untouched, same values bitwise."""
    before = snapshot(g)
    new = pass_fn(g)
    assert snapshot(g) == before
    verify_graph(new)
    assert [v.aval for v in new.inputs] == [v.aval for v in g.inputs]
    assert [v.aval for v in new.outputs] == [v.aval for v in g.outputs]
    want, got = eval_graph(g, *args), eval_graph(new, *args)
    assert [bits(a) for a in got] == [bits(a) for a in want]
    return new


def prims(g):
    return [n.prim.name for n in g.nodes]


# ---- inline ---------------------------------------------------------------------------------

def test_inline_replaces_calls_with_fresh_vars_and_keeps_sites(dev):
    x, c = t(SPECIAL, dev), t(np.arange(7.0), dev)
    callee = Callee(trace(lambda v: xp.sin(v) * c, x))
    g = trace(lambda v: call_p.bind(call_p.bind(v, fn=callee)[0], fn=callee)[0] - v, x)
    assert prims(g) == ["call", "call", "sub"]
    new = check(inline_calls, g, x)
    assert prims(new) == ["sin", "mul", "sin", "mul", "sub"]
    assert {n.site for n in new.nodes[:4]} == {callee.graph.nodes[0].site}
    assert len(new.consts) == 1  # the callee's one constant, once however often inlined
    assert not {v for n in new.nodes for v in n.outputs} & {v for n in callee.graph.nodes for v in n.outputs}


def test_inline_nested_calls_and_outputs_that_are_inputs_or_consts(dev):
    x = t(np.array([[1.0, -0.0, np.nan]], dtype=np.float32), dev)
    c = t(np.array([[2.0, 3.0, 4.0]], dtype=np.float32), dev)
    inner = Callee(trace(lambda v: (v, c, xp.exp(v)), x))
    mid = Callee(trace(lambda v: [o + v for o in call_p.bind(v, fn=inner)], x))
    g = trace(lambda v: call_p.bind(v, fn=mid), x)
    new = check(inline_calls, g, x)
    assert "call" not in prims(new)
    assert prims(new) == ["exp", "add", "add", "add"]


def test_inline_of_a_graph_without_calls_and_of_an_edge_shape(dev):
    x = t(np.zeros((0, 3)), dev)
    g = trace(lambda v: xp.cos(v), x)
    assert prims(check(inline_calls, g, x)) == ["cos"]
    s = t(np.float64(-0.0), dev)
    callee = Callee(trace(lambda v: -v, s))
    new = check(inline_calls, trace(lambda v: call_p.bind(v, fn=callee)[0], s), s)
    assert prims(new) == ["neg"]


# ---- simplify -------------------------------------------------------------------------------

def _simplified(g, *args):
    return dead_code_elimination(check(simplify, g, *args))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_simplify_removes_arithmetic_identities(dev, dtype):
    vals = SPECIAL if np.dtype(dtype).kind == "f" else np.array([3, -7, 0, 1, 2, 5, -1])
    x = t(vals, dev, dtype)
    one, zero = t(np.ones(7), dev, dtype), t(np.zeros(7), dev, dtype)
    g = trace(lambda v: (lax.div(one * (v * one), one) - zero, lax.neg(lax.neg(v))), x)
    assert prims(_simplified(g, x)) == []
    kept = trace(lambda v: v * zero + one, x)  # not identities
    assert prims(_simplified(kept, x)) == ["mul", "add"]


def test_simplify_signed_zeros(dev):
    x = t(SPECIAL, dev)
    pz, nz = t(np.zeros(7), dev), t(np.full(7, -0.0), dev)
    assert prims(_simplified(trace(lambda v: v + pz, x), x)) == ["add"]  # -0.0 + 0.0 is +0.0
    assert prims(_simplified(trace(lambda v: (v + nz, nz + v, v - pz), x), x)) == []
    assert prims(_simplified(trace(lambda v: v - nz, x), x)) == ["sub"]
    i = t(np.array([0, 1, -5]), dev)
    assert prims(_simplified(trace(lambda v: v + t(np.zeros(3, np.int64), dev), i), i)) == []


def test_simplify_keeps_complex_times_one(dev):
    z = t(np.array([complex(-0.0, -0.0), complex(np.inf, 0.0), 1 + 2j]), dev)
    one = t(np.ones(3, np.complex128), dev)
    assert prims(_simplified(trace(lambda v: v * one, z), z)) == ["mul"]
    assert prims(_simplified(trace(lambda v: lax.conj(lax.conj(v)), z), z)) == []


def test_simplify_ones_made_by_full_and_broadcast(dev):
    x = Var(t(np.ones((2, 3), np.float32), dev)._aval)
    device = x.aval.device
    f = node(C.full, [], shape=(), fill_value=1.0, dtype=x.aval.dtype, device=device)
    b = node(C.broadcast_in_dim, f.outputs, shape=(2, 3), broadcast_dimensions=())
    m = node(C.mul, [x, b.outputs[0]])
    z = node(C.full, [], shape=(2, 3), fill_value=-0.0, dtype=x.aval.dtype, device=device)
    a = node(C.add, [z.outputs[0], m.outputs[0]])
    p = node(C.full, [], shape=(2, 3), fill_value=0.0, dtype=x.aval.dtype, device=device)
    k = node(C.add, [a.outputs[0], p.outputs[0]])
    g = const_graph([x], {}, [f, b, m, z, a, p, k], [a.outputs[0], k.outputs[0]])
    arg = t(np.array([[-0.0, np.nan, 1], [2, -np.inf, 3]], np.float32), dev)
    new = _simplified(g, arg)
    assert new.outputs[0] is x and prims(new) == ["full", "add"]


@pytest.mark.parametrize("shape", [(2, 3, 4), (0, 3, 1), (1, 1, 1)])
def test_simplify_removes_layout_noops_and_composes_chains(dev, shape):
    x = t(np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 3, dev)

    def f(v):
        a = lax.transpose(lax.transpose(v, permutation=(1, 2, 0)), permutation=(2, 0, 1))
        b = lax.transpose(lax.transpose(v, permutation=(1, 0, 2)), permutation=(0, 2, 1))
        r = lax.reshape(lax.reshape(v, new_sizes=(shape[0], shape[1] * shape[2])),
                        new_sizes=(shape[2], shape[1], shape[0]))
        s = lax.reshape(lax.reshape(v, new_sizes=(v.size,)), new_sizes=shape)
        c = lax.convert(v, new_dtype=v.dtype)
        d = lax.broadcast_in_dim(v, shape=shape, broadcast_dimensions=(0, 1, 2))
        e = lax.slice(v, start_indices=(0, 0, 0), limit_indices=shape)
        w = lax.reverse(v, dimensions=())
        p = lax.select(lax.gt(v, v), v, v)
        return a, b, r, s, c, d, e, w, p

    g = trace(f, x)
    new = _simplified(g, x)
    same = shape == (1, 1, 1)  # the composed reshape keeps the shape: it goes too
    assert prims(new) == ["transpose"] + ["reshape"] * (not same)
    assert new.nodes[0].params["permutation"] == (1, 2, 0)
    assert [o is new.inputs[0] for o in new.outputs] == [True, False, same] + [True] * 6


def test_simplify_zero_d_and_broadcast_chains(dev):
    x = t(np.float32(-0.0), dev)
    g = trace(lambda v: lax.broadcast_in_dim(lax.broadcast_in_dim(v, shape=(3,), broadcast_dimensions=()),
                                             shape=(2, 3), broadcast_dimensions=(1,)), x)
    new = _simplified(g, x)
    assert prims(new) == ["broadcast_in_dim"] and new.nodes[0].params["broadcast_dimensions"] == ()
    r = t(np.array([1.0, 2.0]), dev)
    g = trace(lambda v: lax.reverse(v, dimensions=(0,)), r)
    assert prims(_simplified(g, r)) == ["reverse"]  # a real reverse stays


@given(ops=st.lists(st.sampled_from(["mul1", "div1", "sub0", "addn0", "add0", "neg", "conv"]),
                    max_size=6),
       vals=st.lists(st.floats(allow_subnormal=True, width=32), min_size=1, max_size=4))
def test_simplify_keeps_values_bitwise(dev, ops, vals):
    x = t(np.array(vals, np.float32), dev)
    n = len(vals)
    one, pz, nz = (t(np.full(n, v, np.float32), dev) for v in (1.0, 0.0, -0.0))
    steps = {"mul1": lambda v: v * one, "div1": lambda v: v / one, "sub0": lambda v: v - pz,
             "addn0": lambda v: nz + v, "add0": lambda v: v + pz, "neg": lambda v: -v,
             "conv": lambda v: lax.convert(v, new_dtype=v.dtype)}

    def f(v):
        for op in ops:
            v = steps[op](v)
        return v

    check(simplify, trace(f, x), x)


# ---- fold -----------------------------------------------------------------------------------

def test_fold_turns_constant_chains_into_consts(dev):
    x, c = t(SPECIAL, dev), t(SPECIAL[::-1].copy(), dev)
    g = trace(lambda v: v + xp.sin(c) * xp.exp(c), x)
    new = check(fold_constants, g, x)
    assert prims(new) == ["add"]
    assert len(new.consts) == 1 and next(iter(new.consts)) in new.nodes[0].inputs


def test_fold_nodes_without_inputs_and_the_size_bound(dev):
    x = Var(t(np.zeros((2, 3), np.int32), dev)._aval)
    dt, device = x.aval.dtype, x.aval.device
    i = node(C.iota, [], dtype=dt, shape=(2, 3), dimension=1, device=device)
    f = node(C.full, [], shape=(2, 3), fill_value=-4, dtype=dt, device=device)
    m = node(C.mul, [i.outputs[0], f.outputs[0]])
    a = node(C.add, [x, m.outputs[0]])
    z = node(C.full, [], shape=(0,), fill_value=1, dtype=dt, device=device)
    g = const_graph([x], {}, [i, f, m, a, z], [a.outputs[0], z.outputs[0], i.outputs[0]])
    arg = t(np.arange(6, dtype=np.int32).reshape(2, 3), dev)
    new = check(fold_constants, g, arg)
    assert prims(new) == ["add"] and new.outputs[1] in new.consts
    small = check(lambda gr: fold_constants(gr, max_elements=5), g, arg)
    assert prims(small) == ["iota", "full", "mul", "add"]  # 6 elements each: over the bound


def test_fold_leaves_effects_random_and_failures(dev):
    x, c = t(np.array([1.0, -0.0]), dev), t(np.array([2.0, np.nan]), dev)
    xv, cv = Var(x._aval), Var(c._aval)
    nodes = [node(op, [cv]) for op in (tap, draw, broken, C.sin)]
    m = node(C.mul, [xv, nodes[0].outputs[0]])
    g = const_graph([xv], {cv: c}, nodes[:2] + [m, nodes[3]], [m.outputs[0], nodes[1].outputs[0],
                                                             nodes[3].outputs[0]])
    new = check(fold_constants, g, x)
    assert prims(new) == [tap.name, draw.name, "mul"]
    gb = const_graph([xv], {cv: c}, [nodes[2]], [nodes[2].outputs[0]])
    assert prims(fold_constants(gb)) == [broken.name]  # its evaluation raises: it stays


# ---- cse ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("shape", [(), (0,), (3,)])
def test_cse_merges_repeated_nodes(dev, dtype, shape):
    base = np.resize(np.array([-0.0, np.nan, 2.5], dtype), shape) if shape != () else np.array(-0.0, dtype)
    x = t(base, dev)
    g = trace(lambda v: (xp.sin(v) + xp.sin(v), xp.cos(xp.sin(v)) * xp.cos(xp.sin(v)), xp.exp(v)), x)
    new = dead_code_elimination(check(common_subexpressions, g, x))

    def once(v):  # each subexpression computed once: what CSE must leave
        s = xp.sin(v)
        c = xp.cos(s)
        return s + s, c * c, xp.exp(v)

    want = dead_code_elimination(common_subexpressions(trace(once, x)))
    assert sorted(prims(new)) == sorted(prims(want))
    if dtype is not np.complex128:  # complex adds the special-value selects of each function
        assert sorted(prims(new)) == sorted(["sin", "add", "cos", "mul", "exp"])


def test_cse_keeps_signed_zero_fills_apart_and_merges_same_tensor_consts(dev):
    c = t(np.array([1.0, -0.0]), dev)
    x = Var(c._aval)
    dt, device = x.aval.dtype, x.aval.device
    fulls = [node(C.full, [], shape=(2,), fill_value=v, dtype=dt, device=device) for v in (0.0, -0.0, 0.0)]
    nan = float("nan")
    nans = [node(C.full, [], shape=(2,), fill_value=nan, dtype=dt, device=device) for _ in range(2)]
    k1, k2 = Var(c._aval), Var(c._aval)
    adds = [node(C.add, [x, f.outputs[0]]) for f in fulls + nans]
    sums = [node(C.mul, [k, x]) for k in (k1, k2)]
    nodes = fulls + nans + adds + sums
    g = const_graph([x], {k1: c, k2: c}, nodes, [n.outputs[0] for n in adds + sums])
    new = dead_code_elimination(check(common_subexpressions, g, c))
    assert prims(new).count("full") == 3 and prims(new).count("add") == 3
    assert prims(new).count("mul") == 1 and list(new.consts) == [k1]


def test_cse_never_merges_effectful_or_random_nodes(dev):
    x = t(np.array([1.0, 2.0]), dev)
    g = trace(lambda v: (tap.bind(v) + tap.bind(v), draw.bind(v) * draw.bind(v)), x)
    del TAPS[:]
    new = dead_code_elimination(check(common_subexpressions, g, x))
    assert prims(new).count(tap.name) == 2 and prims(new).count(draw.name) == 2
    assert len(TAPS) == 4  # both graphs ran both taps


def test_cse_merges_calls_of_pure_graphs_only(dev):
    x = t(np.array([1.0, 2.0]), dev)
    pure = Callee(trace(lambda v: xp.sin(v), x))
    effect = Callee(trace(lambda v: tap.bind(v), x))
    g = trace(lambda v: [call_p.bind(v, fn=f)[0] for f in (pure, pure, effect, effect)], x)
    new = check(common_subexpressions, g, x)
    assert prims(new) == ["call"] * 3


# ---- all four in order ------------------------------------------------------------------------

def test_the_four_passes_in_order_keep_values_and_effects(dev):
    x, c = t(SPECIAL, dev), t(np.ones(7), dev)
    callee = Callee(trace(lambda v: (v * c) * xp.exp(c), x))

    def f(v):
        tap.bind(v)
        a = call_p.bind(v, fn=callee)[0]
        return a + call_p.bind(v, fn=callee)[0], lax.neg(lax.neg(a))

    g = trace(f, x)
    new = g
    for p in (inline_calls, simplify, fold_constants, common_subexpressions, dead_code_elimination):
        new = check(p, new, x)
    assert prims(new) == [tap.name, "mul", "add"]


def test_cse_merges_small_constants_by_value_and_keeps_their_bits_apart(dev):
    x = t(np.array([1.0, 2.0]), dev)
    vals = [np.array([0.5, -0.0]), np.array([0.5, -0.0]), np.array([0.5, 0.0]),
            np.array([np.nan, 1.0]), np.array([np.nan, 1.0])]
    g = trace(lambda v: [v * t(c, dev) for c in vals], x)  # five constant tensors, three values
    assert len(g.consts) == 5
    new = dead_code_elimination(check(common_subexpressions, g, x))
    assert len(new.consts) == 3 and prims(new) == ["mul"] * 3
