"""AD rules of the solvers: `check_grads` (forward vs finite differences, reverse vs forward)
on float64 and complex128, second order for solve, inv, det, slogdet and pinv; the
documented behaviour at singular matrices (det's gradient is the cofactor matrix,
slogdet's is non-finite); and the transpose rule of solve.
"""

from __future__ import annotations

import zlib

import linalg_cases
import numpy as np
import pytest

import tenferro_ad as ad
import tenferro_linalg as la
from tenferro_ad.testing import check_grads
from tenferro_runtime import array_api as xp

DTYPES = ("float64", "complex128")


def rand(rng, shape, dtype):
    return xp.asarray(linalg_cases.rand(rng, shape, dtype))


def square(rng, shape, dtype):
    n = shape[-1]
    return xp.asarray(rand(rng, shape, dtype).numpy() + 2 * np.sqrt(n) * np.eye(n))


@pytest.fixture
def rng(request):
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


# ---- second order ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ashape,bshape", [((3, 3), (3, 2)), ((2, 3, 3), (3,)), ((3, 3), (2, 3, 1)),
                                           ((1, 2, 2), (3, 2, 2))])
def test_solve_second_order(rng, dtype, ashape, bshape):
    check_grads(la.solve, (square(rng, ashape, dtype), rand(rng, bshape, dtype)), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 2, 2), (1, 1)])
@pytest.mark.parametrize("fn", [la.inv, la.det, la.slogdet], ids=["inv", "det", "slogdet"])
def test_inv_det_slogdet_second_order(rng, dtype, shape, fn):
    check_grads(fn, (square(rng, shape, dtype),), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4), (3, 3)])
def test_pinv_second_order(rng, dtype, shape):
    check_grads(la.pinv, (rand(rng, shape, dtype),), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_pinv_of_a_rank_deficient_matrix_at_constant_rank(rng, dtype):
    """pinv(u @ v) with u (4, 2), v (2, 3): rank 2 under every perturbation of u and v."""
    check_grads(lambda u, v: la.pinv(u @ v), (rand(rng, (4, 2), dtype), rand(rng, (2, 3), dtype)), order=2)


def _avals(graph):
    """Every value's aval in a traced graph, nested graphs (call params) included."""
    from tenferro_runtime.graph import Graph

    for node in graph.nodes:
        yield from (v.aval for v in node.outputs)
        for p in node.params.values():
            if isinstance(p, Graph):
                yield from _avals(p)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(40, 3), (2, 3, 40)], ids=["tall", "wide"])
def test_pinv_derivatives_of_a_tall_or_wide_matrix_form_no_big_square(rng, dtype, shape):
    """The JVP (and the VJP transposed from it) of pinv of an (m, n) matrix with m >> n (or
    n >> m) match finite differences, and form no max(m, n) x max(m, n) intermediate: every
    value of the traced JVP and gradient graphs is at most max(m, n) x min(m, n)."""
    from tenferro_ad.testing import numerical_jvp
    from tenferro_runtime import trace

    x, t = rand(rng, shape, dtype), rand(rng, shape, dtype)
    (fd,) = numerical_jvp(la.pinv, (x,), (t,), eps=1e-6)
    _, tangent = ad.jvp(la.pinv, (x,), (t,))
    np.testing.assert_allclose(tangent.numpy(), fd, atol=1e-7, rtol=1e-6)
    check_grads(la.pinv, (x,), order=1)
    big = max(shape[-2:])
    w = rand(rng, shape[:-2] + shape[:-3:-1], dtype)

    def loss(y):
        return xp.sum(xp.real(la.pinv(y) * w))

    graphs = {"jvp": trace(lambda y, s: ad.jvp(la.pinv, (y,), (s,))[1], x, t),
              "grad": trace(ad.grad(loss), x)}
    for name, graph in graphs.items():
        squares = [a for a in _avals(graph) if tuple(a.shape[-2:]) == (big, big)]
        assert not squares, f"the {name} graph forms {squares[0]}"


# ---- first order -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ashape,bshape", [((5, 3), (5, 2)), ((2, 4, 4), (4,)), ((3, 5), (3, 2)),
                                           ((2, 4, 2), (1, 4, 1))])
def test_lstsq_first_order(rng, dtype, ashape, bshape):
    """x, residuals and singular values are differentiated; rank is an integer."""
    check_grads(la.lstsq, (rand(rng, ashape, dtype), rand(rng, bshape, dtype)), order=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lstsq_rank_deficient_at_constant_rank(rng, dtype):
    def f(u, v, b):
        return la.lstsq(u @ v, b, rcond=1e-8).x

    check_grads(f, (rand(rng, (5, 2), dtype), rand(rng, (2, 3), dtype), rand(rng, (5, 2), dtype)), order=1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [3, -2, 0, 1])
def test_matrix_power_first_order(rng, dtype, n):
    check_grads(lambda a: la.matrix_power(a, n), (square(rng, (2, 3, 3), dtype),), order=1)


# ---- singular points ---------------------------------------------------------------------


def cofactors(a: np.ndarray) -> np.ndarray:
    n = a.shape[0]
    minor = lambda i, j: np.delete(np.delete(a, i, 0), j, 1)  # noqa: E731
    return np.array([[(-1) ** (i + j) * np.linalg.det(minor(i, j)) for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_det_gradient_at_a_singular_matrix_is_the_cofactor_matrix(rng, dtype):
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])  # rank 2
    if dtype == "complex128":
        a = a * (1 + 2j)
    want = cofactors(a)
    assert np.abs(want).max() > 1  # rank n-1: the cofactors are not all 0
    # JAX's convention: grad of a holomorphic f is f'(z) itself, here d det / dA = cofactors
    g = ad.grad(lambda x: xp.real(la.det(x)))(xp.asarray(a)).numpy()
    np.testing.assert_allclose(g, want, atol=1e-12 * np.abs(want).max())
    check_grads(la.det, (xp.asarray(a),), order=1)


def test_det_gradient_vanishes_below_rank_n_minus_1(rng):
    a = np.outer([1.0, 2.0, 3.0], [1.0, -1.0, 2.0])  # rank 1: every cofactor is 0
    np.testing.assert_allclose(ad.grad(la.det)(xp.asarray(a)).numpy(), 0, atol=1e-14)
    check_grads(la.det, (xp.asarray(a),), order=1)


def test_slogdet_gradient_at_a_singular_matrix_is_not_finite():
    a = xp.asarray(np.array([[1.0, 2.0], [0.0, 0.0]]))
    sign, logabs = la.slogdet(a)
    assert sign.numpy() == 0 and logabs.numpy() == -np.inf
    g = ad.grad(lambda x: la.slogdet(x).logabsdet)(a).numpy()
    assert not np.isfinite(g).any()


def test_solve_transpose_is_solve_with_the_plain_transpose(rng):
    """VJP in x2 is solve(A^T, ct) with no conjugation (JAX's convention)."""
    a, b = square(rng, (3, 3), "complex128"), rand(rng, (3, 2), "complex128")
    ct = rand(rng, (3, 2), "complex128")
    _, back = ad.vjp(lambda t: la.solve(a, t), b)
    (got,) = back(ct)
    np.testing.assert_allclose(got.numpy(), np.linalg.solve(a.numpy().T, ct.numpy()), rtol=1e-12)
