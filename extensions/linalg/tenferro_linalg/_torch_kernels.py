"""torch-backend kernels of every linalg op: ``torch.linalg`` (torch imported on first call).

Same semantics as the NumPy/SciPy kernels: NaN/inf input and singular matrices raise the
same `LinAlgError` messages, size-0 stacks are answered here (SVD/QR of empty matrices
give identity Q/U/Vh as NumPy's kernels do), pivots are SciPy's 0-based int32 row swaps,
outputs have the dtypes the shape rules declare and carry no lazy conjugate/negative bit.

Where torch has no routine with the op's semantics it is built from torch routines:

- ``lu_factor``: torch's pivots are LAPACK's 1-based ones, shifted by one (both ways).
- ``lu_solve`` with trans=1 (aᵀx = b, no conjugation): torch offers a x = b and aᴴx = b
  only; conj(LU) factors conj(a) with the same pivots and conj(a)ᴴ = aᵀ.
- ``lu_pivots_to_permutation``: the row swaps applied to arange(size), as LAPACK does.
- ``expm_frechet``: the upper-right block of expm([[A, E], [0, A]]) (``matrix_exp``),
  E scaled to unit size.
- ``adjugate`` and ``lstsq`` (gelsd's cut-off rule): the NumPy kernels' SVD formulas,
  written with torch; ``pinv`` hands its per-matrix rtol to ``torch.linalg.pinv``.
- ``expm`` is ``torch.linalg.matrix_exp`` (scaling and squaring with Taylor polynomials,
  not SciPy's Padé approximants; relative differences 1e-15 to 3e-12 on 5x5 float64
  matrices of norm up to 100).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from tenferro_core.errors import LinAlgError

from . import _decomp_ops as O
from . import _solve_ops as S
from ._common import lapack_errors, non_finite_error
from ._decomp_kernels import check_singular
from ._solve_kernels import SINGULAR


def _require_finite(name: str, *ts: Any) -> None:
    """LAPACK may loop forever or return garbage on NaN/inf (message as `require_finite`).
    Large inputs take one aminmax reduction (min and max propagate NaN), 7x faster than
    isfinite(t).all() at 512x512, which writes a mask; small ones the two cheaper calls."""
    import torch

    for t in ts:
        if t.numel() == 0:
            continue
        if t.numel() <= 4096:
            ok = torch.isfinite(t).all()
        else:
            lo, hi = torch.aminmax(torch.view_as_real(t) if t.is_complex() else t)
            ok = torch.isfinite(lo) & torch.isfinite(hi)
        if not bool(ok):
            raise non_finite_error(name)


def _torch_errors(name: str, hint: str = "") -> Any:
    """torch.linalg.LinAlgError (no convergence) as tenferro's LinAlgError."""
    import torch

    return lapack_errors(name, hint, errors=(torch.linalg.LinAlgError,))


