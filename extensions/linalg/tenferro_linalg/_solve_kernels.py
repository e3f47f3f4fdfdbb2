"""NumPy-backend kernels of the solver ops.

Kernel choice (measured on 512x512 float64, see docs/linalg.md): a single matrix of
size >= `SCIPY_MIN_N` goes to SciPy where SciPy was faster (``lu_factor`` + ``lu_solve``
for solve, ``scipy.linalg.inv``, ``scipy.linalg.det``); stacks of matrices go to NumPy's
batched gufuncs (SciPy loops over the batch in Python); ``pinv`` is NumPy's (on par
with SciPy, and batched); ``lstsq`` is an SVD (``gesdd``) plus two products, 2.5x faster
than LAPACK's ``gelsd`` (what numpy.linalg.lstsq and scipy.linalg.lstsq call), batched,
with NumPy's cut-off rule. Kernels never write to their inputs.
"""

from __future__ import annotations

import warnings

import numpy as np

from tenferro_core.errors import LinAlgError

from ._common import lapack_errors, require_finite
from ._solve_ops import adjugate_p, det_p, inv_p, lstsq_p, pinv_p, slogdet_p, solve_p

SCIPY_MIN_N = 128

SINGULAR = ("x1 is singular (an exact zero pivot in its LU factorization), so {what} is not "
             "unique; use linalg.lstsq or linalg.pinv for a least-squares answer")


def _use_scipy(a: np.ndarray) -> bool:
    return a.ndim == 2 and a.shape[-1] >= SCIPY_MIN_N


def _mH(x: np.ndarray) -> np.ndarray:
    return np.conj(x.swapaxes(-1, -2))


def _real_dtype(dt: np.dtype) -> np.dtype:
    return np.finfo(dt).dtype


def _lu_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """scipy's getrf + getrs; raises numpy's LinAlgError on an exact zero pivot like gesv."""
    import scipy.linalg as sl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sl.LinAlgWarning)
        lu, piv = sl.lu_factor(a, check_finite=False)
    if (np.diagonal(lu) == 0).any():
        raise np.linalg.LinAlgError("Singular matrix")
    return sl.lu_solve((lu, piv), b, check_finite=False)


def _solve_each(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _lu_solve(a, b) if _use_scipy(a) else np.linalg.solve(a, b)


# Payload options carry their defaults here too: the dispatcher's no-params fast path calls a
# kernel with the operands alone.
def solve_kernel(a: np.ndarray, b: np.ndarray, *, singular: str = "raise") -> np.ndarray:
    require_finite("solve", a, b)
    try:
        out = _solve_each(a, b)
    except np.linalg.LinAlgError as exc:
        if singular == "raise":
            raise LinAlgError(f"linalg.solve: {SINGULAR.format(what='the solution')} ({exc})") from None
        out = np.empty(b.shape, b.dtype)  # NaN for the singular members, solve the others
        for i in np.ndindex(a.shape[:-2]):
            try:
                out[i] = _solve_each(a[i], b[i])
            except np.linalg.LinAlgError:
                out[i] = np.nan
    return out.astype(b.dtype, copy=False)


def inv_kernel(x: np.ndarray) -> np.ndarray:
    require_finite("inv", x)
    try:
        if _use_scipy(x):
            import scipy.linalg as sl

            out = sl.inv(x, check_finite=False)
        else:
            out = np.linalg.inv(x)
    except np.linalg.LinAlgError as exc:
        raise LinAlgError(f"linalg.inv: {SINGULAR.format(what='an inverse')} ({exc})") from None
    return out.astype(x.dtype, copy=False)


def det_kernel(x: np.ndarray) -> np.ndarray:
    require_finite("det", x)
    with lapack_errors("det"):
        if _use_scipy(x):
            import scipy.linalg as sl

            out = sl.det(x, check_finite=False)
        else:
            out = np.linalg.det(x)
    return np.asarray(out).astype(x.dtype, copy=False)


def _prod_others(s: np.ndarray) -> np.ndarray:
    """prod_{j != i} s_j along the last axis, without dividing (exact when some s_j == 0)."""
    one = np.ones_like(s[..., :1])
    left = np.cumprod(np.concatenate([one, s[..., :-1]], -1), -1)
    right = np.cumprod(np.concatenate([one, s[..., :0:-1]], -1), -1)[..., ::-1]
    return left * right


def adjugate_kernel(x: np.ndarray) -> np.ndarray:
    """adj(A) = det(U) det(V^H) V diag(prod_{j!=i} s_j) U^H from A = U S V^H: finite for every A
    (the cofactor matrix at rank n-1, zero at lower rank), no division by det."""
    require_finite("det", x)
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    with lapack_errors("det", "the SVD used for the adjugate did not converge"):
        u, s, vh = np.linalg.svd(x)
        phase = np.linalg.det(u) * np.linalg.det(vh)
    adj = (_mH(vh) * _prod_others(s)[..., None, :]) @ _mH(u)
    return (phase[..., None, None] * adj).astype(x.dtype, copy=False)


def slogdet_kernel(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    require_finite("slogdet", x)
    with lapack_errors("slogdet"):
        sign, logabs = np.linalg.slogdet(x)
    return np.asarray(sign).astype(x.dtype, copy=False), \
        np.asarray(logabs).astype(_real_dtype(x.dtype), copy=False)


def pinv_kernel(x: np.ndarray, rtol: np.ndarray) -> np.ndarray:
    require_finite("pinv", x)
    with lapack_errors("pinv", "the SVD did not converge"):
        out = np.linalg.pinv(x, rtol=rtol)
    return out.astype(x.dtype, copy=False)


def lstsq_kernel(a: np.ndarray, b: np.ndarray, *, rcond: float) -> tuple:
    """x = V diag(1/s) U^H b over the singular values s > rcond * max(s), as LAPACK gelsd."""
    require_finite("lstsq", a, b)
    m, n = a.shape[-2:]
    batch, dt, rdt = a.shape[:-2], a.dtype, _real_dtype(a.dtype)
    if min(m, n) == 0:
        x = np.zeros((*batch, n, b.shape[-1]), dt)
        s, rank = np.zeros((*batch, 0), rdt), np.zeros(batch, np.int64)
    else:
        with lapack_errors("lstsq", "the SVD did not converge"):
            u, s, vh = np.linalg.svd(a, full_matrices=False)
        keep = s > rcond * s[..., :1]
        sinv = np.where(keep, 1 / np.where(keep, s, 1), 0).astype(rdt, copy=False)
        x = _mH(vh) @ (sinv[..., :, None] * (_mH(u) @ b))
        rank = keep.sum(-1)
    if m > n:
        r = b - a @ x
        res = (r.real ** 2 + r.imag ** 2 if r.dtype.kind == "c" else r * r).sum(-2)
    else:
        res = np.zeros((*batch, 0), rdt)
    return (x.astype(dt, copy=False), np.asarray(res).astype(rdt, copy=False),
            np.asarray(rank).astype(np.int64, copy=False), s.astype(rdt, copy=False))


KERNELS = {
    solve_p: solve_kernel,
    inv_p: inv_kernel,
    det_p: det_kernel,
    adjugate_p: adjugate_kernel,
    slogdet_p: slogdet_kernel,
    pinv_p: pinv_kernel,
    lstsq_p: lstsq_kernel,
}

__all__ = ["KERNELS", "SCIPY_MIN_N", "SINGULAR"]
