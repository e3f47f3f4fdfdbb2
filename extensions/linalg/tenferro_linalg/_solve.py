"""Solvers: solve, inv, det, slogdet, lstsq, pinv, matrix_rank, matrix_power.

Array API 2024.12 signatures, batched over leading dimensions with broadcasting. The
functions here check, promote and broadcast, then bind the ops of `_solve_ops` (kernels
in `_solve_kernels`, AD rules in `_solve_rules`); matrix_rank and matrix_power are
compositions. Inputs are float32/float64/complex64/complex128 tensors (integers are a
DTypeError; mixed float dtypes promote).
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import lax
from tenferro_runtime.array_api import _helpers as H
from tenferro_runtime.tensor import Tensor

from . import _solve_kernels, _solve_ops, _solve_rules
from ._common import check_float, check_matrix, eye_like, matmul, real_dtype
from ._solve_ops import det_p, inv_p, lstsq_p, p_tol, pinv_p, slogdet_p, solve_p

OPS = _solve_ops.OPS
KERNELS = _solve_kernels.KERNELS
RULES = _solve_rules.RULES


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class LstsqResult(NamedTuple):
    x: Tensor
    residuals: Tensor
    rank: Tensor
    s: Tensor


def _tensor(name: str, x: Any, what: str = "x") -> Tensor:
    H.check_tensor(f"linalg.{name}", x, what)
    check_float(name, x.aval, what)
    return x


def _pair(name: str, x1: Any, x2: Any, what: tuple[str, str] = ("x1", "x2")) -> tuple[Tensor, Tensor]:
    """Two float tensors promoted to one dtype."""
    a, b = _tensor(name, x1, what[0]), _tensor(name, x2, what[1])
    dt = D.promote_types(a.dtype, b.dtype)
    return H.convert(a, dt), H.convert(b, dt)


def _batch(name: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return H.broadcast_shapes(*shapes)
    except ShapeError as exc:
        raise ShapeError(f"linalg.{name}: the batch shapes do not broadcast: {exc}") from None


def _broadcast_pair(name: str, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    batch = _batch(name, a.shape[:-2], b.shape[:-2])
    return H.broadcast_to(a, batch + a.shape[-2:]), H.broadcast_to(b, batch + b.shape[-2:])


def _rows_as_vector(name: str, b: Tensor, m: int, what: str, a_shape: tuple[int, ...]) -> Tensor:
    """x2 of shape (M,) as (M, 1); ShapeError on a size mismatch or a 0-d x2."""
    if b.ndim == 0:
        raise ShapeError(f"linalg.{name} expects {what} with at least 1 dimension, got a 0-d tensor")
    if b.shape[-1 if b.ndim == 1 else -2] != m:
        raise ShapeError(
            f"linalg.{name}: {what} of shape {b.shape} does not fit the {m}-row matrices of shape "
            f"{a_shape}; {what} needs {m} entries (a vector) or {m} rows (..., {m}, K)"
        )
    return H.reshape(b, (m, 1)) if b.ndim == 1 else b


# ---- solve, inv, det, slogdet --------------------------------------------------------------


def solve(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The X with x1 @ X == x2 for square x1 (..., M, M); x2 is a vector iff x2.ndim == 1,
    else (..., M, K) with broadcast batch dimensions. Exactly singular x1: LinAlgError."""
    a, b = _pair("solve", x1, x2)
    m, _ = check_matrix("solve", a.aval, square=True, what="x1")
    vector = b.ndim == 1
    b = _rows_as_vector("solve", b, m, "x2", a.shape)
    if a.ndim == 2 and b.ndim > 2:
        x = _solve_stacked_rhs(a, b)
    else:
        x = solve_p.bind(*_broadcast_pair("solve", a, b))
    return H.reshape(x, x.shape[:-1]) if vector else x


def _solve_stacked_rhs(a: Tensor, b: Tensor) -> Tensor:
    """One matrix against a stack of right-hand sides: one factorization, the stack's
    columns side by side (n, batch * k)."""
    nb = b.ndim
    batch, (m, k) = b.shape[:-2], b.shape[-2:]
    cols = lax.transpose(b, permutation=(nb - 2, *range(nb - 2), nb - 1))
    x = solve_p.bind(a, H.reshape(cols, (m, math.prod(batch) * k)))
    x = H.reshape(x, (m, *batch, k))
    return lax.transpose(x, permutation=(*range(1, nb - 1), 0, nb - 1))


def inv(x: Tensor, /) -> Tensor:
    """Inverse of square matrices (..., M, M). Exactly singular: LinAlgError."""
    x = _tensor("inv", x)
    check_matrix("inv", x.aval, square=True)
    return inv_p.bind(x)


def det(x: Tensor, /) -> Tensor:
    """Determinant of square matrices (..., M, M); 1 for 0x0. Its gradient is the cofactor
    matrix, finite at singular matrices too."""
    x = _tensor("det", x)
    check_matrix("det", x.aval, square=True)
    return det_p.bind(x)


def slogdet(x: Tensor, /) -> SlogdetResult:
    """(sign, log|det|) of square matrices: sign has x's dtype (|sign| = 1, or 0 when
    singular, where log|det| = -inf), log|det| the real dtype."""
    x = _tensor("slogdet", x)
    check_matrix("slogdet", x.aval, square=True)
    return SlogdetResult(*slogdet_p.bind(x))


