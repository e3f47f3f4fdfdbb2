"""JVP rules of cholesky, eigh/eigvalsh, eig/eigvals, svd/svdvals and qr.

Written with core primitives, the `_common` helpers and the linalg ops themselves, so
they trace and differentiate again. Every op applied to a tangent is linear in it
(matmul, solve_triangular and lu_solve in their right-hand side).

- cholesky, eigh, eigvalsh: the ops read the lower triangle (the real part of the diagonal),
  as LAPACK does, and their rules first replace the tangent by the Hermitian matrix built
  from its lower triangle (`lower_hermitian`): each op's derivative is that of what it
  computes, along every direction. The public functions (`_decomp`) hand the ops the
  Hermitian part (x + x^H) / 2 (JAX's convention), so theirs are the derivatives of the
  function of the Hermitian part: a Hermitian (symmetric) gradient, which keeps gradient
  descent on Hermitian matrices Hermitian, and finite differences along non-Hermitian
  directions agree with the JVP.
- Repeated eigenvalues / singular values: the couplings 1/(w_j - w_i) between values
  within GAP_TOL * eps * max|w| of each other are set to 0 (for the SVD only the
  1/(s_j - s_i) half of JAX's 1/(s_j^2 - s_i^2), see `_svd_reduced_tangents`). Gradients
  stay finite, and are exact for functions that do not see how the basis inside a
  repeated eigenspace turns: symmetric functions of the repeated values (sums, traces,
  norms), spectral projectors onto whole clusters, and U @ Vh for the SVD. They are not
  exact for e.g. V f(w) V^H with f' != 0 there: its in-cluster term f'(w_i) (V^H dA V)_ij
  is dropped.
- svd with full_matrices=True and m != n, qr with mode="complete" and m > n: the extra
  orthonormal columns U2 (Q2) are only defined up to a rotation; the rules move them by
  the smallest rotation that keeps [U1 U2] unitary, dU2 = -U1 (dU1^H U2).
"""

from __future__ import annotations

from typing import Any

from tenferro_runtime import lax

from ._common import diag_embed, diag_part, matmul, mH, mT, tril
from ._decomp_ops import (
    cholesky_p,
    eig_p,
    eigh_p,
    eigvals_p,
    eigvalsh_p,
    lu_factor_p,
    lu_solve_p,
    qr_p,
    solve_triangular_p,
    svd_p,
    svdvals_p,
)
from ._decomp_util import (
    col_dots,
    concat,
    const,
    inverse_gaps,
    inverse_or_zero,
    lower_hermitian,
    pad_matrix,
    real,
    scale_cols,
    sub_matrix,
    to_dtype,
)


def _solve_upper_right(r: Any, b: Any) -> Any:
    """b r^-1 for upper-triangular r: (r^-T b^T)^T."""
    return mT(solve_triangular_p.bind(r, mT(b), lower=False, unit_diagonal=False, trans=1))


def _complete(u1: Any, du1: Any, u2: Any) -> Any:
    """[du1, du2] with du2 = -u1 (du1^H u2): the smallest rotation keeping [u1 u2] unitary."""
    if not u2.shape[-1]:
        return du1
    return concat([du1, lax.neg(matmul(u1, matmul(mH(du1), u2)))], axis=-1)


# ---- cholesky ------------------------------------------------------------------------------


def cholesky_jvp(primals, tangents):
    """dL = L Phi(L^-1 dA L^-H), Phi = lower triangle with half the diagonal."""
    (x,), (t,) = primals, tangents
    low = cholesky_p.bind(x)
    da = lower_hermitian(t)
    y = solve_triangular_p.bind(low, da, lower=True, unit_diagonal=False, trans=0)  # L^-1 dA
    z = solve_triangular_p.bind(low, mH(y), lower=True, unit_diagonal=False, trans=0)  # L^-1 dA L^-H
    phi = lax.sub(tril(z), lax.mul(diag_embed(diag_part(z)), const(z, 0.5)))
    return low, matmul(low, phi)


# ---- Hermitian eigenproblem ----------------------------------------------------------------


def eigh_jvp(primals, tangents):
    """dw = Re diag(V^H dA V); dV = V (F o V^H dA V), F_ij = 1/(w_j - w_i) (0 where repeated)."""
    (x,), (t,) = primals, tangents
    w, v = eigh_p.bind(x)
    vdv = matmul(mH(v), matmul(lower_hermitian(t), v))
    f = to_dtype(inverse_gaps(w), x.dtype)
    return (w, v), (real(diag_part(vdv)), matmul(v, lax.mul(f, vdv)))


def eigvalsh_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    w, v = eigh_p.bind(x)
    return w, real(col_dots(v, matmul(lower_hermitian(t), v)))


# ---- general eigenproblem ------------------------------------------------------------------


def _eig_parts(x: Any, t: Any) -> tuple[Any, Any, Any]:
    """(w, V, V^-1 dA V)."""
    w, v = eig_p.bind(x)
    lu, piv = lu_factor_p.bind(v)
    dav = matmul(to_dtype(t, v.dtype), v)
    return w, v, lu_solve_p.bind(lu, piv, dav, trans=0)


def eig_jvp(primals, tangents):
    """dw = diag(X), X = V^-1 dA V; dV = V (F o X) with F_ij = 1/(w_j - w_i) (0 where repeated),
    then each column's component along itself removed in the real sense, Re(v_i^H dv_i) = 0,
    so the columns keep unit norm (their phase, which LAPACK fixes by its own rule, is not
    differentiated: test phase-invariant functions of V)."""
    (x,), (t,) = primals, tangents
    w, v, vx = _eig_parts(x, t)
    du = matmul(v, lax.mul(inverse_gaps(w), vx))
    dv = lax.sub(du, scale_cols(v, real(col_dots(v, du))))
    return (w, v), (diag_part(vx), dv)


