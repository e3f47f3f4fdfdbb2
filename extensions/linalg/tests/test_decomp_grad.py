"""AD rules of the decompositions: `check_grads` (forward mode against central differences,
reverse against forward) on float64 and complex128, second order where it applies, and the
documented behaviour at repeated eigenvalues / singular values.

Eigenvectors and singular vectors are only defined up to phase (and up to rotation inside
a repeated eigenspace), so tests of them use gauge-invariant functions: |V|^2 entries,
spectral projectors, V f(w) V^H, U @ Vh.
"""

from __future__ import annotations

import linalg_cases
import numpy as np
import pytest

import tenferro_ad as ad
import tenferro_linalg as la
from tenferro_ad.testing import check_grads
from tenferro_core.errors import LinAlgError
from tenferro_linalg._decomp_ops import expm_frechet_p
from tenferro_runtime import array_api as xp

DTYPES = ("float64", "complex128")


def rand(rng, shape, dtype):
    return xp.asarray(linalg_cases.rand(rng, shape, dtype))


def hpd(rng, shape, dtype):
    a = rand(rng, shape, dtype).numpy()
    n = shape[-1]
    return xp.asarray(a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n))


def mH(x):
    return xp.conj(xp.matrix_transpose(x))


def abs2(x):
    return xp.real(x * xp.conj(x))


def with_unitary(rng, values, dtype, right=None):
    """Q diag(values) R^H with random unitary Q (and R, default Q) of `dtype`."""
    n = len(values)
    q = np.linalg.qr(rand(rng, (n, n), dtype).numpy())[0]
    r = q if right is None else np.linalg.qr(rand(rng, (n, n), dtype).numpy())[0]
    return xp.asarray(q @ np.diag(values).astype(dtype) @ np.conj(r.T))


# ---- Cholesky, eigh ------------------------------------------------------------------------
#
# Their rules differentiate the function of the Hermitian part (x + x^H) / 2 (as JAX and
# PyTorch), so finite differences are taken through `herm` (along Hermitian directions).


def herm(x):
    return (x + mH(x)) / 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3), (1, 1)])
def test_cholesky_second_order(dtype, shape):
    rng = np.random.default_rng(0)
    check_grads(lambda x: la.cholesky(herm(x)), (hpd(rng, shape, dtype),), order=2 if len(shape) == 2 else 1)
    check_grads(lambda x: la.cholesky(herm(x), upper=True), (hpd(rng, shape, dtype),), order=1)


def test_cholesky_tangent_is_replaced_by_its_hermitian_part():
    """cholesky computes on the Hermitian part of x, so a strictly-upper tangent counts as its
    Hermitian part (half of it mirrored below), an imaginary diagonal not at all."""
    a = hpd(np.random.default_rng(1), (3, 3), "complex128")
    upper = xp.asarray(np.triu(np.full((3, 3), 1 + 2j), 1) + np.diag([1j, 2j, 3j]))
    _, t = ad.jvp(la.cholesky, (a,), (upper,))
    _, t_herm = ad.jvp(la.cholesky, (a,), (herm(upper),))
    np.testing.assert_allclose(t.numpy(), t_herm.numpy(), atol=1e-14)
    assert np.abs(t.numpy()).max() > 1e-2
    _, t_diag = ad.jvp(la.cholesky, (a,), (xp.asarray(np.diag([1j, 2j, 3j])),))
    np.testing.assert_allclose(t_diag.numpy(), 0, atol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)])