# ---- least squares, pseudo-inverse, rank ---------------------------------------------------


def lstsq(a: Tensor, b: Tensor, /, *, rcond: float | None = None) -> LstsqResult:
    """Least-squares solution of a @ x ~ b as numpy.linalg.lstsq, batched.

    a is (..., M, N); b is (M,) (a vector) or (..., M, K), batches broadcast. Returns
    (x (..., N[, K]), residuals (..., K) -- (..., 1) for a vector b -- when M > N, else
    (..., 0), rank (...,) int64, s (..., min(M, N))). Singular values <= rcond * max(s)
    count as zero (rcond=None: eps * max(M, N)). Unlike NumPy, residuals are returned also
    when a is rank-deficient (shapes do not depend on values).
    """
    a, b = _pair("lstsq", a, b, ("a", "b"))
    m, _ = check_matrix("lstsq", a.aval, what="a")
    vector = b.ndim == 1
    b = _rows_as_vector("lstsq", b, m, "b", a.shape)
    x, res, rank, s = lstsq_p.bind(*_broadcast_pair("lstsq", a, b), rcond=rcond)
    return LstsqResult(H.reshape(x, x.shape[:-1]) if vector else x, res, rank, s)


def _rtol(name: str, x: Tensor, rtol: Any) -> Tensor:
    """rtol as a real tensor of x's batch shape (None: max(M, N) * eps)."""
    rdt, batch = real_dtype(x.dtype), x.shape[:-2]
    if rtol is None:
        return H.full(batch, float(np.finfo(rdt.numpy).eps) * max(x.shape[-2:]), rdt, x.device)
    if isinstance(rtol, Tensor):
        if rtol.dtype.kind != "f":
            raise DTypeError(f"linalg.{name} expects a real floating rtol, got {rtol.dtype}")
        try:
            return H.broadcast_to(H.convert(rtol, rdt), batch)
        except ShapeError:
            raise ShapeError(
                f"linalg.{name}: rtol of shape {rtol.shape} does not broadcast to the batch shape "
                f"{batch} of x {x.shape}"
            ) from None
    return H.full(batch, p_tol(f"linalg.{name}", "rtol", rtol), rdt, x.device)


def pinv(x: Tensor, /, *, rtol: float | Tensor | None = None) -> Tensor:
    """Moore-Penrose pseudo-inverse (..., N, M) of x (..., M, N); singular values <= rtol *
    max(s) are dropped (rtol: a float, a real tensor broadcasting to the batch, or None for
    max(M, N) * eps)."""
    x = _tensor("pinv", x)
    check_matrix("pinv", x.aval)
    return pinv_p.bind(x, _rtol("pinv", x, rtol))


def matrix_rank(x: Tensor, /, *, rtol: float | Tensor | None = None) -> Tensor:
    """Number of singular values > rtol * max(s) (int64, shape x.shape[:-2]); rtol as pinv's.
    Not differentiable (integer output)."""
    from ._decomp import svdvals

    x = _tensor("matrix_rank", x)
    check_matrix("matrix_rank", x.aval)
    tol = _rtol("matrix_rank", x, rtol)
    if min(x.shape[-2:]) == 0:
        return H.full(x.shape[:-2], 0, D.DEFAULT_INDEX, x.device)
    s = svdvals(x)
    last = s.ndim - 1
    smax = lax.reduce_max(s, axes=(last,))
    cut = H.reshape(lax.mul(smax, tol), (*smax.shape, 1))
    big = lax.gt(s, H.broadcast_to(cut, s.shape))
    return lax.reduce_sum(lax.convert(big, new_dtype=D.DEFAULT_INDEX), axes=(last,))


# ---- matrix_power --------------------------------------------------------------------------


def matrix_power(x: Tensor, n: int, /) -> Tensor:
    """x raised to the integer power n by repeated squaring (n = 0: identity; n < 0: powers
    of inv(x), floating x only). Integer x is allowed for n >= 0."""
    H.check_tensor("linalg.matrix_power", x)
    if isinstance(n, bool):
        raise ArgumentError(f"linalg.matrix_power expects an int n, got {n!r}")
    try:
        n = operator.index(n)
    except TypeError:
        raise ArgumentError(f"linalg.matrix_power expects an int n, got {type(n).__name__}") from None
    if x.dtype.kind not in "iufc":
        raise DTypeError(f"linalg.matrix_power expects a numeric x, got {x.dtype}")
    check_matrix("matrix_power", x.aval, square=True, floating=False)
    if n < 0:
        if x.dtype.kind not in "fc":
            raise DTypeError(
                f"linalg.matrix_power: a negative power needs inv, which needs a floating x; got "
                f"{x.dtype} with n={n}. Convert x with astype first"
            )
        x, n = inv(x), -n
    if n == 0:
        return eye_like(x)
    result, base = None, x
    while True:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if not n:
            return H.fresh(result)
        base = matmul(base, base)


__all__ = ["LstsqResult", "SlogdetResult", "det", "inv", "lstsq", "matrix_power", "matrix_rank", "pinv",
           "slogdet", "solve"]
