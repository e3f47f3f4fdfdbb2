"""Small products and small MKL VML calls run on one intra-op thread (tenferro_torch.threads):
the kernel sees torch's pool at one thread, the pool is back at its setting afterwards, the
results are the same bits as torch's own calls, and large calls keep every thread."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tenferro_runtime as tr
from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_runtime import array_api as xp
from tenferro_torch import threads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _seen(name, in_avals, out_avals, params=None):
    """The intra-op thread count a kernel wrapped for this signature runs under."""
    seen = []
    wrapped = threads.sized(lambda: seen.append(torch.get_num_threads()), name, in_avals,
                            out_avals, params)
    wrapped()
    return seen[0]


def _av(*shape, dtype=D.float32):
    return Aval(tuple(shape), dtype)


DOT = {"contracting_dims": ((1,), (0,)), "batch_dims": ((), ())}


@pytest.mark.parametrize("m, k, n, one", [
    (1, 72, 120, True),  # a decode step's small projection
    (16, 64, 128, True),
    (16, 128, 128, False),  # 2^18 multiply-adds: the pool's
    (1, 576, 3072, False),  # 7 MB of weight: bound by memory, every thread
    (512, 512, 512, False),  # 134 M multiply-adds
    (0, 8, 8, True),
])
def test_products_by_size(two_threads, m, k, n, one):
    assert _seen("dot_general", (_av(m, k), _av(k, n)), (_av(m, n),), DOT) == (1 if one else 2)
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("name, size, one", [
    ("exp", 576, True), ("tanh", 1 << 15, True), ("sqrt", (1 << 15) + 1, False),
    ("add", 576, False), ("logistic", 576, False),
])
def test_vml_functions_by_size(two_threads, name, size, one):
    assert _seen(name, (_av(size),), (_av(size),)) == (1 if one else 2)


def test_a_small_fused_group_with_exp_runs_on_one_thread(two_threads):
    dev = tr.default_runtime().device("torch:cpu")
    x = xp.asarray(np.linspace(-2, 2, 96, dtype=np.float32).reshape(8, 12), device=dev)

    def f(x):
        e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)

    graph = tr.compile(f).lower(x)
    fused = [n for n in graph.nodes if n.prim.name == "fused"]
    assert fused and any(n.prim.name == "exp" for g in fused for n in g.params["graph"].nodes)
    g = next(g for g in fused if any(n.prim.name == "exp" for n in g.params["graph"].nodes))
    inner = g.params["graph"]
    assert threads._small("fused", (), (), {"graph": inner})
    got = tr.compile(f)(x)
    ref = torch.softmax(torch.from_numpy(np.array(x)), -1)
    np.testing.assert_allclose(np.asarray(got), ref.numpy(), rtol=1e-6, atol=1e-7)
    assert torch.get_num_threads() == 2


def test_results_equal_torch_and_threads_restored_after_an_error(two_threads):
    dev = tr.default_runtime().device("torch:cpu")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 128), np.float32), rng.standard_normal((128, 64), np.float32)
    got = xp.matmul(xp.asarray(a, device=dev), xp.asarray(b, device=dev))
    assert np.array_equal(np.asarray(got), (torch.from_numpy(a) @ torch.from_numpy(b)).numpy())
    got = xp.exp(xp.asarray(a, device=dev))
    assert np.array_equal(np.asarray(got), torch.exp(torch.from_numpy(a)).numpy())

    def boom():
        assert torch.get_num_threads() == 1
        raise RuntimeError("kernel failed")

    wrapped = threads.sized(boom, "exp", (_av(4),), (_av(4),), None)
    with pytest.raises(RuntimeError, match="kernel failed"):
        wrapped()
    assert torch.get_num_threads() == 2


def test_cuda_calls_are_left_alone():
    cuda = type("Dev", (str,), {})("torch:cuda:0")
    av = Aval((4, 4), D.float32, cuda)
    k = object()
    assert threads.sized(k, "exp", (av,), (av,), None) is k
