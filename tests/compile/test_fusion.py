"""Elementwise fusion: the groups the pass finds, values bitwise those of the unfused graph on
numpy:cpu and torch:cpu, and the numpy fused kernel bitwise equal to node-by-node kernels."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tenferro_core import dtypes
from tenferro_numpy.fusion import fused_kernel, generated_source
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime, lax, trace
from tenferro_runtime.graph import eval_graph, verify_graph
from tenferro_runtime.graph_prims import fused_p
from tenferro_runtime.passes.fusion import fuse_elementwise

# pyproject.toml's filter covers the kernels' modules; generated code warns as tenferro_numpy.fusion
pytestmark = pytest.mark.filterwarnings(r"ignore::RuntimeWarning:tenferro_numpy\.fusion")
DEVICES = ("numpy:cpu",)  # each test picks its devices itself (conftest.py runs modules per device)


def _names(graph):
    return [n.prim.name for n in graph.nodes]


def _fused(graph):
    return [n.params["graph"] for n in graph.nodes if n.prim is fused_p]


def _bits(t):
    a = np.ascontiguousarray(t.numpy() if hasattr(t, "numpy") else t)
    return a.shape, a.dtype, a.view(np.uint8).tobytes() if a.dtype != np.bool_ else a.tobytes()


def _check(fn, *args):
    """Trace, fuse, verify; fused values bitwise equal to the unfused graph's; the fused graph."""
    graph = trace(fn, *args)
    fused = fuse_elementwise(graph)
    verify_graph(fused)
    want, got = eval_graph(graph, *args), eval_graph(fused, *args)
    assert [_bits(a) for a in want] == [_bits(b) for b in got]
    return fused


def _chain(x):
    v = x
    for f in (lax.exp, lax.sin, lax.neg, lax.tanh, lambda u: lax.mul(u, u), lax.cos,
              lambda u: lax.add(u, x), lax.abs, lax.sqrt, lax.log1p):
        v = f(v)
    return v


X = xp.asarray(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))


def test_a_chain_of_ten_becomes_one_fused_node():
    fused = _check(_chain, X)
    assert _names(fused) == ["fused"]
    (sub,) = _fused(fused)
    assert len(sub.nodes) == 10 and len(sub.inputs) == 1 and len(sub.outputs) == 1
    src = generated_source(sub)
    assert "(s0, s0)" in src and "s1" not in src.split("return")[0]  # one scratch buffer
    assert X.device.kernels[fused_p] is fused_kernel
    (eager,) = fused_p.bind(X, graph=sub)  # eager dispatch runs the kernel
    assert _bits(eager) == _bits(eval_graph(sub, X)[0])
    copy = sub.replace()  # derived data lives beside each graph: the copy generates its own
    generated_source(copy)
    mine = sub.derived("numpy_fused", lambda: None)
    assert mine is not None and copy.derived("numpy_fused", lambda: None) is not mine
    assert "numpy_fused" not in sub.meta  # nothing written into the graph


def test_a_dot_general_splits_groups():
    def f(a):
        b = lax.exp(lax.neg(a))
        c = lax.dot_general(b, lax.transpose(b, permutation=(1, 0)),
                            contracting_dims=((1,), (0,)), batch_dims=((), ()))
        return lax.sin(lax.mul(c, c))

    fused = _check(f, X)
    assert _names(fused) == ["fused", "transpose", "dot_general", "fused"]


def test_a_diamond_is_one_group_reading_its_input_once():
    fused = _check(lambda a: lax.add(lax.exp(a), lax.sin(a)), X)
    assert _names(fused) == ["fused"] and len(fused.nodes[0].inputs) == 1


def test_no_group_reenters_through_a_reduction():
    def f(a):
        e = lax.exp(a)
        s = lax.reduce_sum(e, axes=(1,))
        return lax.mul(e, lax.broadcast_in_dim(s, shape=(3, 4), broadcast_dimensions=(0,)))

    fused = _check(f, X)
    assert _names(fused) == ["exp", "reduce_sum", "fused"]
    assert [n.prim.name for n in _fused(fused)[0].nodes] == ["broadcast_in_dim", "mul"]


