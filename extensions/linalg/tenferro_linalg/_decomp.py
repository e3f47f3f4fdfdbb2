"""Decompositions: cholesky, eigh/eigvalsh, eig/eigvals, svd/svdvals, qr, lu/lu_factor/lu_solve,
solve_triangular and expm, batched over leading dimensions.

The public functions validate their arguments, broadcast batch shapes, and build derived
results (``lu``'s P, L, U; ``cholesky(upper=True)``) around the ops of `_decomp_ops` with
core primitives. Conventions follow the Array API where it has the function and SciPy
otherwise (``lu``: x = P @ L @ U; ``lu_factor``: 0-based int32 LAPACK pivots).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, ArgumentValueError, DTypeError, ShapeError
from tenferro_runtime import lax
from tenferro_runtime.array_api import _helpers as H

from . import _decomp_kernels as K
from ._common import check_matrix, mH, tril, triu
from ._decomp_ops import (
    OPS as OPS,
)
from ._decomp_ops import (
    cholesky_p,
    eig_p,
    eigh_p,
    eigvals_p,
    eigvalsh_p,
    expm_frechet_p,
    expm_p,
    lu_factor_p,
    lu_pivots_to_permutation_p,
    lu_solve_p,
    qr_p,
    solve_triangular_p,
    svd_p,
    svdvals_p,
)
from ._decomp_rules import JVP as _JVP
from ._decomp_rules_lu import JVP as _JVP_LU
from ._decomp_rules_lu import TRANSPOSE as _TRANSPOSE
from ._decomp_util import eye_rect, hermitize, permutation_matrix, sub_matrix


class EighResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class EigResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class SVDResult(NamedTuple):
    U: Any
    S: Any
    Vh: Any


class QRResult(NamedTuple):
    Q: Any
    R: Any


class LUResult(NamedTuple):
    P: Any
    L: Any
    U: Any


class LUFactorResult(NamedTuple):
    LU: Any
    piv: Any


def _tensor(name: str, x: Any, what: str = "x") -> Any:
    return H.check_tensor(f"linalg.{name}", x, what)


def _flag(name: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentError(f"linalg.{name}: {key} must be True or False, got {value!r}")
    return value


# ---- Cholesky, eigenproblems ---------------------------------------------------------------


def _hermitian_part(name: str, x: Any) -> Any:
    """(x + x^H) / 2 of a checked (stack of) square matrix (JAX's symmetrize_input): the value,
    the derivative along every direction and the gradient (Hermitian) are all those of the
    function of the Hermitian part. Hermitian x passes unchanged (NumPy, which reads the
    lower triangle, gives the same there)."""
    x = _tensor(name, x)
    check_matrix(name, x.aval, square=True)
    return hermitize(x)


def cholesky(x: Any, /, *, upper: bool = False) -> Any:
    """The Cholesky factor of Hermitian positive-definite matrices: L with x = L L^H, or
    U = L^H with x = U^H U if `upper`; of the Hermitian part (x + x^H) / 2 (JAX's convention)."""
    upper = _flag("cholesky", "upper", upper)
    low = cholesky_p.bind(_hermitian_part("cholesky", x))
    return mH(low) if upper else low


def eigh(x: Any, /) -> EighResult:
    """Eigenvalues (real, ascending) and orthonormal eigenvectors (columns) of Hermitian
    matrices; of the Hermitian part (x + x^H) / 2 (JAX's convention)."""
    return EighResult(*eigh_p.bind(_hermitian_part("eigh", x)))


def eigvalsh(x: Any, /) -> Any:
    """Eigenvalues (real, ascending) of Hermitian matrices; of the Hermitian part
    (x + x^H) / 2 (JAX's convention)."""
    return eigvalsh_p.bind(_hermitian_part("eigvalsh", x))


def eig(x: Any, /) -> EigResult:
    """Eigenvalues and right eigenvectors (columns of unit 2-norm) of general square matrices.
    Both are complex: complex64 for float32/complex64 input, complex128 otherwise."""
    return EigResult(*eig_p.bind(_tensor("eig", x)))


def eigvals(x: Any, /) -> Any:
    """Eigenvalues of general square matrices, complex (as `eig`)."""
    return eigvals_p.bind(_tensor("eigvals", x))


# ---- SVD, QR -------------------------------------------------------------------------------


def svd(x: Any, /, *, full_matrices: bool = True) -> SVDResult:
    """x = U @ diag(S) @ Vh with S real and descending; U (m, m) and Vh (n, n) if
    `full_matrices`, else (m, k) and (k, n) with k = min(m, n)."""
    full = _flag("svd", "full_matrices", full_matrices)
    return SVDResult(*svd_p.bind(_tensor("svd", x), full_matrices=full))


def svdvals(x: Any, /) -> Any:
    """Singular values, real and descending, shape (..., min(m, n))."""
    return svdvals_p.bind(_tensor("svdvals", x))


def qr(x: Any, /, *, mode: str = "reduced") -> QRResult:
    """x = Q @ R with Q's columns orthonormal and R upper triangular. mode "reduced": Q (m, k),
    R (k, n), k = min(m, n); "complete": Q (m, m), R (m, n)."""
    if mode not in ("reduced", "complete"):
        raise ArgumentValueError(
            f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r} (NumPy's 'r' and 'raw' "
            f"are not supported: take R from mode='reduced')"
        )
    return QRResult(*qr_p.bind(_tensor("qr", x), mode=mode))


# ---- LU ------------------------------------------------------------------------------------


def lu_factor(x: Any, /) -> LUFactorResult:
    """LAPACK's packed LU factorization with partial pivoting (SciPy's lu_factor): LU holds L
    (unit diagonal, not stored) below the diagonal and U on and above it; piv (int32,
    0-based, shape (..., min(m, n))) says row i was swapped with row piv[i]."""
    return LUFactorResult(*lu_factor_p.bind(_tensor("lu_factor", x)))


def lu(x: Any, /) -> LUResult:
    """x = P @ L @ U (SciPy's convention) for (m, n) matrices, k = min(m, n): P (m, m) a
    permutation matrix in x's dtype, L (m, k) unit lower triangular, U (k, n) upper triangular."""
    packed, piv = lu_factor_p.bind(_tensor("lu", x))
    m, n = packed.shape[-2:]
    k = min(m, n)
    perm = lu_pivots_to_permutation_p.bind(piv, size=m)
    low = lax.add(tril(sub_matrix(packed, cols=(0, k)), -1), eye_rect(packed, m, k))
    return LUResult(permutation_matrix(perm, packed.dtype), low, triu(sub_matrix(packed, rows=(0, k))))


_TRANS = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "C": 2}


def _trans(name: str, trans: Any) -> int:
    if isinstance(trans, bool) or not isinstance(trans, (int, str)) or trans not in _TRANS:
        raise ArgumentValueError(
            f"linalg.{name}: trans must be 0/'N' (solve a x = b), 1/'T' (a^T x = b) or 2/'C' "
            f"(a^H x = b), got {trans!r}"
        )
    return _TRANS[trans]


def _float_operands(name: str, *pairs: tuple[str, Any]) -> list[Any]:
    """The tensors promoted to one floating dtype; DTypeError naming a non-floating one."""
    for what, t in pairs:
        _tensor(name, t, what)
        if t.dtype.kind not in "fc":
            raise DTypeError(
                f"linalg.{name} expects {what} of a floating-point dtype (float32, float64, "
                f"complex64, complex128), got {t.dtype}; convert it first with astype"
            )
    dtype = D.result_type(*(t.dtype for _, t in pairs))
    return [H.convert(t, dtype) for _, t in pairs]


def _solve_layout(name: str, a: Any, b: Any, extra: tuple = ()) -> tuple[Any, Any, tuple, bool]:
    """a (..., n, n) and b (n,) or (..., n, k) broadcast to one batch; `extra` (..., n) arrays
    (pivots) join the broadcast. Returns a, b as a matrix, the extras, and whether b was a vector."""
    n, _ = check_matrix(name, a, square=True, what="a")
    if b.ndim == 0:
        raise ShapeError(
            f"linalg.{name}: b must be a vector (n,) or a stack of matrices (..., n, k), got a 0-d b"
        )
    vector = b.ndim == 1
    if vector:
        if b.shape[0] != n:
            raise ShapeError(f"linalg.{name}: b must have {n} entries to match a {a.shape}, got b {b.shape}")
        b = H.reshape(b, (n, 1))
    batch = H.broadcast_shapes(a.shape[:-2], b.shape[:-2], *(e.shape[:-1] for e in extra))
    a = H.broadcast_to(a, (*batch, n, n))
    b = H.broadcast_to(b, (*batch, *b.shape[-2:]))
    extra = tuple(H.broadcast_to(e, (*batch, e.shape[-1])) for e in extra)
    return a, b, extra, vector


def _vector_out(x: Any, vector: bool) -> Any:
    return H.reshape(x, x.shape[:-1]) if vector else x


def lu_solve(lu_and_piv: tuple[Any, Any], b: Any, /, *, trans: int | str = 0) -> Any:
    """Solve a x = b (trans 0), a^T x = b (1) or a^H x = b (2) from a's `lu_factor` (SciPy's
    semantics). b is a vector (n,) or a stack (..., n, k); batch shapes broadcast."""
    if not isinstance(lu_and_piv, tuple) or len(lu_and_piv) != 2:
        raise ArgumentError(
            f"linalg.lu_solve: lu_and_piv must be the pair (LU, piv) lu_factor returns, got "
            f"{type(lu_and_piv).__name__}"
        )
    t = _trans("lu_solve", trans)
    packed, piv = lu_and_piv
    _tensor("lu_solve", piv, "piv")
    if piv.dtype.kind not in "iu":
        raise DTypeError(f"linalg.lu_solve expects integer pivots (int32 from lu_factor), got {piv.dtype}")
    packed, b = _float_operands("lu_solve", ("lu", packed), ("b", b))
    if packed.ndim < 2 or piv.ndim < 1 or piv.shape[-1] != packed.shape[-1]:
        raise ShapeError(
            f"linalg.lu_solve: expected LU (..., n, n) and piv (..., n) as lu_factor returns for a "
            f"square matrix, got LU {packed.shape} and piv {piv.shape}"
        )
    packed, b, (piv,), vector = _solve_layout("lu_solve", packed, b, (H.convert(piv, D.int32),))
    return _vector_out(lu_solve_p.bind(packed, piv, b, trans=t), vector)


def solve_triangular(a: Any, b: Any, /, *, lower: bool = False, unit_diagonal: bool = False,
                     trans: int | str = 0) -> Any:
    """Solve op(T) x = b for the lower (or upper) triangle T of a, op per `trans` (0 none,
    1 transpose, 2 conjugate transpose), with T's diagonal taken as ones if `unit_diagonal`
    (SciPy's semantics, batched). b is a vector (n,) or a stack (..., n, k)."""
    low = _flag("solve_triangular", "lower", lower)
    unit = _flag("solve_triangular", "unit_diagonal", unit_diagonal)
    t = _trans("solve_triangular", trans)
    a, b = _float_operands("solve_triangular", ("a", a), ("b", b))
    a, b, _, vector = _solve_layout("solve_triangular", a, b)
    return _vector_out(solve_triangular_p.bind(a, b, lower=low, unit_diagonal=unit, trans=t), vector)


# ---- expm ----------------------------------------------------------------------------------


def expm(x: Any, /) -> Any:
    """The matrix exponential (SciPy's scaling-and-squaring Padé algorithm)."""
    return expm_p.bind(_tensor("expm", x))


# ---- registration --------------------------------------------------------------------------

KERNELS = {
    cholesky_p: K.cholesky, eigh_p: K.eigh, eigvalsh_p: K.eigvalsh, eig_p: K.eig, eigvals_p: K.eigvals,
    svd_p: K.svd, svdvals_p: K.svdvals, qr_p: K.qr, lu_factor_p: K.lu_factor,
    lu_pivots_to_permutation_p: K.lu_pivots_to_permutation, lu_solve_p: K.lu_solve,
    solve_triangular_p: K.solve_triangular, expm_p: K.expm, expm_frechet_p: K.expm_frechet,
}
RULES = ([("jvp", op, fn) for op, fn in {**_JVP, **_JVP_LU}.items()]
         + [("transpose", op, fn) for op, fn in _TRANSPOSE.items()])

__all__ = [
    "EigResult", "EighResult", "LUFactorResult", "LUResult", "QRResult", "SVDResult", "cholesky", "eig",
    "eigh", "eigvals", "eigvalsh", "expm", "lu", "lu_factor", "lu_solve", "qr", "solve_triangular", "svd",
    "svdvals",
]
