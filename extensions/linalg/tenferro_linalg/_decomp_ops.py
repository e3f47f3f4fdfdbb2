"""The decomposition ops of tenferro-linalg and their shape rules.

Every op works on stacks of matrices (the last two axes) with equal batch shapes; the
public functions in `_decomp` broadcast, reshape vectors and build derived results
(``lu``'s P, L, U; ``cholesky(upper=True)``) around them with core primitives.

- ``cholesky`` -> L (lower). ``eigh`` -> (w, V), ``eigvalsh`` -> w (real, ascending).
- ``eig`` -> (w, V), ``eigvals`` -> w: always complex.
- ``svd`` -> (U, S, Vh) (`full_matrices`), ``svdvals`` -> S (real, descending).
- ``qr`` -> (Q, R) (`mode` "reduced" or "complete").
- ``lu_factor`` -> (LU, piv): LAPACK's packed factors, 0-based int32 row swaps;
  ``lu_pivots_to_permutation`` -> perm (int32) with ``x[perm] = L @ U``.
- ``lu_solve(LU, piv, b)`` and ``solve_triangular(a, b)``: linear in b (matrices only).
- ``expm`` and ``expm_frechet(A, E)`` (the Fréchet derivative of expm at A along E,
  linear in E).
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError, ShapeError
from tenferro_core.extension import define_op
from tenferro_core.params import p_bool, p_choice, p_nonneg_int
from tenferro_core.primitive import REQUIRED

from ._common import check_matrix, op_name


def _same_batch(name: str, a: Any, b: Any, wa: str, wb: str) -> None:
    if tuple(a.shape[:-2]) != tuple(b.shape[:-2]):
        raise ShapeError(
            f"linalg.{name}: {wa} and {wb} must have equal batch shapes, got {tuple(a.shape)} "
            f"and {tuple(b.shape)}; broadcast them first"
        )


def _rhs(name: str, a: Any, b: Any) -> None:
    """b (..., n, k) of a's dtype and batch for a (..., n, n)."""
    n, _ = check_matrix(name, b, what="b")
    _same_batch(name, a, b, "a", "b")
    if n != a.shape[-1]:
        raise ShapeError(
            f"linalg.{name}: b must have {a.shape[-1]} rows to match a {tuple(a.shape)}, got b "
            f"{tuple(b.shape)}"
        )
    if b.dtype is not a.dtype:
        raise DTypeError(f"linalg.{name}: a and b must have one dtype, got {a.dtype} and {b.dtype}")


# ---- shape rules ---------------------------------------------------------------------------


def _cholesky_rule(x):
    check_matrix("cholesky", x, square=True)
    return x.shape, x.dtype


def _eigh_rule(x):
    check_matrix("eigh", x, square=True)
    return (x.shape[:-1], D.real_of(x.dtype)), (x.shape, x.dtype)


def _eigvalsh_rule(x):
    check_matrix("eigvalsh", x, square=True)
    return x.shape[:-1], D.real_of(x.dtype)


def _eig_rule(x):
    check_matrix("eig", x, square=True)
    c = D.complex_of(x.dtype)
    return (x.shape[:-1], c), (x.shape, c)


def _eigvals_rule(x):
    check_matrix("eigvals", x, square=True)
    return x.shape[:-1], D.complex_of(x.dtype)


def _svd_rule(x, *, full_matrices):
    m, n = check_matrix("svd", x)
    k = min(m, n)
    batch = tuple(x.shape[:-2])
    u, v = (m, n) if full_matrices else (k, k)
    return (batch + (m, u), x.dtype), (batch + (k,), D.real_of(x.dtype)), (batch + (v, n), x.dtype)


def _svdvals_rule(x):
    m, n = check_matrix("svdvals", x)
    return tuple(x.shape[:-2]) + (min(m, n),), D.real_of(x.dtype)


def _qr_rule(x, *, mode):
    m, n = check_matrix("qr", x)
    batch = tuple(x.shape[:-2])
    k = m if mode == "complete" else min(m, n)
    return (batch + (m, k), x.dtype), (batch + (k, n), x.dtype)


def _lu_factor_rule(x):
    m, n = check_matrix("lu_factor", x)
    return (x.shape, x.dtype), (tuple(x.shape[:-2]) + (min(m, n),), D.int32)


def _check_piv(name: str, piv: Any, n: int, batch: tuple) -> None:
    if piv.dtype is not D.int32:
        raise DTypeError(
            f"linalg.{name} expects pivots of dtype int32 (as lu_factor returns them), got "
            f"{piv.dtype}; convert them with astype(piv, int32)"
        )
    if tuple(piv.shape) != batch + (n,):
        raise ShapeError(
            f"linalg.{name}: pivots must have shape {batch + (n,)} (one per column of the "
            f"square factor), got {tuple(piv.shape)}"
        )


