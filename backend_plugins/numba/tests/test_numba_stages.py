"""Fused groups with transcendental functions: generated loops around NumPy's own kernels for
them (stages.py), against the NumPy kernels evaluating the same group node by node: the same
bits, with the cut node's result used later, returned, or both, 0-d values, constants read
on both sides of a cut, and several cuts in a row."""

from __future__ import annotations

import numpy as np
import pytest
from test_numba_codegen import DEV, same

from tenferro_core import dtypes as D
from tenferro_numba import codegen
from tenferro_numba.executor import fused_kernel
from tenferro_numba.stages import cuts
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.graph import eval_graph, trace


def run_staged(fn, hosts):
    tensors = [xp.asarray(h, device=DEV) for h in hosts]
    graph = trace(fn, *tensors).replace(out_tree=None)
    want = [t.numpy() for t in eval_graph(graph, *tensors)]
    got = fused_kernel(graph, DEV)(*[t._buf for t in tensors])
    for g, w in zip(got, want):
        same(g, w)
    return graph


def _gelu(x, b):
    h = x + b
    t = xp.tanh(0.7978846 * (h + 0.044715 * (h * h * h)))
    return [0.5 * h * (1.0 + t), t]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_gelu_group_cut_at_tanh_gives_numpys_bits(dtype):
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal((4, 6, 40)).astype(dtype), rng.standard_normal(40).astype(dtype)]
    graph = run_staged(_gelu, hosts)
    assert [graph.nodes[k].prim.name for k in cuts(graph)] == ["tanh"]


def test_several_cuts_zero_d_values_and_constants_on_both_sides():
    rng = np.random.default_rng(1)
    table = xp.asarray(rng.standard_normal((5, 37)).astype(np.float32), device=DEV)

    def fn(x, s):
        e = xp.exp(x * table)
        lg = xp.log1p(xp.abs(e))
        z = xp.exp(s)  # a 0-d exp, broadcast into the last loop
        return [lg * table + z, e, z]

    graph = run_staged(fn, [rng.standard_normal((5, 37)).astype(np.float32), np.asarray(0.3, np.float32)])
    assert sorted(graph.nodes[k].prim.name for k in cuts(graph)) == ["exp", "exp", "log1p"]


def test_a_cut_at_a_dtype_loops_do_not_handle_is_declined():
    x = xp.asarray(np.ones((4, 40), np.float16), device=DEV)
    graph = trace(lambda x: [lax.tanh(lax.add(x, x))], x).replace(out_tree=None)
    with pytest.raises(codegen.Unsupported):
        fused_kernel(graph, DEV)
    run_staged(lambda y: [lax.convert(lax.tanh(y), new_dtype=D.float64)], [np.ones((4, 40), np.float32)])
