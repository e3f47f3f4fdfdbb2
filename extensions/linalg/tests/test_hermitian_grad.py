"""cholesky, eigh and eigvalsh compute on the Hermitian part (x + x^H) / 2 (JAX's convention), so
their gradients are Hermitian (symmetric for real input), as in JAX and PyTorch, and value
and derivative agree along every direction. Checked against torch autograd (tenferro's grad
of a real loss is the conjugate of torch's ``x.grad``), against central differences along
Hermitian and non-Hermitian directions (the ops too, which read the lower triangle), and by
gradient descent staying Hermitian.

Also the error classes NumPy users catch: linalg shape errors are `numpy.linalg.LinAlgError`,
bad argument values are `ValueError`.
"""

from __future__ import annotations

import linalg_cases
import numpy as np
import pytest

import tenferro_ad as ad
import tenferro_linalg as la
from tenferro_ad.testing import numerical_jvp
from tenferro_core.errors import ArgumentError, ArgumentValueError, LinAlgShapeError, ShapeError
from tenferro_runtime import array_api as xp

DTYPES = ("float64", "complex128")
SHAPES = [(4, 4), (2, 3, 3)]


def hpd(rng, shape, dtype):
    a = linalg_cases.rand(rng, shape, dtype)
    n = shape[-1]
    return a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)


def herm_np(a):
    return (a + np.conj(np.swapaxes(a, -1, -2))) / 2


def weights(shape, seed=7):
    return np.random.default_rng(seed).standard_normal(shape)


# Real-valued losses, written for tenferro (xp, la) and for torch; gauge-invariant in V.
def _losses(c):
    def chol_tf(x):
        return xp.sum(xp.real(la.cholesky(x)) * xp.asarray(c)) + xp.sum(xp.imag(la.cholesky(x)))

    def chol_t(torch, x):
        low = torch.linalg.cholesky(x)
        return (low.real * torch.tensor(c)).sum() + (low.imag.sum() if low.is_complex() else 0)

    def eigvalsh_tf(x):
        w = la.eigvalsh(x)
        return xp.sum(w ** 3) + xp.sum(w * xp.asarray(c[..., 0, :]))

    def eigvalsh_t(torch, x):
        w = torch.linalg.eigvalsh(x)
        return (w ** 3).sum() + (w * torch.tensor(c[..., 0, :])).sum()

    def eigh_tf(x):  # sum c * |V exp(w/4) V^H| ^2 entries: phase-invariant
        w, v = la.eigh(x)
        m = (v * xp.astype(xp.exp(w / 4), v.dtype)[..., None, :]) @ xp.conj(xp.matrix_transpose(v))
        return xp.sum(xp.real(m * xp.conj(m)) * xp.asarray(c)) + xp.sum(w)

    def eigh_t(torch, x):
        w, v = torch.linalg.eigh(x)
        m = (v * torch.exp(w / 4).to(v.dtype)[..., None, :]) @ v.mH
        return ((m * m.conj()).real * torch.tensor(c)).sum() + w.sum()

    return {"cholesky": (chol_tf, chol_t), "eigvalsh": (eigvalsh_tf, eigvalsh_t), "eigh": (eigh_tf, eigh_t)}


def _torch_grad(f_t, a):
    import torch

    x = torch.tensor(a, requires_grad=True)
    f_t(torch, x).backward()
    return x.grad.numpy()


