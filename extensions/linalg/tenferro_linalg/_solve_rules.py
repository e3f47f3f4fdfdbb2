"""JVP and transpose rules of the solver ops (signatures of `tenferro_ad.ad_util`).

Rules bind the ops and core primitives only, so they trace and differentiate again.
The only op applied to a tangent is ``solve`` (in its right-hand side, where it is
linear), which is why it alone needs a transpose: ``solve(A^T, ct)`` (plain transpose,
JAX's complex convention).

Behaviour at degenerate points:

- det: ``d det = trace(adj(A) dA)`` with the adjugate from an SVD, so the gradient is the
  (finite, exact) cofactor matrix at singular A too. The adjugate's own JVP
  ``tr(A^-1 dA) adj - A^-1 dA adj`` needs A invertible: second derivatives of det are
  NaN at exactly singular A (and lose accuracy near it).
- slogdet: ``d log|det| = Re tr(A^-1 dA)``, ``d sign = i Im tr(A^-1 dA) sign`` (0 for real
  A). At exactly singular A (sign 0, log|det| = -inf) ``A^-1 dA`` is taken as NaN (solve's
  ``singular="nan"``), so the derivative is NaN rather than a LinAlgError.
- pinv, lstsq: the pinv derivative formula holds where the rank is constant; at a rank
  change (a singular value crossing the cut-off) it is the derivative of the truncated
  pseudo-inverse. lstsq's x is ``pinv(a) b`` with a's cut-off, its residuals are
  differentiated as ``sum |b - a x|^2``, its singular values through an SVD of a (as
  svdvals), its rank not at all.
"""

from __future__ import annotations

from typing import Any

from tenferro_ad.ad_util import Zero, add_tangents, is_undefined, is_zero
from tenferro_runtime import lax
from tenferro_runtime.array_api import _helpers as H

from ._common import diag_part, matmul, matmul_chain, mH, mT, real_dtype
from ._solve_ops import adjugate_p, det_p, inv_p, lstsq_p, pinv_p, slogdet_p, solve_p


def _trace(x: Any) -> Any:
    """Trace of the last two axes."""
    return lax.reduce_sum(diag_part(x), axes=(x.ndim - 2,))


def _bcast_batch(v: Any, like: Any) -> Any:
    """A batch-shaped v broadcast over like's two matrix axes."""
    return lax.broadcast_in_dim(v, shape=tuple(like.shape), broadcast_dimensions=tuple(range(v.ndim)))


def _solve_jvp(primals, tangents, *, singular):
    """dX = solve(A, dB - dA X)."""
    (a, b), (da, db) = primals, tangents
    x = solve_p.bind(a, b, singular=singular)
    rhs = db
    if not is_zero(da):
        dax = matmul(da, x)
        rhs = lax.neg(dax) if is_zero(db) else lax.sub(db, dax)
    return x, solve_p.bind(a, rhs, singular=singular)


def _solve_transpose(ct, a, b, *, singular):
    """Linear in B: B -> A^-1 B transposes to C -> A^-T C."""
    if is_undefined(a):
        raise NotImplementedError("linalg.solve is linear in x2 only; its x1 cannot be transposed")
    if not is_undefined(b):
        return None, None
    if is_zero(ct):
        return None, Zero(b.aval)
    return None, solve_p.bind(mT(a), ct, singular=singular)


def _inv_jvp(primals, tangents):
    """d inv(A) = -inv(A) dA inv(A)."""
    (a,), (da,) = primals, tangents
    x = inv_p.bind(a)
    return x, lax.neg(matmul(matmul(x, da), x))


def _det_jvp(primals, tangents):
    """d det(A) = sum(adj(A)^T * dA) = trace(adj(A) dA), finite at singular A."""
    (a,), (da,) = primals, tangents
    nd = a.ndim
    return det_p.bind(a), lax.reduce_sum(lax.mul(mT(adjugate_p.bind(a)), da), axes=(nd - 2, nd - 1))


def _adjugate_jvp(primals, tangents):
    """d adj(A) = tr(A^-1 dA) adj(A) - A^-1 dA adj(A) (A invertible; NaN where singular)."""
    (a,), (da,) = primals, tangents
    adj = adjugate_p.bind(a)
    y = solve_p.bind(a, da, singular="nan")
    return adj, lax.sub(lax.mul(_bcast_batch(_trace(y), adj), adj), matmul(y, adj))