def test_eigh_second_order(dtype, shape):
    x = hpd(np.random.default_rng(2), shape, dtype)

    def f(x):
        w, v = la.eigh(herm(x))
        return w, abs2(v), (v * xp.astype(xp.exp(w), v.dtype)[..., None, :]) @ mH(v)

    check_grads(f, (x,), order=2)
    check_grads(lambda x: la.eigvalsh(herm(x)), (x,), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_at_a_repeated_eigenvalue(dtype):
    """Masked couplings: exact for symmetric functions of the eigenvalues and for the
    projector onto the whole repeated eigenspace."""
    x = with_unitary(np.random.default_rng(3), [1.0, 1.0, 1.0, 3.0], dtype)

    def projector(x):
        v = la.eigh(x).eigenvectors[..., :, :3]
        return v @ mH(v)

    def spectral(x):
        w = la.eigvalsh(x)
        return xp.sum(w[..., :3]), w[..., 3], xp.sum(xp.exp(w))

    def trace_of_function(x):  # trace(V exp(w) V^H) = sum_ij |V_ij|^2 exp(w_j)
        w, v = la.eigh(x)
        return xp.sum(abs2(v) * xp.exp(w))

    for f in (projector, spectral, trace_of_function):
        check_grads(lambda x, f=f: f(herm(x)), (x,), order=1)
    # sum(w^2) = |herm(x)|_F^2: its gradient (JAX's convention, conjugated for complex x) is
    # 2 conj(x) at Hermitian x, Hermitian itself
    g = ad.grad(lambda x: xp.sum(la.eigvalsh(x) ** 2))(x)
    np.testing.assert_allclose(g.numpy(), np.conj(2 * x.numpy()), atol=1e-10)


def test_eigh_drops_only_the_in_cluster_term_of_matrix_functions():
    """V exp(w) V^H is expm(x) for Hermitian x; at a repeated eigenvalue the rule gives the exact
    Frechet derivative minus exp(w_i) (V^H dA V)_ij on the pairs i != j inside the cluster."""
    rng = np.random.default_rng(17)
    x = with_unitary(rng, [1.0, 1.0, 1.0, 3.0], "complex128")
    t = rand(rng, (4, 4), "complex128").numpy()
    t = xp.asarray(t + np.conj(t.T))

    def f(x):
        w, v = la.eigh(x)
        return (v * xp.astype(xp.exp(w), v.dtype)[..., None, :]) @ mH(v)

    _, got = ad.jvp(f, (x,), (t,))
    _, exact = ad.jvp(la.expm, (x,), (t,))
    v = la.eigh(x).eigenvectors.numpy()
    cluster = np.zeros((4, 4))
    cluster[:3, :3] = 1 - np.eye(3)
    dropped = v @ (cluster * np.e * (np.conj(v.T) @ t.numpy() @ v)) @ np.conj(v.T)
    assert np.abs(dropped).max() > 1e-2  # the test means something
    np.testing.assert_allclose(got.numpy(), exact.numpy() - dropped, atol=1e-10)


# ---- eig -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 3, 3)])
def test_eig_gauge_invariant_functions(dtype, shape):
    x = rand(np.random.default_rng(4), shape, dtype)

    def f(x):
        w, v = la.eig(x)
        return w, abs2(v)

    check_grads(f, (x,), order=2 if len(shape) == 2 else 1)
    check_grads(la.eigvals, (x,), order=2 if len(shape) == 2 else 1)


def test_eig_symmetric_functions_at_a_repeated_eigenvalue():
    rng = np.random.default_rng(5)
    s = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    x = xp.asarray(s @ np.diag([2.0, 2.0, -1.0]) @ np.linalg.inv(s))
    check_grads(lambda x: tuple(xp.sum(la.eigvals(x) ** k) for k in (1, 2, 3)), (x,), order=1)


# ---- SVD -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 3, 2)])
def test_svd_second_order(dtype, shape):
    x = rand(np.random.default_rng(6), shape, dtype)

    def f(x):
        u, s, vh = la.svd(x, full_matrices=False)
        return s, abs2(u), abs2(vh), u @ vh

    check_grads(f, (x,), order=2)
    check_grads(la.svdvals, (x,), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 2), (2, 4), (3, 3)])
