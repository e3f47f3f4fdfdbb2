"""Cost rules of the linalg ops: the standard LAPACK flop counts, times the batch size.

Counts per matrix (m x n, k = min(m, n), M = max(m, n); square n x n; k rhs columns), in
operations of the dtype (complex ones count one, as in `tenferro_core.catalog.cost`), from
LAPACK Working Note 41 and Golub & Van Loan, Matrix Computations (4th ed.), section 8.6:

- lu_factor M k^2 - k^3/3 (2/3 n^3 square); cholesky n^3/3; qr: geqrf 2 M k^2 - 2/3 k^3
  plus forming Q (orgqr, 4 m q k - 2 (m + q) k^2 + 4/3 k^3 for q columns of Q).
- svdvals 4 M k^2 - 4/3 k^3; svd (Golub-Reinsch) 14 M k^2 + 8 k^3 reduced, and
  4 M^2 k + 8 M k^2 + 9 k^3 with full_matrices.
- eigvalsh 4/3 n^3, eigh 9 n^3; eigvals 10 n^3, eig 25 n^3 (Francis QR).
- lu_solve 2 n^2 k, solve_triangular n^2 k, solve = lu_factor + lu_solve, inv 2 n^3,
  det and slogdet lu_factor + n, adjugate (an SVD, two dets, one product) and pinv/lstsq
  (a reduced SVD and its products) as the kernels compute them.
- expm: Pade 13 (6 products and one solve with n columns, 44/3 n^3); the squarings depend
  on the norm of x and are not counted. expm_frechet about three times that (Al-Mohy and
  Higham 2009).

Bytes are the operands read and results written (LAPACK workspace is not counted).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tenferro_core.catalog.cost import Cost, io_bytes

from . import _decomp_ops as D
from . import _solve_ops as S


def _lu(m: int, n: int) -> float:
    k, big = min(m, n), max(m, n)
    return big * k * k - k ** 3 / 3


def _geqrf(m: int, n: int) -> float:
    k, big = min(m, n), max(m, n)
    return 2 * big * k * k - 2 * k ** 3 / 3


def _orgqr(m: int, q: int, k: int) -> float:
    return 4 * m * q * k - 2 * (m + q) * k * k + 4 * k ** 3 / 3


def _svdvals(m: int, n: int) -> float:
    k, big = min(m, n), max(m, n)
    return 4 * big * k * k - 4 * k ** 3 / 3


def _svd(m: int, n: int, full: bool) -> float:
    k, big = min(m, n), max(m, n)
    if full:
        return 4 * big * big * k + 8 * big * k * k + 9 * k ** 3
    return 14 * big * k * k + 8 * k ** 3


def _expm(n: int) -> float:
    return 44 * n ** 3 / 3


# per-matrix flops: fn(m, n, rhs columns, **params) where m x n is the first operand's matrix
_FLOPS: dict[Any, Callable[..., float]] = {
    D.cholesky_p: lambda m, n, r: n ** 3 / 3,
    D.eigh_p: lambda m, n, r: 9 * n ** 3,
    D.eigvalsh_p: lambda m, n, r: 4 * n ** 3 / 3,
    D.eig_p: lambda m, n, r: 25 * n ** 3,
    D.eigvals_p: lambda m, n, r: 10 * n ** 3,
    D.svd_p: lambda m, n, r, full_matrices: _svd(m, n, full_matrices),
    D.svdvals_p: lambda m, n, r: _svdvals(m, n),
    D.qr_p: lambda m, n, r, mode: _geqrf(m, n) + _orgqr(m, m if mode == "complete" else min(m, n),
                                                         min(m, n)),
    D.lu_factor_p: lambda m, n, r: _lu(m, n),
    D.lu_solve_p: lambda m, n, r, trans: 2 * n * n * r,
    D.solve_triangular_p: lambda m, n, r, lower, unit_diagonal, trans: n * n * r,
    D.expm_p: lambda m, n, r: _expm(n),
    D.expm_frechet_p: lambda m, n, r: 3 * _expm(n),
    S.solve_p: lambda m, n, r, singular: _lu(n, n) + 2 * n * n * r,
    S.inv_p: lambda m, n, r: 2 * n ** 3,
    S.det_p: lambda m, n, r: _lu(n, n) + n,
    S.slogdet_p: lambda m, n, r: _lu(n, n) + n,
    S.adjugate_p: lambda m, n, r: _svd(n, n, True) + 2 * _lu(n, n) + 2 * n ** 3,
    S.pinv_p: lambda m, n, r: _svd(m, n, False) + 2 * m * n * min(m, n),
    S.lstsq_p: lambda m, n, r, rcond: (_svd(m, n, False) + 2 * min(m, n) * r * (m + n)
                                       + (2 * m * n * r if m > n else 0)),
}


def _rule(flops: Callable[..., float]) -> Callable[..., Cost]:
    def rule(in_avals: tuple, out_avals: tuple, **params: Any) -> Cost:
        a, b = in_avals[0], in_avals[-1]
        m, n = a.shape[-2:]
        rhs = b.shape[-1] if len(in_avals) > 1 and b.ndim >= 2 else 0  # b: solvers' last operand
        batch = math.prod(a.shape[:-2])
        return Cost(batch * round(flops(m, n, rhs, **params)), io_bytes(in_avals, out_avals))

    return rule


def _no_flops(in_avals: tuple, out_avals: tuple, **params: Any) -> Cost:
    """lu_pivots_to_permutation: row swaps only."""
    return Cost(0, io_bytes(in_avals, out_avals))


COST_RULES: dict[Any, Callable[..., Cost]] = {
    **{op: _rule(fn) for op, fn in _FLOPS.items()},
    D.lu_pivots_to_permutation_p: _no_flops,
}
"""Op -> cost rule, for every op of `_decomp_ops.OPS` and `_solve_ops.OPS`."""

__all__ = ["COST_RULES"]
