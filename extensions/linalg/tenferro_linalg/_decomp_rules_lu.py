"""JVP and transpose rules of lu_factor, lu_solve, solve_triangular, expm and expm_frechet.

- lu_factor: JAX's lu_jvp_rule (De Hoog, Anderssen and Lukas): with x[perm] = L U,
  X = L^-1 dx[perm] U^-1, dL = L tril(X, -1), dU = triu(X) U. L and U are padded to
  square (identity blocks), which covers rectangular x too. The pivots get no tangent.
- lu_solve (x = op(A)^-1 b, A = P L U from the packed factors): linear in b, and
  dx = op(A)^-1 (db - op(dA) x) with dA = P (dL U + L dU).
- solve_triangular (x = op(T)^-1 b, T the triangle of a): linear in b, and
  dx = op(T)^-1 (db - op(dT) x) with dT the same triangle of da (strict if unit_diagonal).
- Transposes in b (JAX's plain transpose): op = none <-> transpose swap; op = conjugate
  transpose gives conj(T^-1 conj(ct)).
- expm: d expm(A)[E] = expm_frechet(A, E). expm_frechet(A, E) is linear in E, its transpose
  is expm_frechet(A^T, ct), and its derivative in (A, E) is the upper-right block of
  expm_frechet(M, [[dA, dE], [0, dA]]) with M = [[A, E], [0, A]], because
  expm(M) = [[expm(A), L(A, E)], [0, expm(A)]].
"""

from __future__ import annotations

from typing import Any

from tenferro_ad.ad_util import Zero, instantiate, is_zero
from tenferro_runtime import lax

from ._common import matmul, mH, mT, tril, triu
from ._decomp_ops import (
    expm_frechet_p,
    expm_p,
    lu_factor_p,
    lu_pivots_to_permutation_p,
    lu_solve_p,
    solve_triangular_p,
)
from ._decomp_util import concat, const, eye_rect, pad_matrix, permutation_matrix, sub_matrix


def _op(x: Any, trans: int) -> Any:
    """op(x) for LAPACK's trans flag: x, x^T or x^H."""
    return x if trans == 0 else mT(x) if trans == 1 else mH(x)


def _perm_matrix(piv: Any, m: int, dtype: Any) -> Any:
    return permutation_matrix(lu_pivots_to_permutation_p.bind(piv, size=m), dtype)


def _unpack(lu: Any) -> tuple[Any, Any]:
    """Square L (m x m, unit diagonal) and U (n x n) from packed factors, padded with identity."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    low = lax.add(pad_matrix(tril(sub_matrix(lu, cols=(0, k)), -1), cols=m - k), eye_rect(lu, m, m))
    up = pad_matrix(triu(sub_matrix(lu, rows=(0, k))), rows=n - k)
    if n > k:
        corner = lax.sub(eye_rect(lu, n, n), pad_matrix(eye_rect(lu, k, k), rows=n - k, cols=n - k))
        up = lax.add(up, corner)
    return low, up


# ---- LU ------------------------------------------------------------------------------------


def lu_factor_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    lu, piv = lu_factor_p.bind(x)
    m = x.shape[-2]
    low, up = _unpack(lu)
    tp = matmul(mT(_perm_matrix(piv, m, x.dtype)), t)  # dx[perm]
    la = solve_triangular_p.bind(low, tp, lower=True, unit_diagonal=True, trans=0)
    lau = mT(solve_triangular_p.bind(up, mT(la), lower=False, unit_diagonal=False, trans=1))
    dlu = lax.add(matmul(low, tril(lau, -1)), matmul(triu(lau), up))
    return (lu, piv), (dlu, Zero(piv.aval))


def lu_solve_jvp(primals, tangents, *, trans):
    lu, piv, b = primals
    dlu, _, db = tangents
    x = lu_solve_p.bind(lu, piv, b, trans=trans)
    rhs = db
    if not is_zero(dlu):
        low, up = _unpack(lu)
        da = matmul(_perm_matrix(piv, lu.shape[-1], lu.dtype),
                    lax.add(matmul(tril(dlu, -1), up), matmul(low, triu(dlu))))
        dax = matmul(_op(da, trans), x)
        rhs = lax.neg(dax) if is_zero(db) else lax.sub(db, dax)
    return x, lu_solve_p.bind(lu, piv, rhs, trans=trans)


def lu_solve_transpose(ct, lu, piv, b, *, trans):
    if is_zero(ct):
        return None, None, Zero(b.aval)
    if trans == 2 and ct.dtype.kind == "c":
        return None, None, lax.conj(lu_solve_p.bind(lu, piv, lax.conj(ct), trans=0))
    return None, None, lu_solve_p.bind(lu, piv, ct, trans=0 if trans else 1)


# ---- triangular solves ---------------------------------------------------------------------


def solve_triangular_jvp(primals, tangents, *, lower, unit_diagonal, trans):
    a, b = primals
    da, db = tangents
    params = dict(lower=lower, unit_diagonal=unit_diagonal, trans=trans)
    x = solve_triangular_p.bind(a, b, **params)
    rhs = db
    if not is_zero(da):
        k = -1 if unit_diagonal else 0
        dt = tril(da, k) if lower else triu(da, -k)
        dtx = matmul(_op(dt, trans), x)
        rhs = lax.neg(dtx) if is_zero(db) else lax.sub(db, dtx)
    return x, solve_triangular_p.bind(a, rhs, **params)


def solve_triangular_transpose(ct, a, b, *, lower, unit_diagonal, trans):
    if is_zero(ct):
        return None, Zero(b.aval)
    if trans == 2 and ct.dtype.kind == "c":
        y = solve_triangular_p.bind(a, lax.conj(ct), lower=lower, unit_diagonal=unit_diagonal, trans=0)
        return None, lax.conj(y)
    return None, solve_triangular_p.bind(a, ct, lower=lower, unit_diagonal=unit_diagonal,
                                         trans=0 if trans else 1)


# ---- expm ----------------------------------------------------------------------------------


def expm_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return expm_p.bind(x), expm_frechet_p.bind(x, t)


def _block(a: Any, e: Any) -> Any:
    """[[a, e], [0, a]]."""
    return concat([concat([a, e], axis=-1), concat([const(a, 0), a], axis=-1)], axis=-2)


def expm_frechet_jvp(primals, tangents):
    a, e = primals
    da, de = tangents
    out = expm_frechet_p.bind(a, e)
    if is_zero(da):
        return out, expm_frechet_p.bind(a, de)
    n = a.shape[-1]
    big = expm_frechet_p.bind(_block(a, e), _block(da, instantiate(de)))
    return out, sub_matrix(big, rows=(0, n), cols=(n, 2 * n))


def expm_frechet_transpose(ct, a, e):
    if is_zero(ct):
        return None, Zero(e.aval)
    return None, expm_frechet_p.bind(mT(a), ct)


JVP = {
    lu_factor_p: lu_factor_jvp,
    lu_solve_p: lu_solve_jvp,
    solve_triangular_p: solve_triangular_jvp,
    expm_p: expm_jvp,
    expm_frechet_p: expm_frechet_jvp,
}
TRANSPOSE = {
    lu_solve_p: lu_solve_transpose,
    solve_triangular_p: solve_triangular_transpose,
    expm_frechet_p: expm_frechet_transpose,
}

__all__ = ["JVP", "TRANSPOSE"]
