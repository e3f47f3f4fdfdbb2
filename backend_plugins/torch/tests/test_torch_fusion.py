"""The torch `fused` kernel (tenferro_torch.fusion): bitwise the group's kernels node by node,
inputs and outputs never written, in-place forms only into the group's own dead results."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from tenferro_runtime import array_api as xp
from tenferro_runtime import lax, trace
from tenferro_runtime.graph import eval_graph
from tenferro_runtime.graph_prims import fused_p
from tenferro_runtime.passes.fusion import fuse_elementwise
from tenferro_torch.fusion import fused_kernel, generated_source

DEVICE = "torch:cpu"
BINARY = [lax.add, lax.sub, lax.mul, lax.div, lax.maximum, lax.minimum]
UNARY = [lax.neg, lax.abs, lax.sqrt, lax.exp, lax.tanh, lambda u: lax.reshape(u, new_sizes=u.shape)]


def _program(steps, shape):
    def f(a, b, s):
        vals = [a, b, lax.broadcast_in_dim(s, shape=shape, broadcast_dimensions=())]
        outs = []
        for kind, i, j in steps:
            x, y = vals[i % len(vals)], vals[j % len(vals)]
            if kind == "unary":
                r = UNARY[j % len(UNARY)](x)
            elif kind == "select":
                r = lax.select(lax.lt(x, y), x, y)
            elif kind == "out":  # a value the group returns midway and later reads again
                outs.append(x)
                r = lax.mul(x, y)
            else:
                r = BINARY[(i + j) % len(BINARY)](x, y)
            vals.append(r)
        return (*outs, vals[-1], vals[len(vals) // 2])

    return f


def _bits(t):
    a = np.ascontiguousarray(t if isinstance(t, np.ndarray) else t.numpy())
    return a.shape, a.dtype, a.tobytes()


@st.composite
def programs(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    shape = draw(st.sampled_from([(3, 4), (0, 4), (), (1, 5), (2, 3, 4)]))
    steps = draw(st.lists(st.tuples(st.sampled_from(["unary", "binary", "binary", "select", "out"]),
                                    st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=12))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    transposed = draw(st.booleans())
    arrays = []
    for _ in range(2):
        a = (rng.standard_normal(shape[::-1] if transposed else shape) * 4).astype(dtype)
        arrays.append(a.T if transposed else a)
    return shape, steps, arrays + [np.asarray(rng.standard_normal(), dtype)]


@given(programs())
@example(((2, 3), [("binary", 0, 1), ("out", 3, 0), ("binary", 4, 2), ("unary", 5, 2)],
          [np.ones((2, 3), np.float32), np.full((2, 3), 2.0, np.float32), np.asarray(3.0, np.float32)]))
def test_the_torch_kernel_equals_the_nodes_kernels_and_leaves_inputs_alone(prog):
    shape, steps, arrays = prog
    args = [xp.asarray(a, device=DEVICE) for a in arrays]
    graph = fuse_elementwise(trace(_program(steps, shape), *args))
    env = dict(zip(graph.inputs, args)) | dict(graph.consts)
    for node in graph.nodes:
        ins = [env[v] for v in node.inputs]
        if node.prim is fused_p:
            sub = node.params["graph"]
            want = [_bits(w) for w in eval_graph(sub, *ins)]  # its nodes' own kernels
            before = [_bits(t) for t in ins]
            got = fused_kernel(*[t._buf for t in ins], graph=sub)
            assert all(isinstance(b, torch.Tensor) for b in got)
            assert [_bits(b) for b in got] == want, generated_source(sub)
            assert [_bits(t) for t in ins] == before
            assert len({id(b) for b in got}) == len({id(v) for v in sub.outputs})
        want = node.prim.bind(*ins, **node.params)
        env.update(zip(node.outputs, want if node.prim.multiple_results else (want,)))


def test_a_chain_writes_its_dead_intermediates_in_place():
    x = xp.asarray(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), device=DEVICE)

    def f(a):
        u = lax.mul(lax.add(a, a), a)   # a new tensor, then written in place
        w = lax.sqrt(lax.abs(u))        # abs into u's buffer, sqrt too
        return lax.sub(w, a), u         # u is an output: never written after it is made

    graph = fuse_elementwise(trace(f, x))
    (node,) = [n for n in graph.nodes if n.prim is fused_p]
    src = generated_source(node.params["graph"])
    assert ".mul_(" in src and ".sqrt_(" in src, src
    got = [b.numpy() for b in fused_kernel(x._buf, graph=node.params["graph"])]
    a = x._buf
    u = (a + a) * a  # torch's own out-of-place ops: torch.sqrt is not correctly rounded on
    want = [u.numpy(), (torch.sqrt(torch.abs(u)) - a).numpy()]  # every CPU (NumPy's is)
    assert sorted(map(_bits, got)) == sorted(map(_bits, want))


def test_a_value_read_again_later_is_not_written():
    x = xp.asarray(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), device=DEVICE)

    def f(a):
        b = lax.add(a, a)
        c = lax.mul(b, a)          # b is read again below: c is a new tensor
        return lax.add(lax.neg(c), b)

    graph = fuse_elementwise(trace(f, x))
    (node,) = [n for n in graph.nodes if n.prim is fused_p]
    (got,) = fused_kernel(x._buf, graph=node.params["graph"])
    a = x.numpy()
    np.testing.assert_array_equal(got.numpy(), -((a + a) * a) + (a + a))
