"""NumPy/SciPy kernels of the decomposition ops (numpy backend).

Each kernel refuses NaN/inf (LAPACK may hang or return garbage on them), answers
size-0 stacks itself (LAPACK rejects empty matrices, SciPy's batching zero-size
batches) and never writes to its inputs.

Where both libraries have the routine (cholesky, eigh, eigvalsh, svd, svdvals, qr), stacks
of small matrices go to NumPy's gufuncs (one C loop over the batch; SciPy's per-call
overhead makes it ~10x slower on stacks of 8x8 matrices) and matrices whose sides are all
`BIG` or more to SciPy one at a time (the same LAPACK routines, measured 1.0-1.5x faster
from 128 rows on, a wash at 64; eigh with the divide-and-conquer driver evd, svd with
gesdd, 17x faster than gesvd at 512x512). eig and eigvals always go to NumPy (same geev, same
speed, batched). lu_factor, lu_solve and solve_triangular call LAPACK's getrf, getrs and
trtrs through SciPy's low-level wrappers; expm and expm_frechet are SciPy's (expm_frechet
is 2x faster than the expm of the 2n x 2n block matrix). docs/linalg.md has the timings.
"""

from __future__ import annotations

import numpy as np

from tenferro_core.errors import LinAlgError

from ._common import lapack_errors, require_finite

BIG = 128  # rows from which SciPy's per-matrix LAPACK calls are at least as fast as NumPy's gufuncs


def _real(dt: np.dtype) -> np.dtype:
    return np.finfo(dt).dtype


def _complex(dt: np.dtype) -> np.dtype:
    return np.result_type(dt, np.complex64)


def _eyes(batch: tuple, n: int, dt: np.dtype) -> np.ndarray:
    return np.broadcast_to(np.eye(n, dtype=dt), (*batch, n, n)).copy()


def _big(x: np.ndarray) -> bool:
    return min(x.shape[-2:]) >= BIG


def _each(fn, batch: tuple, *arrays: np.ndarray) -> list[np.ndarray]:
    """fn applied to each matrix of a non-empty batch; returns the stacked results."""
    outs: list[np.ndarray] = []
    for idx in np.ndindex(*batch):
        res = fn(*[a[idx] for a in arrays])
        if not outs:
            outs = [np.empty((*batch, *r.shape), r.dtype) for r in res]
        for o, r in zip(outs, res):
            o[idx] = r
    return outs


def _lapack(name: str, x: np.ndarray):
    from scipy.linalg import get_lapack_funcs

    return get_lapack_funcs((name,), (x,))[0]


# ---- Hermitian and general eigenproblems, Cholesky -----------------------------------------


def cholesky(x):
    require_finite("cholesky", x)
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    hint = "cholesky needs a Hermitian positive-definite matrix"
    with lapack_errors("cholesky", hint):
        if _big(x):
            import scipy.linalg as sl

            return sl.cholesky(x, lower=True, check_finite=False)
        return np.linalg.cholesky(x)


def eigh(x):
    require_finite("eigh", x)
    if x.size == 0:
        return np.zeros(x.shape[:-1], _real(x.dtype)), np.zeros(x.shape, x.dtype)
    with lapack_errors("eigh", "the eigenvalue iteration did not converge"):
        if _big(x):
            import scipy.linalg as sl

            w, v = sl.eigh(x, lower=True, driver="evd", check_finite=False)
        else:
            w, v = np.linalg.eigh(x)
    return w.astype(_real(x.dtype), copy=False), v.astype(x.dtype, copy=False)


def eigvalsh(x):
    require_finite("eigvalsh", x)
    if x.size == 0:
        return np.zeros(x.shape[:-1], _real(x.dtype))
    with lapack_errors("eigvalsh", "the eigenvalue iteration did not converge"):
        if _big(x):
            import scipy.linalg as sl

            w = sl.eigh(x, lower=True, eigvals_only=True, driver="evd", check_finite=False)
        else:
            w = np.linalg.eigvalsh(x)
    return w.astype(_real(x.dtype), copy=False)


def eig(x):
    require_finite("eig", x)
    c = _complex(x.dtype)
    if x.size == 0:
        return np.zeros(x.shape[:-1], c), np.zeros(x.shape, c)
    with lapack_errors("eig", "the QR iteration did not converge"):
        w, v = np.linalg.eig(x)
    return w.astype(c, copy=False), v.astype(c, copy=False)


def eigvals(x):
    require_finite("eigvals", x)
    c = _complex(x.dtype)
    if x.size == 0:
        return np.zeros(x.shape[:-1], c)
    with lapack_errors("eigvals", "the QR iteration did not converge"):
        return np.linalg.eigvals(x).astype(c, copy=False)


# ---- SVD and QR ----------------------------------------------------------------------------


def svd(x, *, full_matrices):
    require_finite("svd", x)
    *batch, m, n = x.shape
    batch, k = tuple(batch), min(m, n)
    if x.size == 0:
        u = _eyes(batch, m, x.dtype) if full_matrices else np.zeros((*batch, m, k), x.dtype)
        vh = _eyes(batch, n, x.dtype) if full_matrices else np.zeros((*batch, k, n), x.dtype)
        return u, np.zeros((*batch, k), _real(x.dtype)), vh
    with lapack_errors("svd", "the SVD did not converge"):
        if _big(x):
            import scipy.linalg as sl

            u, s, vh = sl.svd(x, full_matrices=full_matrices, check_finite=False, lapack_driver="gesdd")
        else:
            u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return u.astype(x.dtype, copy=False), s.astype(_real(x.dtype), copy=False), vh.astype(x.dtype, copy=False)


