"""Shared pieces of tenferro-linalg.

Shape/dtype checks used by the ops' shape rules, the mapping of LAPACK failures to
`LinAlgError`, and batched-matrix helpers written with core primitives, so AD rules
built on them are traced and differentiated again like any other function.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError, LinAlgError, LinAlgShapeError
from tenferro_runtime import lax
from tenferro_runtime.array_api import _helpers as H

FAMILY = "tenferro_linalg"


def op_name(op: str) -> str:
    """The family id of a linalg op: ``tenferro_linalg.<op>.v1``."""
    return f"{FAMILY}.{op}.v1"


# ---- checks (shape rules) ------------------------------------------------------------------


LAPACK_DTYPES = frozenset((D.float32, D.float64, D.complex64, D.complex128))


def check_float(name: str, aval: Any, what: str = "x") -> None:
    """The dtypes LAPACK computes in; integers, bool and half precision are a DTypeError."""
    if aval.dtype not in LAPACK_DTYPES:
        raise DTypeError(
            f"linalg.{name} expects {what} of a floating-point dtype (float32, float64, complex64, "
            f"complex128), got {aval.dtype}; convert it first with astype"
        )


def check_matrix(name: str, aval: Any, *, square: bool = False, what: str = "x",
                 floating: bool = True) -> tuple[int, int]:
    """Check a (batch of) matrix operand; returns its (rows, cols). Fewer than 2 dimensions, or
    a non-square matrix where `square`, is a `LinAlgShapeError`: a ShapeError that is also a
    `numpy.linalg.LinAlgError`, as NumPy raises. `floating`: also require a LAPACK dtype."""
    if floating:
        check_float(name, aval, what)
    if len(aval.shape) < 2:
        raise LinAlgShapeError(
            f"linalg.{name} expects {what} with at least 2 dimensions (a stack of matrices), got "
            f"shape {tuple(aval.shape)}; add axes with reshape or expand_dims"
        )
    m, n = aval.shape[-2:]
    if square and m != n:
        raise LinAlgShapeError(
            f"linalg.{name} expects square matrices in the last two dimensions of {what}, got "
            f"shape {tuple(aval.shape)} ({m}x{n})"
        )
    return m, n


def real_dtype(dtype: D.DType) -> D.DType:
    return D.real_of(dtype)


# ---- kernels: errors and non-finite input -------------------------------------------------


def non_finite_error(name: str) -> LinAlgError:
    """The error of every kernel (any backend) given NaN/inf input."""
    return LinAlgError(
        f"linalg.{name}: the input holds NaN or inf; LAPACK needs finite values. Check the "
        f"input (e.g. with isfinite) before calling linalg.{name}"
    )


def require_finite(name: str, *arrays: np.ndarray) -> None:
    """LAPACK may loop forever or return garbage on NaN/inf: refuse such input up front."""
    for a in arrays:
        if a.size and not np.isfinite(a).all():
            raise non_finite_error(name)


@contextmanager
def lapack_errors(name: str, hint: str = "",
                  errors: tuple[type[BaseException], ...] = (np.linalg.LinAlgError,)) -> Iterator[None]:
    """Turn the library's failure (`errors`: numpy/scipy LinAlgError by default, a backend
    passes its own) into tenferro's LinAlgError."""
    try:
        yield
    except LinAlgError:
        raise
    except errors as exc:
        raise LinAlgError(f"linalg.{name} failed: {exc}{'; ' + hint if hint else ''}") from None


# ---- batched matrix helpers over core primitives -------------------------------------------


def mT(x: Any) -> Any:
    """Swap the last two axes."""
    n = x.ndim
    return lax.transpose(x, permutation=(*range(n - 2), n - 1, n - 2))


def mH(x: Any) -> Any:
    """Conjugate transpose of the last two axes."""
    x = mT(x)
    return lax.conj(x) if x.dtype.kind == "c" else x


def matmul(a: Any, b: Any) -> Any:
    """a @ b over equal leading (batch) shapes; no broadcasting, no promotion."""
    nb = a.ndim - 2
    batch = tuple(range(nb))
    return lax.dot_general(a, b, contracting_dims=((nb + 1,), (nb,)), batch_dims=(batch, batch))


def matmul_chain(*ms: Any) -> Any:
    """ms[0] @ ms[1] @ ... in the order of fewest multiply-adds (the matrix-chain order, from
    the shapes): a product that narrows to the small side of a tall or wide matrix is taken
    first, so no max(m, n)-square intermediate is formed where a smaller order exists."""
    dims = [m.shape[-2] for m in ms] + [ms[-1].shape[-1]]
    n = len(ms)
    cost = {(i, i): 0 for i in range(n)}
    split: dict = {}
    for span in range(1, n):
        for i in range(n - span):
            j = i + span
            cost[i, j], split[i, j] = min(
                (cost[i, k] + cost[k + 1, j] + dims[i] * dims[k + 1] * dims[j + 1], k) for k in range(i, j))

    def build(i: int, j: int) -> Any:
        if i == j:
            return ms[i]
        k = split[i, j]
        return matmul(build(i, k), build(k + 1, j))

    return build(0, n - 1)


def eye_like(x: Any, n: int | None = None) -> Any:
    """An n x n identity (n = x's last dim) of x's dtype, broadcast to x's batch shape."""
    n = x.shape[-1] if n is None else n
    rows = H.iota((n, n), 0, x.device)
    cols = H.iota((n, n), 1, x.device)
    eye = lax.convert(lax.eq(rows, cols), new_dtype=x.dtype)
    return H.broadcast_to(eye, (*x.shape[:-2], n, n))


def diag_part(x: Any) -> Any:
    """The main diagonal of the last two axes, shape (..., min(m, n))."""
    *batch, m, n = x.shape
    k = min(m, n)
    if k == 0:
        return H.full((*batch, 0), 0, x.dtype, x.device)
    flat = lax.reshape(x, new_sizes=(*batch, m * n))
    nb = len(batch)
    return lax.slice(flat, start_indices=(0,) * (nb + 1), limit_indices=(*batch, (k - 1) * (n + 1) + 1),
                     strides=(*(1,) * nb, n + 1))


def diag_embed(v: Any) -> Any:
    """Square matrices with v (..., n) on the diagonal."""
    n = v.shape[-1]
    vb = lax.broadcast_in_dim(v, shape=(*v.shape, n), broadcast_dimensions=tuple(range(v.ndim)))
    return lax.mul(vb, eye_like(vb))


def tril(x: Any, k: int = 0) -> Any:
    """Lower triangle (entries with col - row <= k), zeros elsewhere."""
    return _triangle(x, k, lower=True)


def triu(x: Any, k: int = 0) -> Any:
    """Upper triangle (entries with col - row >= k), zeros elsewhere."""
    return _triangle(x, k, lower=False)


def _triangle(x: Any, k: int, lower: bool) -> Any:
    m, n = x.shape[-2:]
    diff = lax.sub(H.iota((m, n), 1, x.device), H.iota((m, n), 0, x.device))
    kk = H.full((m, n), k, diff.dtype, x.device)
    keep = lax.le(diff, kk) if lower else lax.ge(diff, kk)
    keep = H.broadcast_to(keep, tuple(x.shape))
    return lax.select(keep, x, H.full(tuple(x.shape), 0, x.dtype, x.device))


__all__ = [
    "FAMILY", "LAPACK_DTYPES", "check_float", "check_matrix", "diag_embed", "diag_part", "eye_like",
    "lapack_errors", "mH", "mT", "matmul", "matmul_chain", "non_finite_error", "op_name", "real_dtype",
    "require_finite", "tril", "triu",
]
