"""einsum against numpy.einsum on generated equations, paths, plan cache, AD, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_einsum import einsum, einsum_path
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime

LETTERS = "abcdef"


@st.composite
def equations(draw):
    sizes = {c: draw(st.integers(0, 3) if draw(st.booleans()) else st.integers(1, 3)) for c in LETTERS}
    n_ops = draw(st.integers(1, 4))
    terms = []
    for _ in range(n_ops):
        k = draw(st.integers(0, 4))
        terms.append("".join(draw(st.lists(st.sampled_from(LETTERS), min_size=k, max_size=k))))
    used = sorted(set("".join(terms)))
    if draw(st.booleans()):
        out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
        spec = ",".join(terms) + "->" + out
    else:
        spec = ",".join(terms)
    shapes = [tuple(sizes[c] for c in t) for t in terms]
    return spec, shapes


DTYPES = ["float32", "float64", "complex128", "int64"]


@settings(max_examples=60)
@given(eq=equations(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**31 - 1),
       strategy=st.sampled_from(["auto", "greedy", "optimal", "dp", False]))
def test_matches_numpy_einsum(eq, dtype, seed, strategy):
    spec, shapes = eq
    rng = np.random.default_rng(seed)
    arrs = [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    want = np.einsum(spec, *arrs)
    got = einsum(spec, *[xp.asarray(a) for a in arrs], optimize=strategy)
    assert got.shape == want.shape and got.dtype.name == want.dtype.name
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("spec,shapes", [
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...i,...i", [(3, 2), (2,)]),
    ("i...->...", [(2, 3, 4)]),
    ("ij...,jk...->ik...", [(2, 3, 4), (3, 2, 4)]),
    ("iii->i", [(3, 3, 3)]),
    ("ii,jj->ij", [(2, 2), (3, 3)]),
    ("ij,jk", [(2, 1), (3, 4)]),
])
def test_ellipsis_diagonals_and_broadcasting(spec, shapes):
    rng = np.random.default_rng(1)
    arrs = [rng.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(einsum(spec, *[xp.asarray(a) for a in arrs]).numpy(), np.einsum(spec, *arrs))


def test_non_contiguous_operands_and_interleaved_form():
    a = np.arange(24.0).reshape(4, 6)[::2, ::3].T
    b = np.arange(12.0).reshape(4, 3)[::2, :]
    np.testing.assert_allclose(einsum("ij,jk->ik", xp.asarray(a), xp.asarray(b)).numpy(), a @ b)
    got = einsum(xp.asarray(a), [0, 1], xp.asarray(b), [1, 2], [0, 2])
    np.testing.assert_allclose(got.numpy(), a @ b)
    np.testing.assert_allclose(einsum(xp.asarray(a), [Ellipsis, 1], [Ellipsis]).numpy(), a.sum(1))


def test_path_and_flops_match_opt_einsum_and_explicit_paths():
    import opt_einsum

    shapes = [(8, 2), (2, 64), (64, 3), (3, 8)]
    ops = [xp.ones(s) for s in shapes]
    path, flops = einsum_path("ab,bc,cd,de->ae", *ops, optimize="optimal")
    ref_path, info = opt_einsum.contract_path("ab,bc,cd,de->ae", *shapes, shapes=True, optimize="optimal")
    assert path == [tuple(p) for p in ref_path] and flops == int(info.opt_cost)
    explicit = einsum("ab,bc,cd,de->ae", *ops, optimize=[(2, 3), (1, 2), (0, 1)])
    np.testing.assert_allclose(explicit.numpy(), einsum("ab,bc,cd,de->ae", *ops).numpy())


def test_plans_are_cached_in_the_runtime():
    cache = default_runtime().caches.get("einsum_plans")
    cache.clear()
    a = xp.ones((3, 4))
    einsum("ij,jk->ik", a, xp.ones((4, 2)))
    einsum("ij,jk->ik", a, xp.ones((4, 2)))
    stats = default_runtime().caches.stats()["einsum_plans"]
    assert stats.misses == 1 and stats.hits == 1 and stats.size == 1


def test_gradients_flow_through_the_core_rules():
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 4))
    g = ad.grad(lambda x: xp.sum(einsum("ij,jk,ik->i", x, xp.asarray(b), x) ** 2))(xp.asarray(a)).numpy()

    def f(x):
        return float(np.sum(np.einsum("ij,jk,ik->i", x, b, x) ** 2))

    h = 1e-6
    fd = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        fd[i] = (f(a + e) - f(a - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6)
    d = ad.grad(lambda x: einsum("ii", x))(xp.asarray(a[:3, :3])).numpy()
    np.testing.assert_allclose(d, np.eye(3))


@pytest.mark.parametrize("args,err,match", [
    (("ij,jk->ik", (2, 3)), ArgumentError, "2 operand"),
    (("ij,jk->iq", (2, 3), (3, 4)), ArgumentError, "do not appear"),
    (("ij,jk->ii", (2, 3), (3, 4)), ArgumentError, "repeats"),
    (("i1,jk", (2, 3), (3, 4)), ArgumentError, "invalid subscript"),
    (("ij,jk", (2, 3), (4, 4)), ShapeError, "inconsistent sizes"),
    (("ijk,jk", (2, 3), (3, 4)), ShapeError, "3 indices"),
    (("ij...,jk...->ik", (2, 3, 4), (3, 2, 4)), ArgumentError, "no '...'"),
])
def test_bad_input_is_a_typed_error(args, err, match):
    spec, *shapes = args
    with pytest.raises(err, match=match):
        einsum(spec, *[xp.ones(s) for s in shapes])


def test_bad_options_and_dtypes():
    a = xp.ones((2, 2))
    with pytest.raises(ArgumentError, match="optimize"):
        einsum("ij,jk", a, a, optimize="fastest")
    with pytest.raises(ArgumentError, match="invalid contraction step"):
        einsum("ij,jk", a, a, optimize=[(0, 5)])
    with pytest.raises(ArgumentError, match="leaves 2 operands"):
        einsum("ab,bc,cd->ad", a, a, a, optimize=[(1, 2)])
    with pytest.raises(DTypeError, match="bool"):
        einsum("ij,jk", xp.asarray([[True]]), xp.asarray([[True]]))
    assert einsum("ij,jk", a, xp.ones((2, 2), dtype=xp.float32)).dtype == xp.float64
