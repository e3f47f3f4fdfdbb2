"""Fused groups with transcendental functions: generated loops around NumPy's own kernels for
them (stages.py), against the NumPy kernels evaluating the same group node by node: the same
bits, with the cut node's result used later, returned, or both, 0-d values, constants read
on both sides of a cut, and several cuts in a row."""

from __future__ import annotations

import numpy as np
import pytest
from test_numba_codegen import DEV, same
from test_numba_executor import adam

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


def test_a_staged_update_writes_its_outputs_into_its_inputs_with_the_same_bits():
    rng = np.random.default_rng(4)
    hosts = [rng.standard_normal((7, 33)).astype(np.float32) for _ in range(4)]
    hosts[3] = np.abs(hosts[3])
    hosts.append(np.asarray(3.0, np.float32))
    graph = run_staged(adam, hosts)  # its bias corrections' pow: a cut, on 0-d values
    assert [graph.nodes[k].prim.name for k in cuts(graph)] == ["pow", "pow"]
    kernel = fused_kernel(graph, DEV)
    assert set(kernel.in_place) == {0, 1, 2}
    want = [np.asarray(w) for w in fused_kernel(graph, DEV)(*hosts)]
    bufs = [np.array(h, copy=True) for h in hosts]
    pairs = ((0, 0), (1, 2), (2, 3))
    got = kernel.in_place_form(pairs)(*bufs)
    for g, w in zip(got, want):
        same(g, w)
    assert all(got[o] is bufs[i] for o, i in pairs)


def test_an_input_a_later_cut_reads_is_not_written_by_an_earlier_stage():
    """x feeds a stage and then exp: the stage's output may not go into x's buffer."""
    def fn(x, y):
        a = x * 2.0 + y
        return [a, xp.exp(x) * a]

    rng = np.random.default_rng(5)
    hosts = [rng.standard_normal((4, 40)).astype(np.float32) for _ in range(2)]
    graph = run_staged(fn, hosts)
    kernel = fused_kernel(graph, DEV)
    assert 0 not in kernel.in_place.get(0, [])  # y (read by no later step) may be written
    assert kernel.in_place.get(0) == [1]
