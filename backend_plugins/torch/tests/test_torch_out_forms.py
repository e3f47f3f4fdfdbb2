"""The torch backend's out forms and donation (Backend.out_kernel, donatable): a compiled
step writes a fused group's or a product's result into a dead buffer of the plan's or a
donated input's, with the plain kernels' bits, never into a buffer someone else still sees."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from tenferro_ad import grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, trace
from tenferro_runtime.graph_prims import fused_p
from tenferro_runtime.passes.fold import fold_constants
from tenferro_runtime.passes.fusion import fuse_elementwise
from tenferro_torch.backend import TorchBackend
from tenferro_torch.fusion import fused_kernel, fused_out, out_source
from tenferro_torch.ops.reductions import dot_kernel, dot_out

DEVICE = "torch:cpu"


def _bits(t: torch.Tensor) -> tuple:
    t = t.contiguous()
    return tuple(t.shape), t.dtype, t.reshape(-1).view(torch.uint8).numpy().tobytes()


def _sgd(p, g):  # a parameter update: the gradient scaled, then added
    return p + (g * -0.1)


def _chain(p, g):  # an input read after an op that could have written it
    return xp.sqrt(xp.abs(p * g)) + p - g


def _view(p, g):  # the result is a view of an input's values
    return xp.reshape(p, p.shape) * 1.0 + xp.zeros_like(g)


PROGRAMS = [_sgd, _chain, _view]


@given(st.sampled_from(PROGRAMS), st.sampled_from([(3, 4), (0, 4), (), (5,)]),
       st.sampled_from(["input0", "input1", "free"]), st.integers(0, 2**16))
def test_a_fused_groups_out_form_gives_the_kernels_bits_and_only_writes_its_buffer(program, shape, where,
                                                                                   seed):
    rng = np.random.default_rng(seed)
    p, g = (xp.asarray(rng.standard_normal(shape).astype(np.float32), device=DEVICE) for _ in range(2))
    graph = fuse_elementwise(fold_constants(trace(program, p, g)))
    fused = [n for n in graph.nodes if n.prim is fused_p]
    if len(fused) != 1 or len(fused[0].params["graph"].outputs) != 1:
        return
    sub, outer = fused[0].params["graph"], fused[0].inputs
    bufs = [(p if v is graph.inputs[0] else g)._buf.clone() for v in outer]
    want = [_bits(r) for r in fused_kernel(*[b.clone() for b in bufs], graph=sub)]
    before = [b.clone() for b in bufs]
    k = {"input0": 0, "input1": 1}.get(where)
    out = bufs[k] if k is not None and k < len(bufs) else torch.empty(sub.outputs[0].aval.shape)
    got = fused_out(*bufs, out, graph=sub)
    assert [_bits(r) for r in got] == want, out_source(sub, k if k is not None and k < len(bufs) else -1)
    (r,) = got
    for b, b0 in zip(bufs, before):
        if b is not out:  # inputs other than the given buffer are never written
            assert _bits(b) == _bits(b0)
        if r.numel() and b is not out:  # the result is `out` or new, never an input's memory
            assert r.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()


def test_the_update_writes_into_the_dead_gradient_in_place():
    p, g = (xp.asarray(np.full((3, 4), v, np.float32), device=DEVICE) for v in (1.0, 2.0))
    graph = fuse_elementwise(fold_constants(trace(_sgd, p, g)))
    (node,) = [n for n in graph.nodes if n.prim is fused_p]
    sub = node.params["graph"]
    k = [i for i, v in enumerate(node.inputs) if v is graph.inputs[1]][0]  # the gradient
    src = out_source(sub, k)
    assert f"b{k}.mul_(" in src and "out" in src, src
    bufs = [(p if v is graph.inputs[0] else g)._buf.clone() for v in node.inputs]
    (r,) = fused_out(*bufs, bufs[k], graph=sub)
    assert r is bufs[k]
    np.testing.assert_array_equal(r.numpy(), np.full((3, 4), 0.8, np.float32))


PRODUCTS = [((4, 6), (6, 5), ((1,), (0,)), ((), ())), ((6, 4), (6, 5), ((0,), (0,)), ((), ())),
            ((2, 3, 4), (2, 4, 5), ((2,), (1,)), ((0,), (0,))), ((4, 6), (6,), ((1,), (0,)), ((), ())),
            ((0, 3), (3, 2), ((1,), (0,)), ((), ())), ((4, 4), (4, 4), ((1,), (0,)), ((), ()))]


@given(st.sampled_from(PRODUCTS),
       st.sampled_from(["free", "strided", "lhs"]), st.integers(0, 2**16))
def test_a_products_out_form_gives_the_kernels_bits(case, where, seed):
    ls, rs, contracting, batch = case
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal(ls)).clone()
    y = torch.from_numpy(rng.standard_normal(rs)).clone()
    lhs = xp.asarray(x.numpy(), device=DEVICE)
    rhs = xp.asarray(y.numpy(), device=DEVICE)
    params = {"contracting_dims": contracting, "batch_dims": batch}
    want = dot_kernel((lhs.aval, rhs.aval), params)(x, y)
    if where == "free":
        out = torch.empty(want.shape, dtype=want.dtype)
    elif where == "strided":  # not contiguous: a new tensor
        out = torch.empty(want.shape[::-1], dtype=want.dtype).T if want.ndim == 2 else torch.empty_like(want)
    else:  # an operand's own buffer (the plan gives it where the shapes agree): never written
        out = x if tuple(x.shape) == tuple(want.shape) else torch.empty_like(want)
    x0 = x.clone()
    got = dot_out(x, y, out, **params)
    assert _bits(got) == _bits(want)
    assert _bits(x) == _bits(x0) or out is x and got is not x


def test_donatable_refuses_shared_and_borrowed_tensors():
    b = TorchBackend()
    t = torch.ones(4)
    assert b.donatable(t, 0)
    assert not b.donatable(t, 1)  # another reference
    view = t.view(2, 2)
    assert not b.donatable(t, 0) and not b.donatable(view, 0)  # a view shares the storage
    del view
    assert not b.donatable(torch.from_numpy(np.ones(4, np.float32)), 0)  # the caller's NumPy array


def _mlp(w1, w2, x):
    h = x @ w1
    return xp.sum(xp.where(h <= 0, 0.0, h) @ w2)


def test_a_donated_sgd_step_equals_eager_and_leaves_the_callers_arrays_alone():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((6, 5), (5, 3), (4, 6))]

    def step(w1, w2, x):
        g1, g2 = grad(_mlp, argnums=(0, 1))(w1, w2, x)
        return w1 - g1 * 0.1, w2 - g2 * 0.1

    compiled = compile(step, donate_argnums=(0, 1))
    mine = [a.copy() for a in arrays]
    args = [xp.asarray(a, device=DEVICE) for a in mine]  # borrowed from the caller's arrays
    want = step(*[xp.asarray(a.copy(), device=DEVICE) for a in arrays])
    got = compiled(*args)
    assert [_bits(t._buf) for t in got] == [_bits(t._buf) for t in want]
    source = next(iter(compiled._cache.values()))[0].executable().plan.source()
    assert "= o" in source  # the updates written into the dead gradients' buffers
    for a, a0 in zip(mine, arrays):
        np.testing.assert_array_equal(a, a0)
    owned = [xp.asarray(torch.from_numpy(a.copy()).clone(), device=DEVICE) for a in arrays]
    want = [xp.asarray(a.copy(), device=DEVICE) for a in arrays[:2]]
    for _ in range(3):  # torch's own tensors, donated step after step
        owned[:2] = compiled(*owned)
        want = step(*want, xp.asarray(arrays[2], device=DEVICE))
        assert [_bits(t._buf) for t in owned[:2]] == [_bits(t._buf) for t in want]


def test_a_donated_tensor_of_torchs_own_holds_the_result():
    step = compile(lambda w, g: w * 0.9 - g, donate_argnums=0)
    g = xp.asarray(np.ones(4, np.float32), device=DEVICE)
    w = xp.asarray(torch.full((4,), 2.0), device=DEVICE)  # torch's own storage, held by w alone
    address = w._buf.data_ptr()
    out = step(w, g)
    np.testing.assert_array_equal(out.numpy(), np.full(4, np.float32(2.0) * np.float32(0.9) - 1))
    assert out._buf.data_ptr() == address  # written in place
    mine = np.full(4, 2.0, np.float32)  # the caller's array behind the tensor: never written
    out = step(xp.asarray(mine, device=DEVICE), g)
    np.testing.assert_array_equal(mine, np.full(4, 2.0, np.float32))
    w = xp.asarray(torch.full((4,), 2.0), device=DEVICE)
    view = xp.reshape(w, (2, 2))  # another tensor sees the storage: not overwritten
    step(w, g)
    np.testing.assert_array_equal(view.numpy(), np.full((2, 2), 2.0, np.float32))
