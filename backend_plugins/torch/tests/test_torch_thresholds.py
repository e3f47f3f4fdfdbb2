"""ReLU's selects as torch's threshold kernels (tenferro_torch.thresholds): the fused kernel
gives the nodes' own bits, and the `torch_masks` pass gives the gradient's select its own
comparison (compiled results equal to eager ones) on torch devices only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from tenferro_ad import grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, trace
from tenferro_runtime.graph import eval_graph
from tenferro_runtime.graph_prims import fused_p
from tenferro_runtime.passes.cse import common_subexpressions
from tenferro_runtime.passes.fold import fold_constants
from tenferro_runtime.passes.fusion import fuse_elementwise
from tenferro_torch.fusion import fused_kernel, generated_source
from tenferro_torch.thresholds import recompute_masks

DEVICE = "torch:cpu"
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float64": torch.float64}
SPECIAL = [0.0, -0.0, 1.5, -2.0, float("nan"), float("inf"), -float("inf"), 3.25, -0.5]


def _bits(t: torch.Tensor) -> tuple:
    t = t.contiguous()
    return tuple(t.shape), t.dtype, t.reshape(-1).view(torch.uint8).numpy().tobytes()


def _tensor(values: np.ndarray, dtype: str, transposed: bool):
    t = torch.from_numpy(values).to(DTYPES[dtype])
    if transposed and t.dim() == 2:  # a column-major view
        return xp.permute_dims(xp.asarray(t.T.contiguous(), device=DEVICE), (1, 0))
    return xp.asarray(t, device=DEVICE)


@st.composite
def problems(draw):
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    shape = draw(st.sampled_from([(3, 4), (0, 4), (), (1, 5), (2, 3, 4)]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    c = draw(st.sampled_from([0.0, -0.0, 1.5, -2.0, float("nan"), float("inf")]))
    a = draw(st.sampled_from([0.0, -0.0, 2.0, float("nan")]))
    n = int(np.prod(shape))
    x = np.where(rng.random(n) < 0.5, rng.choice(SPECIAL, n), rng.standard_normal(n) * 3).reshape(shape)
    g = rng.standard_normal(n).reshape(shape)
    kind = draw(st.sampled_from(["forward", "forward+mask", "backward"]))
    transposed = draw(st.booleans())
    return dtype, kind, c, a, _tensor(x, dtype, transposed), _tensor(g, dtype, False)


def _program(kind: str, c: float, a: float):
    if kind == "backward":
        return lambda x, g: xp.where(x <= c, a, g)
    if kind == "forward+mask":  # the mask is also a result: the comparison stays
        return lambda x, g: (xp.where(x <= c, a, x), x <= c)
    return lambda x, g: xp.where(x <= c, a, x)


@given(problems())
@example(("float32", "backward", 0.0, 0.0,
          _tensor(np.array([-0.0, 0.0, np.nan, 1.0, -1.0]), "float32", False),
          _tensor(np.array([1.0, -2.0, 3.0, np.inf, 5.0]), "float32", False)))
def test_a_select_on_a_comparison_with_a_constant_gives_the_nodes_bits(problem):
    dtype, kind, c, a, x, g = problem
    graph = fuse_elementwise(common_subexpressions(fold_constants(trace(_program(kind, c, a), x, g))))
    fused = [n for n in graph.nodes if n.prim is fused_p]
    assert len(fused) == 1
    sub = fused[0].params["graph"]
    ins = [x if v is graph.inputs[0] else g for v in fused[0].inputs]
    want = [_bits(w._buf) for w in eval_graph(sub, *ins)]  # its nodes' own kernels
    before = [_bits(t._buf) for t in ins]
    got = fused_kernel(*[t._buf for t in ins], graph=sub)
    assert [_bits(b) for b in got] == want, generated_source(sub)
    assert [_bits(t._buf) for t in ins] == before
    src = generated_source(sub)
    if not np.prod(x.shape):  # no element to read the constants' value from: the nodes' kernels
        assert "threshold" not in src, src
    elif kind == "backward":
        assert ("threshold_backward" in src) == (a == 0.0 and np.copysign(1.0, a) > 0), src
    else:
        assert "# threshold\n" in src, src
        assert ("k0(" in src) == (kind == "forward+mask"), src  # the comparison skipped unless read


def _mlp_loss(w1, w2, x):
    h = x @ w1
    return xp.sum(xp.where(h <= 0, 0.0, h) @ w2)


def _mlp_args(device: str, dtype=np.float32):
    rng = np.random.default_rng(0)
    return [xp.asarray(rng.standard_normal(s).astype(dtype), device=device)
            for s in ((6, 5), (5, 3), (4, 6))]


def test_the_gradient_of_relu_runs_threshold_backward_and_equals_eager():
    args = _mlp_args(DEVICE)
    f = compile(grad(_mlp_loss, argnums=(0, 1)))
    got = f(*args)
    want = grad(_mlp_loss, argnums=(0, 1))(*args)
    assert [_bits(t._buf) for t in got] == [_bits(t._buf) for t in want]
    graph = f.lower(*args)
    sources = [generated_source(n.params["graph"]) for n in graph.nodes if n.prim is fused_p]
    assert any("threshold_backward" in s for s in sources), sources
    masks = [v for n in graph.nodes if n.prim is fused_p for v in n.outputs if v.aval.dtype.name == "bool"]
    assert not masks  # no bool mask kept from the forward group for the backward one


def test_the_pass_leaves_other_devices_and_near_selects_alone():
    graph = trace(grad(_mlp_loss, argnums=(0, 1)), *_mlp_args("numpy:cpu"))
    assert recompute_masks(fold_constants(graph)).nodes == fold_constants(graph).nodes
    # no product between the comparison and the select: nothing to recompute
    x, g = _mlp_args(DEVICE)[:2]
    near = fold_constants(trace(lambda x, g: (xp.where(x <= 0, 0.0, g), xp.where(x <= 0, 0.0, x)), x, x))
    assert recompute_masks(near) is near


@pytest.mark.parametrize("c", [0.0, 1.0])
def test_compiled_relu_steps_equal_eager_bitwise(c):
    def loss(w1, w2, x):
        h = x @ w1
        return xp.sum(xp.where(h <= c, 0.0, h) @ w2 * xp.where(h <= c, 0.0, h)[:, :3])

    args = _mlp_args(DEVICE, np.float64)
    got = compile(grad(loss, argnums=(0, 1)))(*args)
    want = grad(loss, argnums=(0, 1))(*args)
    assert [_bits(t._buf) for t in got] == [_bits(t._buf) for t in want]