def _slogdet_jvp(primals, tangents):
    """With s = tr(A^-1 dA): d log|det| = Re s; d sign = i Im(s) sign (complex A only)."""
    (a,), (da,) = primals, tangents
    sign, logabs = slogdet_p.bind(a)
    s = _trace(solve_p.bind(a, da, singular="nan"))
    if a.dtype.kind != "c":
        return (sign, logabs), (Zero(sign.aval), s)
    half = H.full(s.shape, 0.5, s.dtype, s.device)
    i_im = lax.mul(lax.sub(s, lax.conj(s)), half)  # i Im(s), as a complex value
    return (sign, logabs), (lax.mul(sign, i_im), lax.real(s))


def _pinv_tangent(a: Any, p: Any, da: Any) -> Any:
    """-P dA P + P P^H dA^H (I - A P) + (I - P A) dA^H P^H P (constant rank), each product
    chain in its cheapest order (`matmul_chain`): for A (m, n) the intermediates are n x n
    and n x m when m > n (m x m and m x n when m < n), never max(m, n)-square (a tall A with
    m >> n would otherwise cost m^2 memory and m^2 n work in A P, P^H P and dA P)."""
    dah, ph = mH(da), mH(p)
    t1 = lax.neg(matmul_chain(p, da, p))
    t2 = matmul_chain(p, ph, lax.sub(dah, matmul_chain(dah, a, p)))
    t3 = matmul_chain(lax.sub(dah, matmul_chain(p, a, dah)), ph, p)
    return lax.add(lax.add(t1, t2), t3)


def _pinv_jvp(primals, tangents):
    """The pseudo-inverse's derivative; rtol carries no derivative (pinv is piecewise
    constant in it)."""
    (x, rtol), (dx, _) = primals, tangents
    p = pinv_p.bind(x, rtol)
    return p, Zero(p.aval) if is_zero(dx) else _pinv_tangent(x, p, dx)


def _lstsq_x_tangent(a, b, x, p, da, db):
    """dx for x = P b: -P dA x + P P^H dA^H (b - A x) + (I - P A) dA^H P^H x + P db."""
    dx = Zero(x.aval) if is_zero(db) else matmul(p, db)
    if is_zero(da):
        return dx
    dah = mH(da)
    t1 = lax.neg(matmul(p, matmul(da, x)))
    t2 = matmul(p, matmul(mH(p), matmul(dah, lax.sub(b, matmul(a, x)))))
    w = matmul(dah, matmul(mH(p), x))
    t3 = lax.sub(w, matmul(p, matmul(a, w)))
    return add_tangents(dx, lax.add(lax.add(t1, t2), t3))


def _abs2_sum_tangent(r, dr, axis: int):
    """d sum |r|^2 = 2 Re sum(conj(r) dr) along axis."""
    prod = lax.mul(lax.conj(r), dr) if r.dtype.kind == "c" else lax.mul(r, dr)
    if r.dtype.kind == "c":
        prod = lax.real(prod)
    total = lax.reduce_sum(prod, axes=(axis,))
    return lax.mul(total, H.full(total.shape, 2, total.dtype, total.device))


def _singular_values_tangent(a, da):
    """ds_i = Re(u_i^H dA v_i), from an SVD of a (as svdvals' JVP)."""
    from ._decomp import svd

    u, _, vh = svd(a, full_matrices=False)
    ds = diag_part(matmul(matmul(mH(u), da), mH(vh)))
    return lax.real(ds) if ds.dtype.kind == "c" else ds


def _lstsq_jvp(primals, tangents, *, rcond):
    (a, b), (da, db) = primals, tangents
    outs = lstsq_p.bind(a, b, rcond=rcond)
    x, res, rank, s = outs
    m, n = a.shape[-2:]
    rdt = real_dtype(a.dtype)
    p = pinv_p.bind(a, H.full(a.shape[:-2], rcond, rdt, a.device))
    dx = _lstsq_x_tangent(a, b, x, p, da, db)
    dres = Zero(res.aval)
    if m > n:
        dr = lax.neg(matmul(a, dx))
        if not is_zero(da):
            dr = lax.sub(dr, matmul(da, x))
        if not is_zero(db):
            dr = lax.add(dr, db)
        dres = _abs2_sum_tangent(lax.sub(b, matmul(a, x)), dr, a.ndim - 2)
    ds = Zero(s.aval) if is_zero(da) or min(m, n) == 0 else _singular_values_tangent(a, da)
    return outs, (dx, dres, Zero(rank.aval), ds)


RULES = [
    ("jvp", solve_p, _solve_jvp),
    ("transpose", solve_p, _solve_transpose),
    ("jvp", inv_p, _inv_jvp),
    ("jvp", det_p, _det_jvp),
    ("jvp", adjugate_p, _adjugate_jvp),
    ("jvp", slogdet_p, _slogdet_jvp),
    ("jvp", pinv_p, _pinv_jvp),
    ("jvp", lstsq_p, _lstsq_jvp),
]

__all__ = ["RULES"]