def _perm_rule(piv, *, size):
    if piv.dtype is not D.int32:
        raise DTypeError(f"linalg.lu_pivots_to_permutation expects int32 pivots, got {piv.dtype}")
    if not piv.shape or piv.shape[-1] > size:
        raise ShapeError(
            f"linalg.lu_pivots_to_permutation expects pivots of shape (..., k) with k <= {size}, "
            f"got {list(piv.shape)}"
        )
    return tuple(piv.shape[:-1]) + (size,), D.int32


def _lu_solve_rule(lu, piv, b, *, trans):
    n, _ = check_matrix("lu_solve", lu, square=True, what="lu")
    _check_piv("lu_solve", piv, n, tuple(lu.shape[:-2]))
    _rhs("lu_solve", lu, b)
    return b.shape, b.dtype


def _solve_triangular_rule(a, b, *, lower, unit_diagonal, trans):
    check_matrix("solve_triangular", a, square=True, what="a")
    _rhs("solve_triangular", a, b)
    return b.shape, b.dtype


def _expm_rule(x):
    check_matrix("expm", x, square=True)
    return x.shape, x.dtype


def _expm_frechet_rule(a, e):
    check_matrix("expm_frechet", a, square=True, what="A")
    check_matrix("expm_frechet", e, square=True, what="E")
    if tuple(a.shape) != tuple(e.shape) or a.dtype is not e.dtype:
        raise ShapeError(
            f"linalg.expm_frechet: A and E must have one shape and dtype, got "
            f"{a.dtype}{list(a.shape)} and {e.dtype}{list(e.shape)}"
        )
    return e.shape, e.dtype


# ---- the ops -------------------------------------------------------------------------------

TRANS = p_choice(0, 1, 2)

cholesky_p = define_op(op_name("cholesky"), _cholesky_rule,
                       doc="Lower Cholesky factor L of x = L L^H (reads x's lower triangle).")
eigh_p = define_op(op_name("eigh"), _eigh_rule, multiple_results=True,
                   doc="(w, V) of a Hermitian x (lower triangle), w ascending.")
eigvalsh_p = define_op(op_name("eigvalsh"), _eigvalsh_rule,
                       doc="Eigenvalues of a Hermitian x (lower triangle), ascending.")
eig_p = define_op(op_name("eig"), _eig_rule, multiple_results=True,
                  doc="(w, V) of a general x, complex, V with unit columns.")
eigvals_p = define_op(op_name("eigvals"), _eigvals_rule, doc="Eigenvalues of a general x, complex.")
svd_p = define_op(op_name("svd"), _svd_rule, multiple_results=True,
                  payload={"full_matrices": (p_bool, True)}, doc="(U, S, Vh) with x = U diag(S) Vh.")
svdvals_p = define_op(op_name("svdvals"), _svdvals_rule, doc="Singular values, descending.")
qr_p = define_op(op_name("qr"), _qr_rule, multiple_results=True,
                 payload={"mode": (p_choice("reduced", "complete"), "reduced")}, doc="(Q, R) with x = Q R.")
lu_factor_p = define_op(op_name("lu_factor"), _lu_factor_rule, multiple_results=True,
                        doc="LAPACK getrf: packed (LU, piv) with 0-based int32 row swaps.")
lu_pivots_to_permutation_p = define_op(
    op_name("lu_pivots_to_permutation"), _perm_rule, payload={"size": (p_nonneg_int, REQUIRED)},
    differentiable=False, doc="The permutation perm (int32, length size) the row swaps piv make.")
lu_solve_p = define_op(op_name("lu_solve"), _lu_solve_rule, nin=3, linear=(2,),
                       payload={"trans": (TRANS, 0)}, doc="Solve op(A) x = b from A's lu_factor.")
solve_triangular_p = define_op(
    op_name("solve_triangular"), _solve_triangular_rule, nin=2, linear=(1,),
    payload={"lower": (p_bool, False), "unit_diagonal": (p_bool, False), "trans": (TRANS, 0)},
    doc="Solve op(T) x = b for the triangle T of a (op: 0 none, 1 transpose, 2 conj transpose).")
expm_p = define_op(op_name("expm"), _expm_rule, doc="Matrix exponential.")
expm_frechet_p = define_op(op_name("expm_frechet"), _expm_frechet_rule, nin=2, linear=(1,),
                           doc="Fréchet derivative of expm at A along E (linear in E).")

OPS = [cholesky_p, eigh_p, eigvalsh_p, eig_p, eigvals_p, svd_p, svdvals_p, qr_p, lu_factor_p,
       lu_pivots_to_permutation_p, lu_solve_p, solve_triangular_p, expm_p, expm_frechet_p]

__all__ = [
    "OPS", "cholesky_p", "eig_p", "eigh_p", "eigvals_p", "eigvalsh_p",
    "expm_frechet_p", "expm_p", "lu_factor_p", "lu_pivots_to_permutation_p", "lu_solve_p", "qr_p",
    "solve_triangular_p", "svd_p", "svdvals_p",
]