def test_svd_full_matrices(dtype, shape):
    """The extra columns of U (rows of Vh) enter through the projector onto them."""
    x = rand(np.random.default_rng(7), shape, dtype)
    k = min(shape)

    def f(x):
        u, s, vh = la.svd(x, full_matrices=True)
        u2, v2 = u[..., :, k:], mH(vh[..., k:, :])
        return s, u2 @ mH(u2), v2 @ mH(v2), u[..., :, :k] @ vh[..., :k, :]

    check_grads(f, (x,), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_at_a_repeated_singular_value(dtype):
    rng = np.random.default_rng(8)
    x = with_unitary(rng, [2.0, 2.0, 1.0, 0.5], dtype, right=True)

    def f(x):
        u, s, vh = la.svd(x)
        return s[..., 0] + s[..., 1], s[..., 2:], u @ vh, u[..., :, :2] @ mH(u[..., :, :2])

    check_grads(f, (x,), order=1)


# ---- QR ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 3, 2)])
def test_qr_second_order(dtype, shape):
    x = rand(np.random.default_rng(9), shape, dtype)
    check_grads(lambda x: tuple(la.qr(x)), (x,), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 2), (2, 4)])
def test_qr_complete(dtype, shape):
    x = rand(np.random.default_rng(10), shape, dtype)
    k = min(shape)

    def f(x):
        q, r = la.qr(x, mode="complete")
        q2 = q[..., :, k:]
        return q[..., :, :k], r, q2 @ mH(q2)

    check_grads(f, (x,), order=2)


def test_qr_derivative_needs_full_column_rank():
    x = xp.asarray(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 0.0]]))  # R[1, 1] == 0 exactly
    with pytest.raises(LinAlgError, match="singular"):
        ad.jvp(lambda x: la.qr(x).Q, (x,), (x,))


# ---- LU, solves ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 3, 3)])
def test_lu_and_lu_factor(dtype, shape):
    x = rand(np.random.default_rng(11), shape, dtype)
    check_grads(lambda x: tuple(la.lu(x)), (x,), order=2 if shape == (3, 3) else 1)
    check_grads(lambda x: la.lu_factor(x).LU, (x,), order=1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("b_shape", [(3,), (3, 2), (2, 3, 1)])
def test_lu_solve_in_lu_and_b(dtype, trans, b_shape):
    rng = np.random.default_rng(12)
    a = rand(rng, (3, 3), dtype)
    packed, piv = la.lu_factor(a)
    b = rand(rng, b_shape, dtype)
    order = 2 if b_shape == (3, 2) else 1
    check_grads(lambda lu_, b: la.lu_solve((lu_, piv), b, trans=trans), (packed, b), order=order)
    check_grads(lambda a, b: la.lu_solve(la.lu_factor(a), b, trans=trans), (a, b), order=1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [True, False])
@pytest.mark.parametrize("trans", [0, 1, 2])
def test_solve_triangular_in_a_and_b(dtype, lower, unit, trans):
    rng = np.random.default_rng(13)
    a = xp.asarray(rand(rng, (2, 3, 3), dtype).numpy() + 3 * np.eye(3))
    b = rand(rng, (2, 3, 2), dtype)
    order = 2 if (lower, unit) == (True, False) or trans == 2 else 1
    check_grads(lambda a, b: la.solve_triangular(a, b, lower=lower, unit_diagonal=unit, trans=trans),
                (a, b), order=order)


# ---- expm ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 2, 2), (1, 1)])
def test_expm_second_order(dtype, shape):
    check_grads(la.expm, (rand(np.random.default_rng(14), shape, dtype),), order=2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_expm_frechet_op_in_both_operands(dtype):
    rng = np.random.default_rng(15)
    a, e = rand(rng, (2, 3, 3), dtype), rand(rng, (2, 3, 3), dtype)
    check_grads(lambda a, e: expm_frechet_p.bind(a, e), (a, e), order=2)


def test_expm_jvp_is_the_frechet_derivative_from_scipy():
    import scipy.linalg as sl

    rng = np.random.default_rng(16)
    a, e = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    _, t = ad.jvp(la.expm, (xp.asarray(a),), (xp.asarray(e),))
    np.testing.assert_allclose(t.numpy(), sl.expm_frechet(a, e, compute_expm=False), rtol=1e-12)
