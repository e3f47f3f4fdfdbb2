"""What only the torch kernel of the contract op does: it is registered without importing
torch, runs any opt_einsum path as ATen's pairs, and contracts integers without matmul
(its route on CUDA, run here on the CPU). Values on torch:cpu are checked by the whole
suite, which runs on both backends (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("tenferro_torch")
import torch  # noqa: E402

from tenferro_einsum.torch_kernels import pairwise_path, sum_product, torch_contract  # noqa: E402
from tenferro_runtime.testing.subprocess_check import imports_module

DEVICES = ("torch:cpu",)
LETTERS = "abcdefg"


def test_registered_without_importing_torch():
    code = ("from tenferro_runtime import Runtime\n"
            "rt = Runtime.from_entry_points(allow=['numpy', 'torch', 'einsum'])\n"
            "assert ('torch', 'tenferro_einsum.contract.v1') in rt.kernels")
    assert not imports_module(code, "torch")


@pytest.mark.parametrize("path,n,want", [
    (((0, 1), (0, 1)), 3, [0, 1, 0, 1]),
    (((0, 1, 2),), 3, [0, 1, 1, 0]),           # a 3-operand step: two pairs
    (((2,), (0, 1), (0, 1)), 3, [0, 1, 0, 1]),  # a single-operand step only moves it last
    (((1, 2),), 4, [1, 2, 0, 1, 0, 1]),        # operands the path leaves: folded left to right
    ((), 1, []),
])
def test_pairwise_path(path, n, want):
    assert pairwise_path(path, n) == want


@st.composite
def networks(draw):
    """(spec, shapes, path): a multilinear equation and an explicit path with steps of any size."""
    sizes = {c: draw(st.integers(0, 3)) for c in LETTERS}
    n = draw(st.integers(1, 4))
    terms: list[list[str]] = [[] for _ in range(n)]
    out: list[str] = []
    for c in draw(st.permutations(LETTERS))[: draw(st.integers(1, 6))]:
        first, second = draw(st.integers(0, n - 1)), draw(st.integers(-1, n - 1))
        terms[first].append(c)
        (out if second in (-1, first) else terms[second]).append(c)
    path, left = [], n
    while left > 1 and draw(st.booleans()):
        step = draw(st.lists(st.integers(0, left - 1), min_size=1, max_size=left, unique=True))
        path.append(tuple(step))
        left -= len(step) - 1
    spec = ",".join("".join(t) for t in terms) + "->" + "".join(out)
    return spec, [tuple(sizes[c] for c in t) for t in terms], tuple(path)


@given(net=networks(), dtype=st.sampled_from(["int8", "int32", "int64", "float64", "complex128"]),
       seed=st.integers(0, 2**32 - 1))
def test_any_path_and_the_matmul_free_route_match_numpy(net, dtype, seed):
    spec, shapes, path = net
    rng = np.random.default_rng(seed)
    arrs = [np.asarray(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    want = np.einsum(spec, *arrs)
    ts = [torch.from_numpy(a) for a in arrs]
    tol = 0 if dtype.startswith("int") else 1e-12
    got = torch_contract(*ts, spec=spec, path=path)
    assert got.dtype == ts[0].dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)
    if dtype.startswith("int"):  # exact, with the same wrap-around as NumPy's
        exact = sum_product(spec, tuple(ts), pairwise_path(path, len(ts)))
        np.testing.assert_array_equal(exact.numpy(), want)