def test_an_outside_reader_of_a_member_moves_after_the_fused_node():
    def f(a, b):
        e = lax.exp(a)
        s = lax.reduce_sum(e, axes=(0, 1))  # reads e, comes before the group's last node
        return s, lax.mul(e, b)

    fused = _check(f, X, X)
    assert _names(fused) == ["fused", "reduce_sum"]


def test_groups_do_not_depend_on_each_other_both_ways():
    # {a0, a1, rb, a2} and {b0, b1, ra, b2} are each convex, but each would read the other
    # (through a reduction): the second group must be cut
    def f(x, y):
        a0 = lax.neg(x)
        a1 = lax.sin(a0)
        b0 = lax.exp(y)
        b1 = lax.cos(b0)
        ra = lax.broadcast_in_dim(lax.reduce_sum(a1, axes=(1,)), shape=(3, 4), broadcast_dimensions=(0,))
        rb = lax.broadcast_in_dim(lax.reduce_sum(b1, axes=(1,)), shape=(3, 4), broadcast_dimensions=(0,))
        return lax.add(a0, rb), lax.add(b0, ra)

    fused = _check(f, X, X)
    assert sorted(len(g.nodes) for g in _fused(fused)) == [2, 2, 4]


def test_fused_nodes_join_by_inlining_and_groups_stay_on_one_device():
    inner = _fused(_check(lambda a: lax.sin(lax.exp(a)), X))[0]
    fused = _check(lambda a: lax.neg(fused_p.bind(lax.abs(a), graph=inner)[0]), X)
    assert _names(fused) == ["fused"]
    assert [n.prim.name for n in _fused(fused)[0].nodes] == ["abs", "exp", "sin", "neg"]
    t = xp.asarray(np.ones((2,), np.float32), device="torch:cpu")
    fused = _check(lambda a, b: (lax.sin(lax.exp(a)), lax.sin(lax.exp(b))), X, t)
    assert _names(fused) == ["fused", "fused"]


def test_fusion_is_a_registered_pass():
    assert "fusion" in default_runtime().passes


# random programs: ops by the dtype kinds they take (integer div and pow take kernel paths)
UNARY = {"f": [lax.exp, lax.sin, lax.tanh, lax.sqrt, lax.log1p, lax.neg, lax.floor, lax.logistic],
         "c": [lax.exp, lax.sin, lax.sqrt, lax.neg, lax.conj],
         "i": [lax.neg, lax.abs, lax.bitwise_not, lax.sign], "u": [lax.bitwise_not, lax.sign],
         "b": [lax.logical_not]}
BINARY = {"f": [lax.add, lax.mul, lax.sub, lax.div, lax.maximum, lax.pow, lax.atan2, lax.rem],
          "c": [lax.add, lax.mul, lax.sub, lax.div],
          "i": [lax.add, lax.mul, lax.sub, lax.div, lax.rem, lax.maximum, lax.bitwise_xor],
          "u": [lax.add, lax.mul, lax.sub, lax.div, lax.pow, lax.minimum],
          "b": [lax.logical_and, lax.logical_or, lax.logical_xor, lax.maximum]}
DTYPES = ["bool", "int8", "int32", "int64", "uint8", "uint32", "float16", "float32", "float64",
          "complex64", "complex128"]
SHAPES = [(3, 4), (0, 4), (), (1, 5), (2, 3, 4), (4, 0)]