def svdvals(x):
    require_finite("svdvals", x)
    if x.size == 0:
        return np.zeros((*x.shape[:-2], min(x.shape[-2:])), _real(x.dtype))
    with lapack_errors("svdvals", "the SVD did not converge"):
        if _big(x):
            import scipy.linalg as sl

            s = sl.svd(x, compute_uv=False, check_finite=False, lapack_driver="gesdd")
        else:
            s = np.linalg.svd(x, compute_uv=False)
    return s.astype(_real(x.dtype), copy=False)


def qr(x, *, mode):
    require_finite("qr", x)
    *batch, m, n = x.shape
    batch = tuple(batch)
    if x.size == 0:
        if mode == "complete":
            return _eyes(batch, m, x.dtype), np.zeros(x.shape, x.dtype)
        k = min(m, n)
        return np.zeros((*batch, m, k), x.dtype), np.zeros((*batch, k, n), x.dtype)
    if _big(x):
        import scipy.linalg as sl

        q, r = sl.qr(x, mode="economic" if mode == "reduced" else "full", check_finite=False)
    else:
        q, r = np.linalg.qr(x, mode=mode)
    return q.astype(x.dtype, copy=False), r.astype(x.dtype, copy=False)


# ---- LU, triangular solves -----------------------------------------------------------------


def lu_factor(x):
    require_finite("lu_factor", x)
    *batch, m, n = x.shape
    batch = tuple(batch)
    if x.size == 0:
        return np.zeros(x.shape, x.dtype), np.zeros((*batch, min(m, n)), np.int32)
    getrf = _lapack("getrf", x)

    def one(a):
        lu, piv, info = getrf(a, overwrite_a=False)
        if info < 0:  # an illegal argument: a bug, never bad data
            raise LinAlgError(f"linalg.lu_factor: LAPACK getrf rejected argument {-info}")
        return lu, piv  # info > 0 (an exactly singular U) is a valid factorization

    lu, piv = _each(one, batch, x)
    return lu, piv.astype(np.int32, copy=False)


def lu_pivots_to_permutation(piv, *, size):
    """perm with x[perm] = L @ U: apply the row swaps i <-> piv[i] to arange(size)."""
    batch = piv.shape[:-1]
    perm = np.broadcast_to(np.arange(size, dtype=np.int32), (*batch, size)).copy()
    if perm.size == 0:
        return perm
    if piv.size and (piv.min() < 0 or piv.max() >= size):
        raise LinAlgError(f"linalg: pivots must lie in [0, {size}), got values in "
                          f"[{piv.min()}, {piv.max()}]; pass the pivots lu_factor returned")
    for i in range(piv.shape[-1]):
        j = piv[..., i : i + 1].astype(np.intp)
        a = perm[..., i : i + 1].copy()
        b = np.take_along_axis(perm, j, axis=-1)
        perm[..., i : i + 1] = b
        np.put_along_axis(perm, j, a, axis=-1)
    return perm


def check_singular(name: str, diag: np.ndarray) -> None:
    if not diag.all():
        raise LinAlgError(
            f"linalg.{name}: the matrix is singular (a zero on the diagonal of its triangular "
            f"factor); the system has no unique solution"
        )


def lu_solve(lu, piv, b, *, trans):
    require_finite("lu_solve", lu, b)
    n = lu.shape[-1]
    if b.size == 0 or n == 0:
        return np.zeros(b.shape, b.dtype)
    check_singular("lu_solve", np.diagonal(lu, axis1=-2, axis2=-1))
    if piv.min() < 0 or piv.max() >= n:
        raise LinAlgError(f"linalg.lu_solve: pivots must lie in [0, {n}), got values in "
                          f"[{piv.min()}, {piv.max()}]; pass the pivots lu_factor returned")
    getrs = _lapack("getrs", lu)

    def one(a, p, rhs):
        return (getrs(a, p, rhs, trans=trans)[0],)

    return _each(one, lu.shape[:-2], lu, piv, b)[0]


def solve_triangular(a, b, *, lower, unit_diagonal, trans):
    require_finite("solve_triangular", a, b)
    if b.size == 0 or a.shape[-1] == 0:
        return np.zeros(b.shape, b.dtype)
    if not unit_diagonal:
        check_singular("solve_triangular", np.diagonal(a, axis1=-2, axis2=-1))
    trtrs = _lapack("trtrs", a)

    def one(t, rhs):
        if t.flags.c_contiguous and trans != 2:  # solve with t.T (Fortran order): no copy of t
            x, _ = trtrs(t.T, rhs, lower=not lower, trans=1 - trans, unitdiag=unit_diagonal)
        else:
            x, _ = trtrs(t, rhs, lower=lower, trans=trans, unitdiag=unit_diagonal)
        return (x,)

    return _each(one, a.shape[:-2], a, b)[0]


# ---- matrix exponential --------------------------------------------------------------------


def expm(x):
    require_finite("expm", x)
    if x.size == 0:
        return np.zeros(x.shape, x.dtype)
    import scipy.linalg as sl

    return np.asarray(sl.expm(x)).astype(x.dtype, copy=False)


def expm_frechet(a, e):
    require_finite("expm_frechet", a, e)
    if e.size == 0:
        return np.zeros(e.shape, e.dtype)
    import scipy.linalg as sl

    def one(ai, ei):
        return (sl.expm_frechet(ai, ei, compute_expm=False, check_finite=False),)

    return _each(one, a.shape[:-2], a, e)[0].astype(e.dtype, copy=False)


__all__ = ["BIG", "check_singular", "cholesky", "eig", "eigh", "eigvals", "eigvalsh", "expm", "expm_frechet",
           "lu_factor", "lu_pivots_to_permutation", "lu_solve", "qr", "solve_triangular", "svd", "svdvals"]