def eigvals_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    w, _, vx = _eig_parts(x, t)
    return w, diag_part(vx)


# ---- SVD -----------------------------------------------------------------------------------


def _svd_reduced_tangents(u: Any, s: Any, vh: Any, da: Any) -> tuple[Any, Any, Any]:
    """(dU, dS, dV) of the reduced SVD: JAX's rule with its F_ij = 1/(s_j^2 - s_i^2) split as
    (1/(s_j - s_i) + 1/(s_j + s_i)) / 2 so that only the first factor is masked at repeated
    singular values (the second only where both are zero): the rotation U^H dU - V^H dV
    that gauge-invariant results such as U @ Vh see stays exact there."""
    m, n = da.shape[-2:]
    dt = da.dtype
    v = mH(vh)
    dav = matmul(da, v)
    dp = matmul(mH(u), dav)  # U^H dA V
    ds = real(diag_part(dp))
    s_inv = inverse_or_zero(s)
    half = const(dp, 0.5)
    sym = lax.mul(to_dtype(inverse_gaps(s), dt), lax.add(dp, mH(dp)))
    anti = lax.mul(to_dtype(inverse_gaps(s, plus=True), dt), lax.sub(dp, mH(dp)))
    du_core = lax.mul(half, lax.add(sym, anti))
    dv_core = lax.mul(half, lax.sub(sym, anti))
    if dt.kind == "c":  # the phase of each pair (u_i, v_i): i Im(dP_ii) / s_i, given to U
        im = lax.sub(diag_part(dp), to_dtype(ds, dt))
        du_core = lax.add(du_core, diag_embed(lax.mul(im, to_dtype(s_inv, dt))))
    du = matmul(u, du_core)
    dv = matmul(v, dv_core)
    if m > n:
        du = lax.add(du, scale_cols(lax.sub(dav, matmul(u, dp)), s_inv))
    if n > m:
        dahu = matmul(mH(da), u)
        dv = lax.add(dv, scale_cols(lax.sub(dahu, matmul(v, mH(dp))), s_inv))
    return du, ds, dv


def svd_jvp(primals, tangents, *, full_matrices):
    (x,), (t,) = primals, tangents
    m, n = x.shape[-2:]
    k = min(m, n)
    u, s, vh = svd_p.bind(x, full_matrices=full_matrices)
    u1, vh1 = sub_matrix(u, cols=(0, k)), sub_matrix(vh, rows=(0, k))
    du, ds, dv = _svd_reduced_tangents(u1, s, vh1, t)
    if full_matrices:
        du = _complete(u1, du, sub_matrix(u, cols=(k, m)))
        dv = _complete(mH(vh1), dv, mH(sub_matrix(vh, rows=(k, n))))
    return (u, s, vh), (du, ds, mH(dv))


def svdvals_jvp(primals, tangents):
    """dS = Re diag(U^H dA V)."""
    (x,), (t,) = primals, tangents
    u, s, vh = svd_p.bind(x, full_matrices=False)
    return s, real(col_dots(u, matmul(t, mH(vh))))


# ---- QR ------------------------------------------------------------------------------------


def _qr_tall(q: Any, r: Any, dx: Any) -> tuple[Any, Any]:
    """JAX's qr_jvp_rule for m >= n (R square and invertible)."""
    dx_rinv = _solve_upper_right(r, dx)
    qt = matmul(mH(q), dx_rinv)
    low = tril(qt, -1)
    do = lax.sub(low, mH(low))
    if qt.dtype.kind == "c":  # the phase of each column: i Im(diag)
        d = diag_part(qt)
        do = lax.add(do, diag_embed(lax.sub(d, to_dtype(real(d), d.dtype))))
    dq = lax.add(matmul(q, lax.sub(do, qt)), dx_rinv)
    return dq, matmul(lax.sub(qt, do), r)


def qr_jvp(primals, tangents, *, mode):
    """Tall (m >= n): JAX's rule, plus the smallest rotation of Q2 for mode="complete".
    Wide (m < n): x = [x1 x2], the square rule on x1 and dR2 = Q^H (dx2 - dQ R2)."""
    (x,), (t,) = primals, tangents
    m, n = x.shape[-2:]
    q, r = qr_p.bind(x, mode=mode)
    if m >= n:
        q1, r1 = sub_matrix(q, cols=(0, n)), sub_matrix(r, rows=(0, n))
        dq, dr = _qr_tall(q1, r1, t)
        dq = _complete(q1, dq, sub_matrix(q, cols=(n, q.shape[-1])))
        return (q, r), (dq, pad_matrix(dr, rows=r.shape[-2] - n))
    r1, r2 = sub_matrix(r, cols=(0, m)), sub_matrix(r, cols=(m, n))
    dq, dr1 = _qr_tall(q, r1, sub_matrix(t, cols=(0, m)))
    dr2 = matmul(mH(q), lax.sub(sub_matrix(t, cols=(m, n)), matmul(dq, r2)))
    return (q, r), (dq, concat([dr1, dr2], axis=-1))


JVP = {
    cholesky_p: cholesky_jvp,
    eigh_p: eigh_jvp,
    eigvalsh_p: eigvalsh_jvp,
    eig_p: eig_jvp,
    eigvals_p: eigvals_jvp,
    svd_p: svd_jvp,
    svdvals_p: svdvals_jvp,
    qr_p: qr_jvp,
}

__all__ = ["JVP"]