def _program(steps, kind, bshape, shape):
    def f(a, b):
        vals = [a, lax.broadcast_in_dim(b, shape=shape, broadcast_dimensions=tuple(
            range(len(shape) - len(bshape), len(shape))))]
        outs = []
        for op, i, j in steps:
            x, y = vals[i % len(vals)], vals[j % len(vals)]
            if op == "unary":
                ops = UNARY[kind]
                r = ops[j % len(ops)](x)
            elif op == "binary":
                ops = BINARY[kind]
                r = ops[(i * 7 + j) % len(ops)](x, y)
            elif op == "select":
                r = lax.select(lax.lt(x, y) if kind != "c" else lax.ne(x, y), x, y)
            elif op == "convert":
                r = lax.convert(lax.convert(x, new_dtype=dtypes.float64 if kind != "c"
                                            else dtypes.complex128), new_dtype=x.dtype)
            else:  # a reduction ends the group; its value comes back broadcast
                s = (lax.reduce_or if kind == "b" else lax.reduce_sum)(x, axes=(0,)) if shape else x
                r = lax.broadcast_in_dim(s, shape=shape, broadcast_dimensions=tuple(range(1, len(shape))))
                outs.append(x)
            vals.append(r)
        return (*outs, vals[-1], vals[len(vals) // 2])

    return f


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.sampled_from(SHAPES))
    bshape = shape[draw(st.integers(0, len(shape))):]
    steps = draw(st.lists(st.tuples(st.sampled_from(["unary", "binary", "binary", "select",
                                                     "convert", "reduce"]),
                                    st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=10))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    transposed = draw(st.booleans())
    arrays = []
    for s in (shape, bshape):
        raw = rng.standard_normal((2, *(s[::-1] if transposed else s))) * 4
        a = raw[0] + 1j * raw[1] if dtype.startswith("complex") else raw[0]
        a = (a > 0) if dtype == "bool" else a.astype(dtype)
        arrays.append(a.T if transposed else a)  # .T: a non-contiguous buffer
    return dtype, shape, bshape, steps, arrays


# a thorough run: x * sqrt(x) in complex64 written as sqrt(x).mul_(x) (torch's vectorized complex
# product is not bitwise commutative)
_COMPLEX_MUL = ("complex64", (3, 4), (3, 4),
                [("unary", 0, 12), ("binary", 3, 20), ("unary", 0, 0), ("unary", 0, 0)], [np.array(
    [[0.50292087 - 9.300123j, -0.52841944 - 0.87516665j, 2.5616906 - 4.983644j, 0.41960046 - 2.9290695j],
     [-2.1426775 - 2.177036j, 1.4463803 - 1.2652006j, 5.216 + 1.6465222j, 3.7883239 + 4.1700535j],
     [-2.814941 - 0.51413864j, -5.061686 + 5.4658537j, -2.4930978 - 2.6607788j, 0.16530392 + 1.4060403j]],
    np.complex64), np.ones((3, 4), np.complex64)])


@given(programs(), st.sampled_from(["numpy:cpu", "torch:cpu"]))
@example(_COMPLEX_MUL, "torch:cpu")
def test_fused_graphs_give_bitwise_the_unfused_values(prog, device):
    dtype, shape, bshape, steps, arrays = prog
    args = [xp.asarray(a, device=device) for a in arrays]
    fused = _check(_program(steps, dtypes.as_dtype(dtype).kind, bshape, shape), *args)
    for sub in _fused(fused):
        verify_graph(sub)


@given(programs())
def test_the_numpy_kernel_equals_the_nodes_kernels_and_leaves_inputs_alone(prog):
    dtype, shape, bshape, steps, arrays = prog
    args = [xp.asarray(a) for a in arrays]
    graph = fuse_elementwise(trace(_program(steps, dtypes.as_dtype(dtype).kind, bshape, shape), *args))
    env = dict(zip(graph.inputs, args)) | dict(graph.consts)
    for node in graph.nodes:  # each node on the values node-by-node evaluation gives
        ins = [env[v] for v in node.inputs]
        want = node.prim.bind(*ins, **node.params)
        want = want if node.prim.multiple_results else (want,)
        if node.prim is fused_p:
            sub = node.params["graph"]
            before = [_bits(t) for t in ins]
            for bufs in ([t.numpy() for t in ins], [np.array(t.numpy(), order="F") for t in ins]):
                got = fused_kernel(*bufs, graph=sub)
                assert all(isinstance(b, np.ndarray) for b in got)
                assert [_bits(b) for b in got] == [_bits(w) for w in eval_graph(sub, *ins)]
            assert [_bits(t) for t in ins] == before
        env.update(zip(node.outputs, want))


@pytest.mark.parametrize("shape", [(1000, 1000), (8, 8)])
def test_fused_chain_on_a_large_and_a_small_array_is_bitwise_node_by_node(shape):
    """The chain of ten as one fused node (its plan) and as the fused kernel on the buffer,
    both bitwise the node-by-node graph, on a 4 MB and a 256-byte array (timings: bench/)."""
    x = xp.asarray(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    graph = trace(_chain, x)
    fused = fuse_elementwise(graph)
    (sub,) = _fused(fused)
    want = _bits(eval_graph(graph, x)[0])
    assert _bits(eval_graph(fused, x)[0]) == want
    assert _bits(fused_kernel(x.numpy(), graph=sub)[0]) == want
