"""Helpers shared by the decomposition rules and public functions, over core primitives.

Everything here binds primitives (never touches buffers), so rules built on it trace and
differentiate again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_runtime import lax

from ._common import mH, tril

# Two eigenvalues (singular values) closer than GAP_TOL * eps * (the largest magnitude) count
# as one repeated value: the rules then drop the 1/(w_j - w_i) coupling between them.
GAP_TOL = 64.0


def const(x: Any, value: Any, dtype: Any = None, shape: tuple | None = None) -> Any:
    """`value` broadcast to `shape` (x's shape unless given), in `dtype` (x's unless given)."""
    shape = tuple(x.shape) if shape is None else shape
    c = lax.full(shape=(), fill_value=value, dtype=dtype or x.dtype, device=x.device)
    return c if not shape else lax.broadcast_in_dim(c, shape=shape, broadcast_dimensions=())


def sub_matrix(x: Any, rows: tuple[int, int] | None = None, cols: tuple[int, int] | None = None) -> Any:
    """x[..., r0:r1, c0:c1]."""
    *batch, m, n = x.shape
    r0, r1 = rows or (0, m)
    c0, c1 = cols or (0, n)
    if (r0, r1, c0, c1) == (0, m, 0, n):
        return x
    nb = len(batch)
    return lax.slice(x, start_indices=(0,) * nb + (r0, c0), limit_indices=(*batch, r1, c1))


def pad_matrix(x: Any, rows: int = 0, cols: int = 0) -> Any:
    """x with `rows` zero rows and `cols` zero columns appended."""
    if not rows and not cols:
        return x
    config = ((0, 0, 0),) * (x.ndim - 2) + ((0, rows, 0), (0, cols, 0))
    return lax.pad(x, const(x, 0, shape=()), padding_config=config)


def concat(xs: list, axis: int) -> Any:
    """Concatenate along a negative axis, dropping empty pieces."""
    ax = xs[0].ndim + axis
    kept = [x for x in xs if x.shape[ax]] or xs[:1]
    return kept[0] if len(kept) == 1 else lax.concatenate(*kept, dimension=ax)


def to_dtype(x: Any, dtype: D.DType) -> Any:
    return x if x.dtype is dtype else lax.convert(x, new_dtype=dtype)


def real(x: Any) -> Any:
    return lax.real(x) if x.dtype.kind == "c" else x


def scale_cols(x: Any, v: Any) -> Any:
    """x[..., :, j] * v[..., j]."""
    nb = x.ndim - 2
    vb = lax.broadcast_in_dim(to_dtype(v, x.dtype), shape=tuple(x.shape),
                              broadcast_dimensions=(*range(nb), nb + 1))
    return lax.mul(x, vb)


def col_dots(a: Any, b: Any) -> Any:
    """sum_k conj(a[..., k, j]) * b[..., k, j]: the diagonal of a^H b without forming it."""
    ac = lax.conj(a) if a.dtype.kind == "c" else a
    return lax.reduce_sum(lax.mul(ac, b), axes=(a.ndim - 2,))


def hermitize(t: Any) -> Any:
    """The Hermitian part (t + t^H) / 2 (the symmetric part for real t). The public cholesky,
    eigh and eigvalsh compute on the Hermitian part of x (JAX's convention), so their values,
    their derivatives along every direction and their (Hermitian) gradients agree. Exact on
    Hermitian t (its imaginary diagonal aside, which it drops)."""
    return lax.mul(lax.add(t, mH(t)), const(t, 0.5))


def lower_hermitian(t: Any) -> Any:
    """The Hermitian matrix LAPACK works on when given t: t's strict lower triangle mirrored
    (conjugated) above it, and the real part of its diagonal. The cholesky, eigh and eigvalsh
    ops read only that, so their JVP rules send the tangent through it: each op's derivative
    is that of the function it computes, along every direction. Identity on Hermitian t."""
    return hermitize(lax.add(tril(t), tril(t, -1)))


def inverse_gaps(w: Any, plus: bool = False) -> Any:
    """F[..., i, j] = 1 / (w_j - w_i), or 1 / (w_j + w_i) if `plus`, and 0 where that
    difference (sum) is within GAP_TOL * eps * max|w| of zero: repeated values (both values
    zero), and the diagonal. Real (or complex) like w."""
    *batch, n = w.shape
    shape = (*batch, n, n)
    if n == 0:
        return const(w, 0, shape=shape)
    nb = len(batch)
    wi = lax.broadcast_in_dim(w, shape=shape, broadcast_dimensions=(*range(nb), nb))
    wj = lax.broadcast_in_dim(w, shape=shape, broadcast_dimensions=(*range(nb), nb + 1))
    pair = lax.add(wj, wi) if plus else lax.sub(wj, wi)
    scale = lax.reduce_max(lax.abs(w), axes=(nb,))
    eps = float(np.finfo(D.real_of(w.dtype).numpy).eps)
    tol = lax.mul(scale, const(scale, GAP_TOL * eps))
    tol = lax.broadcast_in_dim(tol, shape=shape, broadcast_dimensions=tuple(range(nb)))
    keep = lax.gt(lax.abs(pair), tol)
    if plus:
        rows = lax.iota(dtype=D.int32, shape=shape, dimension=nb, device=w.device)
        cols = lax.iota(dtype=D.int32, shape=shape, dimension=nb + 1, device=w.device)
        keep = lax.logical_and(keep, lax.ne(rows, cols))
    safe = lax.select(keep, pair, const(pair, 1))
    return lax.select(keep, lax.div(const(pair, 1), safe), const(pair, 0))


def inverse_or_zero(s: Any) -> Any:
    """1 / s, and 0 where s <= GAP_TOL * eps * max(s) (zero singular values)."""
    *batch, k = s.shape
    if k == 0:
        return s
    nb = len(batch)
    scale = lax.reduce_max(s, axes=(nb,))
    tol = lax.mul(scale, const(scale, GAP_TOL * float(np.finfo(s.dtype.numpy).eps)))
    tol = lax.broadcast_in_dim(tol, shape=tuple(s.shape), broadcast_dimensions=tuple(range(nb)))
    big = lax.gt(s, tol)
    safe = lax.select(big, s, const(s, 1))
    return lax.select(big, lax.div(const(s, 1), safe), const(s, 0))


def eye_rect(like: Any, m: int, n: int) -> Any:
    """The m x n matrix with ones on the main diagonal, like's dtype, batch and device."""
    batch = tuple(like.shape[:-2])
    rows = lax.iota(dtype=D.int32, shape=(m, n), dimension=0, device=like.device)
    cols = lax.iota(dtype=D.int32, shape=(m, n), dimension=1, device=like.device)
    eye = lax.convert(lax.eq(rows, cols), new_dtype=like.dtype)
    if not batch:
        return eye
    return lax.broadcast_in_dim(eye, shape=(*batch, m, n), broadcast_dimensions=(len(batch), len(batch) + 1))


def permutation_matrix(perm: Any, dtype: D.DType) -> Any:
    """P with P[..., perm[i], i] = 1, so that x = P @ (x[perm])."""
    *batch, m = perm.shape
    nb = len(batch)
    shape = (*batch, m, m)
    cols = lax.broadcast_in_dim(perm, shape=shape, broadcast_dimensions=(*range(nb), nb + 1))
    rows = lax.iota(dtype=D.int32, shape=shape, dimension=nb, device=perm.device)
    return lax.convert(lax.eq(rows, cols), new_dtype=dtype)


__all__ = [
    "GAP_TOL", "col_dots", "concat", "const", "eye_rect", "hermitize", "inverse_gaps",
    "inverse_or_zero", "lower_hermitian", "pad_matrix", "permutation_matrix", "real", "scale_cols",
    "sub_matrix", "to_dtype",
]
