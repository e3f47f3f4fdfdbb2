"""Bad input to the decompositions: typed errors that say what was expected and what to do,
raised by the shape rules before any kernel runs (also while tracing), and LinAlgError for
non-finite, non-positive-definite and singular input."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_linalg as la
from tenferro_core.errors import ArgumentError, DTypeError, LinAlgError, ShapeError
from tenferro_linalg._decomp_kernels import BIG
from tenferro_runtime import array_api as xp
from tenferro_runtime.graph import trace

EYE = np.eye(3)
SQUARE_ONLY = {
    "cholesky": la.cholesky, "eigh": la.eigh, "eigvalsh": la.eigvalsh, "eig": la.eig,
    "eigvals": la.eigvals, "expm": la.expm,
}
ANY_SHAPE = {
    "svd": la.svd, "svdvals": la.svdvals, "qr": la.qr, "lu": la.lu, "lu_factor": la.lu_factor,
}
UNARY = {**SQUARE_ONLY, **ANY_SHAPE}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_non_floating_input_is_a_dtype_error(name, dtype):
    with pytest.raises(DTypeError, match="floating-point dtype.*astype"):
        UNARY[name](xp.asarray(EYE.astype(dtype)))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_float16_is_a_dtype_error(name):
    with pytest.raises(DTypeError, match="float16.*astype"):
        UNARY[name](xp.asarray(EYE.astype("float16")))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_vectors_are_a_shape_error(name):
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        UNARY[name](xp.asarray(np.ones(3)))


@pytest.mark.parametrize("name", sorted(SQUARE_ONLY))
def test_non_square_is_a_shape_error(name):
    with pytest.raises(ShapeError, match="square.*2x3"):
        SQUARE_ONLY[name](xp.asarray(np.ones((2, 3))))


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_a_linalg_error(name, bad):
    a = np.stack([EYE, EYE])
    a[1, 2, 0] = bad
    with pytest.raises(LinAlgError, match=f"linalg.{name}.*NaN or inf"):
        UNARY[name](xp.asarray(a))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_non_tensor_input_is_an_argument_error(name):
    with pytest.raises(ArgumentError, match="must be a tenferro Tensor.*asarray"):
        UNARY[name](EYE.tolist())


def test_cholesky_of_a_non_positive_definite_matrix():
    a = np.stack([EYE, np.diag([1.0, -2.0, 3.0])])
    with pytest.raises(LinAlgError, match="not positive definite"):
        la.cholesky(xp.asarray(a))
    big = -np.eye(BIG)  # the SciPy path names the failing minor
    with pytest.raises(LinAlgError, match="not positive definite"):
        la.cholesky(xp.asarray(big))


def test_bad_flags_and_modes():
    x = xp.asarray(EYE)
    with pytest.raises(ArgumentError, match="mode must be 'reduced' or 'complete'.*'r'"):
        la.qr(x, mode="r")
    with pytest.raises(ArgumentError, match="full_matrices must be True or False"):
        la.svd(x, full_matrices=1)
    with pytest.raises(ArgumentError, match="upper must be True or False"):
        la.cholesky(x, upper="yes")
    with pytest.raises(ArgumentError, match="lower must be True or False"):
        la.solve_triangular(x, x, lower=None)
    for trans in (3, "X", True, [0]):
        with pytest.raises(ArgumentError, match="trans must be 0/'N'"):
            la.solve_triangular(x, x, trans=trans)
        with pytest.raises(ArgumentError, match="trans must be 0/'N'"):
            la.lu_solve(la.lu_factor(x), x, trans=trans)


def test_solve_triangular_bad_operands():
    a = xp.asarray(np.tril(np.ones((3, 3))))
    with pytest.raises(ShapeError, match="b must have 3 rows"):
        la.solve_triangular(a, xp.asarray(np.ones((4, 2))), lower=True)
    with pytest.raises(ShapeError, match="b must have 3 entries"):
        la.solve_triangular(a, xp.asarray(np.ones(4)), lower=True)
    with pytest.raises(ShapeError, match="0-d b"):
        la.solve_triangular(a, xp.asarray(1.0), lower=True)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        la.solve_triangular(xp.asarray(np.ones((2, 3, 3))), xp.asarray(np.ones((4, 3, 1))))
    with pytest.raises(DTypeError, match="b of a floating-point dtype"):
        la.solve_triangular(a, xp.asarray(np.ones(3, np.int64)))
    with pytest.raises(ShapeError, match="square"):
        la.solve_triangular(xp.asarray(np.ones((3, 2))), xp.asarray(np.ones(3)))
    singular = xp.asarray(np.array([[1.0, 0.0], [2.0, 0.0]]))
    with pytest.raises(LinAlgError, match="singular"):
        la.solve_triangular(singular, xp.asarray(np.ones(2)), lower=True)
    # a zero diagonal is not read with unit_diagonal=True
    got = la.solve_triangular(singular, xp.asarray(np.ones(2)), lower=True, unit_diagonal=True)
    np.testing.assert_allclose(got.numpy(), [1.0, -1.0])
    with pytest.raises(LinAlgError, match="NaN or inf"):
        la.solve_triangular(a, xp.asarray(np.array([1.0, np.nan, 0.0])))


def test_lu_solve_bad_operands():
    a = xp.asarray(np.array([[2.0, 1.0], [1.0, 3.0]]))
    lu_, piv = la.lu_factor(a)
    b = xp.asarray(np.ones(2))
    with pytest.raises(ArgumentError, match="pair \\(LU, piv\\)"):
        la.lu_solve(lu_, b)
    with pytest.raises(DTypeError, match="integer pivots"):
        la.lu_solve((lu_, xp.astype(piv, xp.float64)), b)
    with pytest.raises(ShapeError, match="piv \\(..., n\\)"):
        la.lu_solve((lu_, xp.asarray(np.zeros(3, np.int32))), b)
    with pytest.raises(LinAlgError, match="pivots must lie in"):
        la.lu_solve((lu_, xp.asarray(np.array([5, 1], np.int32))), b)
    with pytest.raises(ShapeError, match="b must have 2 rows"):
        la.lu_solve((lu_, piv), xp.asarray(np.ones((3, 1))))
    with pytest.raises(ShapeError, match="square"):
        la.lu_solve(la.lu_factor(xp.asarray(np.ones((3, 2)))), xp.asarray(np.ones(3)))
    singular = la.lu_factor(xp.asarray(np.array([[1.0, 2.0], [2.0, 4.0]])))
    with pytest.raises(LinAlgError, match="singular"):
        la.lu_solve(singular, b)
    with pytest.raises(LinAlgError, match="NaN or inf"):
        la.lu_solve((lu_, piv), xp.asarray(np.array([np.inf, 1.0])))


def test_shape_errors_are_raised_while_tracing_before_any_kernel():
    def f(x):
        return la.svd(la.cholesky(x)).S

    with pytest.raises(ShapeError, match="linalg.cholesky expects square"):
        trace(f, xp.asarray(np.ones((2, 3))))
    graph = trace(f, xp.asarray(EYE))  # no kernel runs while tracing, so no LinAlgError either
    assert "tenferro_linalg.svd.v1" in str(graph) and "tenferro_linalg.cholesky.v1" in str(graph)