@pytest.mark.parametrize("op", ["cholesky", "eigvalsh", "eigh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_grad_is_hermitian_and_matches_torch(op, dtype, shape):
    pytest.importorskip("torch")
    a = hpd(np.random.default_rng(0), shape, dtype)
    f_tf, f_t = _losses(weights(shape))[op]
    g = ad.grad(f_tf)(xp.asarray(a)).numpy()
    np.testing.assert_allclose(g, herm_np(g), atol=1e-12, err_msg="the gradient is not Hermitian")
    want = np.conj(_torch_grad(f_t, a))
    if op == "cholesky" and dtype == "complex128":
        # torch's complex cholesky gradient is Hermitian plus an imaginary diagonal (the
        # derivative along i*diag directions, which leave the Hermitian matrices); its
        # Hermitian part is the gradient of the function of herm(x)
        assert np.abs(want - herm_np(want)).max() > 1e-3
        want = herm_np(want)
    np.testing.assert_allclose(g, want, atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize("op", ["cholesky", "eigvalsh", "eigh"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ["hermitian", "any"])
def test_jvp_and_grad_match_finite_differences(op, dtype, direction):
    """Along any direction, Hermitian or not (then the value changes by its Hermitian part
    only), the JVP and the gradient (a VJP) give the finite difference of the value."""
    rng = np.random.default_rng(3)
    shape = (2, 4, 4)
    a = xp.asarray(hpd(rng, shape, dtype))
    f_tf, _ = _losses(weights(shape))[op]
    g = ad.grad(f_tf)(a).numpy()
    for _ in range(3):
        t = linalg_cases.rand(rng, shape, dtype)
        if direction == "hermitian":
            t = herm_np(t)
        elif dtype == "complex128":  # an imaginary diagonal too: a direction the ops ignore
            t = t + 1j * np.eye(shape[-1])
        assert direction == "hermitian" or np.abs(t - herm_np(t)).max() > 0.1
        (fd,) = numerical_jvp(f_tf, (a,), (xp.asarray(t),), eps=1e-6)
        _, tangent = ad.jvp(f_tf, (a,), (xp.asarray(t),))
        np.testing.assert_allclose(tangent.numpy(), fd, atol=1e-7, rtol=1e-6)
        # grad pairs with the tangent as Re sum(conj(g) t) (JAX's convention, g conjugated)
        np.testing.assert_allclose(np.real(np.vdot(np.conj(g), t)), fd, atol=1e-7, rtol=1e-6)


@pytest.mark.parametrize("op", ["cholesky", "eigvalsh", "eigh"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_derivative_is_that_of_the_lower_triangle(op, dtype):
    """The ops under the public functions read the lower triangle (the diagonal's real part),
    as LAPACK: their JVPs along non-Hermitian directions match finite differences of that."""
    from tenferro_linalg import _decomp_ops as O

    ops = {"cholesky": lambda x: O.cholesky_p.bind(x), "eigvalsh": lambda x: O.eigvalsh_p.bind(x),
           "eigh": lambda x: O.eigh_p.bind(x)[0]}
    rng = np.random.default_rng(4)
    a = xp.asarray(hpd(rng, (3, 3), dtype))
    f = ops[op]
    for t in (np.triu(linalg_cases.rand(rng, (3, 3), dtype), 1), linalg_cases.rand(rng, (3, 3), dtype)):
        (fd,) = numerical_jvp(f, (a,), (xp.asarray(t),), eps=1e-6)
        _, tangent = ad.jvp(f, (a,), (xp.asarray(t),))
        np.testing.assert_allclose(tangent.numpy(), fd, atol=1e-7, rtol=1e-6)
    _, zero = ad.jvp(f, (a,), (xp.asarray(np.triu(linalg_cases.rand(rng, (3, 3), dtype), 1)),))
    np.testing.assert_allclose(zero.numpy(), 0, atol=1e-14)  # the upper triangle is not read


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_descent_keeps_a_hermitian_matrix_hermitian(dtype):
    rng = np.random.default_rng(5)
    x = xp.asarray(hpd(rng, (4, 4), dtype))
    target = xp.asarray(np.array([1.0, 2.0, 3.0, 4.0]))
    c = weights((4, 4))

    def loss(x):
        low = la.cholesky(x)
        fit = xp.sum((la.eigvalsh(x) - target) ** 2)
        w, v = la.eigh(x)
        return fit + 0.01 * xp.sum(xp.real(low) * xp.asarray(c)) + 0.01 * xp.sum(xp.real(v * xp.conj(v)) * w)

    first = float(loss(x))
    for _ in range(20):
        # JAX's convention: step along conj(grad) for complex x
        g = ad.grad(loss)(x)
        x = x - 0.05 * (xp.conj(g) if dtype == "complex128" else g)
        xn = x.numpy()
        np.testing.assert_allclose(xn, herm_np(xn), atol=1e-13)
        np.testing.assert_array_equal(np.imag(np.diagonal(xn)), 0)
    assert float(loss(x)) < first


# ---- errors NumPy users catch ------------------------------------------------------------

NOT_SQUARE = np.ones((2, 3))
SQUARE_ONLY = {
    "solve": lambda x: la.solve(x, xp.asarray(np.ones((2, 1)))),
    "inv": la.inv, "det": la.det, "slogdet": la.slogdet, "eig": la.eig, "eigvals": la.eigvals,
    "eigh": la.eigh, "eigvalsh": la.eigvalsh, "cholesky": la.cholesky, "expm": la.expm,
    "matrix_power": lambda x: la.matrix_power(x, 2),
}
NEEDS_MATRIX = {**SQUARE_ONLY, "svd": la.svd, "qr": la.qr, "pinv": la.pinv, "lstsq": lambda x: la.lstsq(
    x, xp.asarray(np.ones(3)))}


@pytest.mark.parametrize("name", sorted(SQUARE_ONLY))
def test_non_square_input_is_a_numpy_linalg_error(name):
    with pytest.raises(np.linalg.LinAlgError, match="square") as info:
        SQUARE_ONLY[name](xp.asarray(NOT_SQUARE))
    assert isinstance(info.value, ShapeError) and isinstance(info.value, LinAlgShapeError)


@pytest.mark.parametrize("name", sorted(NEEDS_MATRIX))
def test_one_dimensional_input_is_a_numpy_linalg_error(name):
    with pytest.raises(np.linalg.LinAlgError, match="at least 2 dimensions"):
        NEEDS_MATRIX[name](xp.asarray(np.ones(3)))


def test_singular_matrices_are_a_numpy_linalg_error():
    singular = xp.asarray(np.ones((3, 3)))
    with pytest.raises(np.linalg.LinAlgError, match="[Ss]ingular"):
        la.inv(singular)
    with pytest.raises(np.linalg.LinAlgError, match="[Ss]ingular"):
        la.solve(singular, xp.asarray(np.ones(3)))


BAD_VALUES = {
    "vector_norm ord": lambda x: la.vector_norm(x, ord=float("nan")),
    "vector_norm ord str": lambda x: la.vector_norm(x, ord="fro"),
    "matrix_norm ord": lambda x: la.matrix_norm(x, ord=3),
    "matrix_norm ord str": lambda x: la.matrix_norm(x, ord="max"),
    "qr mode": lambda x: la.qr(x, mode="raw"),
    "lu_solve trans": lambda x: la.lu_solve(la.lu_factor(x), x, trans=3),
    "solve_triangular trans": lambda x: la.solve_triangular(x, x, trans="X"),
    "pinv rtol": lambda x: la.pinv(x, rtol=-1.0),
    "matrix_rank rtol": lambda x: la.matrix_rank(x, rtol=float("nan")),
    "lstsq rcond": lambda x: la.lstsq(x, x, rcond=-1.0),
}


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_bad_argument_values_are_value_errors(name):
    x = xp.asarray(np.eye(3) + 1.0)
    with pytest.raises(ValueError) as info:
        BAD_VALUES[name](x)
    assert isinstance(info.value, ArgumentValueError) and isinstance(info.value, ArgumentError)