def _materialized(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn with its outputs' lazy conjugate/negative bits resolved (buffers are plain tensors)."""

    @wraps(fn)
    def kernel(*args: Any, **params: Any) -> Any:
        out = fn(*args, **params)
        if isinstance(out, tuple):
            return tuple(t.resolve_conj().resolve_neg() for t in out)
        return out.resolve_conj().resolve_neg()

    return kernel


def _eyes(like: Any, batch: tuple, n: int) -> Any:
    import torch

    return torch.eye(n, dtype=like.dtype, device=like.device).expand(*batch, n, n).clone()


def _zeros(like: Any, shape: tuple, dtype: Any = None) -> Any:
    import torch

    return torch.zeros(shape, dtype=like.dtype if dtype is None else dtype, device=like.device)


def _real(dtype: Any) -> Any:
    import torch

    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


# ---- Cholesky, eigenproblems ---------------------------------------------------------------


def cholesky(x):
    import torch

    _require_finite("cholesky", x)
    low, info = torch.linalg.cholesky_ex(x)
    if info.numel() and bool((info != 0).any()):
        raise LinAlgError("linalg.cholesky failed: Matrix is not positive definite; cholesky needs a "
                          "Hermitian positive-definite matrix")
    return low


def eigh(x):
    import torch

    _require_finite("eigh", x)
    with _torch_errors("eigh", "the eigenvalue iteration did not converge"):
        return tuple(torch.linalg.eigh(x, UPLO="L"))


def eigvalsh(x):
    import torch

    _require_finite("eigvalsh", x)
    with _torch_errors("eigvalsh", "the eigenvalue iteration did not converge"):
        return torch.linalg.eigvalsh(x, UPLO="L")


def eig(x):
    import torch

    _require_finite("eig", x)
    with _torch_errors("eig", "the QR iteration did not converge"):
        return tuple(torch.linalg.eig(x))


def eigvals(x):
    import torch

    _require_finite("eigvals", x)
    with _torch_errors("eigvals", "the QR iteration did not converge"):
        return torch.linalg.eigvals(x)


# ---- SVD and QR ----------------------------------------------------------------------------


def svd(x, *, full_matrices=True):
    import torch

    _require_finite("svd", x)
    *batch, m, n = x.shape
    batch, k = tuple(batch), min(m, n)
    if x.numel() == 0:
        u = _eyes(x, batch, m) if full_matrices else _zeros(x, (*batch, m, k))
        vh = _eyes(x, batch, n) if full_matrices else _zeros(x, (*batch, k, n))
        return u, _zeros(x, (*batch, k), _real(x.dtype)), vh
    with _torch_errors("svd", "the SVD did not converge"):
        return tuple(torch.linalg.svd(x, full_matrices=full_matrices))


def svdvals(x):
    import torch

    _require_finite("svdvals", x)
    with _torch_errors("svdvals", "the SVD did not converge"):
        return torch.linalg.svdvals(x)


def qr(x, *, mode="reduced"):
    import torch

    _require_finite("qr", x)
    *batch, m, n = x.shape
    batch, k = tuple(batch), min(m, n)
    if x.numel() == 0:
        if mode == "complete":
            return _eyes(x, batch, m), _zeros(x, x.shape)
        return _zeros(x, (*batch, m, k)), _zeros(x, (*batch, k, n))
    return tuple(torch.linalg.qr(x, mode=mode))


# ---- LU, triangular solves -----------------------------------------------------------------


def lu_factor(x):
    import torch

    _require_finite("lu_factor", x)
    if x.numel() == 0:
        return _zeros(x, x.shape), _zeros(x, (*x.shape[:-2], min(x.shape[-2:])), torch.int32)
    lu, piv, _ = torch.linalg.lu_factor_ex(x)  # info > 0 (an exactly singular U) is a valid factorization
    return lu, piv - 1


def _check_pivots(where: str, piv: Any, size: int) -> None:
    lo, hi = int(piv.min()), int(piv.max())
    if lo < 0 or hi >= size:
        raise LinAlgError(f"{where}: pivots must lie in [0, {size}), got values in [{lo}, {hi}]; "
                          f"pass the pivots lu_factor returned")


def lu_pivots_to_permutation(piv, *, size):
    """perm with x[perm] = L @ U: apply the row swaps i <-> piv[i] to arange(size)."""
    import torch

    batch = tuple(piv.shape[:-1])
    perm = torch.arange(size, dtype=torch.int32, device=piv.device).expand(*batch, size).clone()
    if perm.numel() == 0:
        return perm
    if piv.numel():
        _check_pivots("linalg", piv, size)
    idx = piv.long()
    for i in range(piv.shape[-1]):
        j = idx[..., i : i + 1]
        a = perm[..., i : i + 1].clone()
        perm[..., i : i + 1] = perm.gather(-1, j)
        perm.scatter_(-1, j, a)
    return perm


def lu_solve(lu, piv, b, *, trans=0):
    import torch

    _require_finite("lu_solve", lu, b)
    n = lu.shape[-1]
    if b.numel() == 0 or n == 0:
        return torch.zeros_like(b)
    check_singular("lu_solve", torch.diagonal(lu, dim1=-2, dim2=-1))
    _check_pivots("linalg.lu_solve", piv, n)
    # LU^T x = b is (conj LU)^H x = b; torch mishandles a lazily conjugated LU whose batch
    # it broadcasts, so the conjugate is materialized and the batch expanded beforehand
    factors = lu.conj().resolve_conj() if trans == 1 and lu.is_complex() else lu
    batch = torch.broadcast_shapes(factors.shape[:-2], b.shape[:-2])
    factors = factors.expand(*batch, n, n).contiguous()
    pivots = (piv + 1).expand(*batch, n).contiguous()
    return torch.linalg.lu_solve(factors, pivots, b.expand(*batch, *b.shape[-2:]), adjoint=trans != 0)


def solve_triangular(a, b, *, lower=False, unit_diagonal=False, trans=0):
    import torch

    _require_finite("solve_triangular", a, b)
    if b.numel() == 0 or a.shape[-1] == 0:
        return torch.zeros_like(b)
    if not unit_diagonal:
        check_singular("solve_triangular", torch.diagonal(a, dim1=-2, dim2=-1))
    t, upper = (a, not lower) if trans == 0 else (a.mT if trans == 1 else a.mH, lower)
    return torch.linalg.solve_triangular(t, b, upper=upper, unitriangular=unit_diagonal)


# ---- matrix exponential --------------------------------------------------------------------


def expm(x):
    import torch

    _require_finite("expm", x)
    return torch.linalg.matrix_exp(x.contiguous())  # a permuted batch breaks its internal view()


def expm_frechet(a, e):
    """The upper-right block of expm([[A, E], [0, A]]), with E scaled to entries of at most 1
    and the result scaled back (L is linear in E): otherwise a large E sets matrix_exp's
    scaling and costs accuracy (relative error 2e-7 against SciPy for |E| ~ 1e8 |A|, 1e-14
    scaled)."""
    import torch

    _require_finite("expm_frechet", a, e)
    if e.numel() == 0:
        return torch.zeros_like(e)
    n = a.shape[-1]
    scale = e.abs().amax((-2, -1), keepdim=True)
    scale = torch.where(scale > 0, scale, 1).to(e.dtype)
    block = torch.cat([torch.cat([a, e / scale], -1), torch.cat([torch.zeros_like(a), a], -1)], -2)
    return torch.linalg.matrix_exp(block)[..., :n, n:] * scale


# ---- solve, inv, det, adjugate, slogdet ----------------------------------------------------


def solve(a, b, *, singular="raise"):
    import torch

    _require_finite("solve", a, b)
    x, info = torch.linalg.solve_ex(a, b)
    bad = info != 0
    if bad.numel() and bool(bad.any()):
        if singular == "raise":
            raise LinAlgError(f"linalg.solve: {SINGULAR.format(what='the solution')} (Singular matrix)")
        x = torch.where(bad[..., None, None], torch.nan, x)  # NaN for the singular members only
    return x


def inv(x):
    import torch

    _require_finite("inv", x)
    out, info = torch.linalg.inv_ex(x)
    if info.numel() and bool((info != 0).any()):
        raise LinAlgError(f"linalg.inv: {SINGULAR.format(what='an inverse')} (Singular matrix)")
    return out


def det(x):
    import torch

    _require_finite("det", x)
    return torch.linalg.det(x)


def _prod_others(s: Any) -> Any:
    """prod_{j != i} s_j along the last axis, without dividing (exact when some s_j == 0)."""
    import torch

    one = torch.ones_like(s[..., :1])
    left = torch.cumprod(torch.cat([one, s[..., :-1]], -1), -1)
    right = torch.cumprod(torch.cat([one, s.flip(-1)[..., :-1]], -1), -1).flip(-1)
    return left * right


def adjugate(x):
    """adj(A) = det(U) det(V^H) V diag(prod_{j!=i} s_j) U^H from A = U S V^H (as the NumPy kernel)."""
    import torch

    _require_finite("det", x)
    if x.numel() == 0:
        return torch.zeros_like(x)
    with _torch_errors("det", "the SVD used for the adjugate did not converge"):
        u, s, vh = torch.linalg.svd(x)
    phase = torch.linalg.det(u) * torch.linalg.det(vh)
    adj = (vh.mH * _prod_others(s)[..., None, :]) @ u.mH
    return phase[..., None, None] * adj


def slogdet(x):
    import torch

    _require_finite("slogdet", x)
    sign, logabs = torch.linalg.slogdet(x)
    return sign + 0, logabs  # + 0: a singular real matrix's sign -0.0 becomes 0.0, as NumPy's


def pinv(x, rtol):
    import torch

    _require_finite("pinv", x)
    if x.numel() == 0:
        return _zeros(x, (*x.shape[:-2], x.shape[-1], x.shape[-2]))
    with _torch_errors("pinv", "the SVD did not converge"):
        return torch.linalg.pinv(x, rtol=rtol)  # rtol of the batch shape, as torch takes it


def lstsq(a, b, *, rcond):
    """x = V diag(1/s) U^H b over the singular values s > rcond * max(s), as LAPACK gelsd."""
    import torch

    _require_finite("lstsq", a, b)
    m, n = a.shape[-2:]
    batch, rdt = tuple(a.shape[:-2]), _real(a.dtype)
    if min(m, n) == 0:
        x = _zeros(a, (*batch, n, b.shape[-1]))
        s, rank = _zeros(a, (*batch, 0), rdt), _zeros(a, batch, torch.int64)
    else:
        with _torch_errors("lstsq", "the SVD did not converge"):
            u, s, vh = torch.linalg.svd(a, full_matrices=False)
        keep = s > rcond * s[..., :1]
        sinv = torch.where(keep, 1 / torch.where(keep, s, 1), 0)
        x = vh.mH @ (sinv[..., :, None] * (u.mH @ b))
        rank = keep.sum(-1)
    if m > n:
        r = b - a @ x
        res = (r.real ** 2 + r.imag ** 2 if r.is_complex() else r * r).sum(-2)
    else:
        res = _zeros(a, (*batch, 0), rdt)
    return x, res, rank, s


KERNELS = {op: _materialized(fn) for op, fn in {
    O.cholesky_p: cholesky, O.eigh_p: eigh, O.eigvalsh_p: eigvalsh, O.eig_p: eig, O.eigvals_p: eigvals,
    O.svd_p: svd, O.svdvals_p: svdvals, O.qr_p: qr, O.lu_factor_p: lu_factor,
    O.lu_pivots_to_permutation_p: lu_pivots_to_permutation, O.lu_solve_p: lu_solve,
    O.solve_triangular_p: solve_triangular, O.expm_p: expm, O.expm_frechet_p: expm_frechet,
    S.solve_p: solve, S.inv_p: inv, S.det_p: det, S.adjugate_p: adjugate, S.slogdet_p: slogdet,
    S.pinv_p: pinv, S.lstsq_p: lstsq,
}.items()}
"""Every op of `_decomp_ops.OPS` and `_solve_ops.OPS` (the products are core compositions)."""

__all__ = ["KERNELS"]
