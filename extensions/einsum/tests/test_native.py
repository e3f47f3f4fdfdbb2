"""The whole-contraction op (tenferro_einsum.contract.v1): when it is used, that it agrees
with numpy.einsum and with the core-primitive lowering, and its JVP/transpose rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenferro_ad.testing import check_grads
from tenferro_einsum import einsum
from tenferro_einsum.native import contract_p
from tenferro_runtime import Runtime, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import trace

LETTERS = "abcdefg"


def _ops_in(spec, *arrays):
    g = trace(lambda *xs: einsum(spec, *xs), *[xp.asarray(a) for a in arrays])
    return {n.prim.name for n in g.nodes}


@st.composite
def multilinear(draw):
    """Random networks in which every letter sits in two terms, or one term and the output."""
    sizes = {c: draw(st.integers(0, 3) if draw(st.booleans()) else st.integers(1, 3)) for c in LETTERS}
    n_ops = draw(st.integers(1, 4))
    terms: list[list[str]] = [[] for _ in range(n_ops)]
    out: list[str] = []
    for c in draw(st.permutations(LETTERS))[: draw(st.integers(1, 6))]:
        first = draw(st.integers(0, n_ops - 1))
        terms[first].append(c)
        second = draw(st.integers(-1, n_ops - 1))
        if second == -1 or second == first:
            out.append(c)
        else:
            terms[second].append(c)
    spec = ",".join("".join(t) for t in terms) + "->" + "".join(out)
    return spec, [tuple(sizes[c] for c in t) for t in terms]


@given(eq=multilinear(), dtype=st.sampled_from(["float32", "float64", "complex64", "int32"]),
       seed=st.integers(0, 2**31 - 1))
def test_native_matches_numpy_and_the_lowering(eq, dtype, seed):
    spec, shapes = eq
    rng = np.random.default_rng(seed)
    arrs = [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    tfs = [xp.asarray(a) for a in arrs]
    assert contract_p.name in _ops_in(spec, *arrs)
    want = np.einsum(spec, *arrs)
    got = einsum(spec, *tfs)
    lowered = contract_p.decomposition(*tfs, spec=spec, path=tuple((0, 1) for _ in range(len(arrs) - 1)))
    assert got.shape == want.shape and got.dtype.name == want.dtype.name
    tol = 1e-4 if dtype in ("float32", "complex64") else 1e-10
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(lowered.numpy(), want, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("spec,shapes", [
    ("ii->i", [(3, 3)]),            # repeated index: a diagonal
    ("ij->i", [(2, 3)]),            # j summed within one term
    ("ij,jk->ik", [(2, 1), (3, 4)]),  # size-1 broadcasting
])
def test_other_equations_lower_to_core_primitives(spec, shapes):
    arrs = [np.ones(s) for s in shapes]
    assert contract_p.name not in _ops_in(spec, *arrs)
    np.testing.assert_allclose(einsum(spec, *[xp.asarray(a) for a in arrs]).numpy(), np.einsum(spec, *arrs))


def test_non_contiguous_operands():
    a = np.arange(24.0).reshape(4, 6)[:, ::2]
    b = np.arange(12.0).reshape(3, 4).T
    assert not a.flags.c_contiguous and not b.flags.c_contiguous
    np.testing.assert_allclose(einsum("ij,ik->jk", xp.asarray(a), xp.asarray(b)).numpy(),
                               np.einsum("ij,ik->jk", a, b))


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("spec,shapes", [
    ("ij,jk->ik", [(2, 3), (3, 2)]),
    ("i,j->ij", [(2,), (3,)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 2), (2, 2)]),
    ("ab,bc,ca->", [(2, 3), (3, 2), (2, 2)]),
    ("bij,bjk->bki", [(2, 2, 3), (2, 3, 2)]),
])
def test_gradients_to_second_order(spec, shapes, dtype):
    rng = np.random.default_rng(0)
    args = []
    for s in shapes:
        a = rng.standard_normal(s) + (1j * rng.standard_normal(s) if dtype == "complex128" else 0)
        args.append(xp.asarray(a.astype(dtype)))
    check_grads(lambda *xs: einsum(spec, *xs), args, order=2)


def test_same_tensor_twice():
    x = xp.asarray(np.random.default_rng(1).standard_normal((3, 3)))
    check_grads(lambda a: einsum("ij,jk->ik", a, a), (x,), order=2)


def test_without_the_plugin_einsum_lowers_and_still_differentiates():
    import tenferro_ad.plugin
    import tenferro_numpy.plugin

    rt = Runtime([tenferro_numpy.plugin, tenferro_ad.plugin])  # einsum's plugin not in the list
    assert contract_p.name not in rt.ops
    with use_runtime(rt):
        a = xp.asarray(np.random.default_rng(2).standard_normal((2, 3)))
        assert contract_p.name not in _ops_in("ij,kj->ik", a.numpy(), a.numpy())
        check_grads(lambda x: einsum("ij,kj->ik", x, x), (a,), order=2)


def test_with_the_plugin_disabled_einsum_says_so():
    """Installed but switched off (allow/block lists): an error naming the plugin and the fix,
    not a silent lowering."""
    from tenferro_core.errors import MissingKernelError

    rt = Runtime.from_entry_points(allow=["numpy", "ad"])
    with use_runtime(rt):
        a = xp.asarray(np.ones((2, 3)))
        with pytest.raises(MissingKernelError) as info:
            einsum("ij,kj->ik", a, a)
    assert isinstance(info.value, NotImplementedError)
    assert "plugin 'einsum' (distribution tenferro-einsum) is installed but disabled" in str(info.value)
    assert "add 'einsum' to TENFERRO_PLUGINS" in str(info.value)
