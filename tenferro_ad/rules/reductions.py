"""JVP and transpose rules for reductions, cumsum and sort.

Merged into `structural.JVP` / `structural.TRANSPOSE`. Decisions at degenerate points:

- `reduce_prod`: the tangent is the product rule evaluated on a pairwise product tree
  (slices of even and odd rows, `d(ab) = da b + a db`), so no division happens: it is
  exact with any number of zeros in a slice. An empty reduction has a Zero tangent.
- `reduce_max` / `reduce_min`: the tangent is split equally among tied extrema (JAX's
  rule); a NaN extremum gives a NaN tangent (no element compares equal to it).
- `sort`: tangents are permuted by a stable `argsort` with the same direction, so ties
  keep the order the stable sort gives them.
"""

from __future__ import annotations

import math
from typing import Any

from tenferro_core import dtypes as D
from tenferro_runtime import lax

from ..ad_util import Zero, is_zero


def _aval(x: Any):
    return x.aval


def _scalar(value: Any, aval) -> Any:
    return lax.full(shape=(), fill_value=value, dtype=aval.dtype, device=aval.device)


def _kept(ndim: int, axes) -> tuple[int, ...]:
    return tuple(i for i in range(ndim) if i not in axes)


def _reduce_sum_t(ct, x, *, axes):
    """Broadcast the cotangent back over the reduced axes."""
    av = _aval(x)
    if is_zero(ct):
        return (Zero(av),)
    return (lax.broadcast_in_dim(ct, shape=av.shape, broadcast_dimensions=_kept(av.ndim, axes)),)


def _to_rows(x, axes, n: int, m: int):
    """x with the reduced axes moved first and flattened: shape (n, m)."""
    nd = _aval(x).ndim
    perm = tuple(axes) + _kept(nd, axes)
    if perm != tuple(range(nd)):
        x = lax.transpose(x, permutation=perm)
    return lax.reshape(x, new_sizes=(n, m))


def _reduce_prod_jvp(primals, tangents, *, axes):
    """Product rule on a pairwise tree of row products (exact with zeros, no division)."""
    x, t = primals[0], tangents[0]
    out = lax.reduce_prod(x, axes=axes)
    av = _aval(x)
    n = math.prod(av.shape[a] for a in axes)
    if is_zero(t) or n == 0:
        return out, Zero(_aval(out))
    m = math.prod(av.shape[i] for i in _kept(av.ndim, axes))
    xs, ts = _to_rows(x, axes, n, m), _to_rows(t, axes, n, m)
    while n > 1:
        if n % 2:
            xs = lax.pad(xs, _scalar(1, av), padding_config=((0, 1, 0), (0, 0, 0)))
            ts = lax.pad(ts, _scalar(0, av), padding_config=((0, 1, 0), (0, 0, 0)))
            n += 1
        even = {"start_indices": (0, 0), "limit_indices": (n, m), "strides": (2, 1)}
        odd = {"start_indices": (1, 0), "limit_indices": (n, m), "strides": (2, 1)}
        xa, xb = lax.slice(xs, **even), lax.slice(xs, **odd)
        ta, tb = lax.slice(ts, **even), lax.slice(ts, **odd)
        xs, ts = lax.mul(xa, xb), lax.add(lax.mul(ta, xb), lax.mul(xa, tb))
        n //= 2
    return out, lax.reshape(ts, new_sizes=_aval(out).shape)


def _reduce_extremum_jvp(prim):
    def jvp(primals, tangents, *, axes):
        """Mean of the tangents at the tied extrema."""
        x, t = primals[0], tangents[0]
        out = prim(x, axes=axes)
        av = _aval(x)
        if is_zero(t) or not av.dtype.is_inexact:
            return out, Zero(_aval(out))
        at = lax.broadcast_in_dim(out, shape=av.shape, broadcast_dimensions=_kept(av.ndim, axes))
        mask = lax.convert(lax.eq(x, at), new_dtype=av.dtype)
        num = lax.reduce_sum(lax.mul(t, mask), axes=axes)
        return out, lax.div(num, lax.reduce_sum(mask, axes=axes))

    return jvp


def _cumsum_t(ct, x, *, axis, reverse=False):
    """Cumsum in the other direction."""
    if is_zero(ct):
        return (Zero(_aval(x)),)
    return (lax.cumsum(ct, axis=axis, reverse=not reverse),)


def _take_along(t, idx, axis: int):
    """t[..., idx[...], ...] along `axis`, with idx of t's shape (a full-index gather)."""
    av = _aval(t)
    iav = _aval(idx)
    cols = []
    for d in range(av.ndim):
        c = idx if d == axis else lax.iota(dtype=iav.dtype, shape=av.shape, dimension=d,
                                           device=av.device)
        cols.append(lax.reshape(c, new_sizes=av.shape + (1,)))
    full = cols[0] if len(cols) == 1 else lax.concatenate(*cols, dimension=av.ndim)
    return lax.gather(t, full, axes=tuple(range(av.ndim)))


def _sort_jvp(primals, tangents, *, dimension, descending=False, stable=True):
    """Permute the tangent as the (stable) sort permutes the operand."""
    x, t = primals[0], tangents[0]
    out = lax.sort(x, dimension=dimension, descending=descending, stable=stable)
    if is_zero(t):
        return out, Zero(_aval(out))
    if _aval(x).size == 0:
        return out, t
    perm = lax.argsort(x, dimension=dimension, descending=descending, stable=True,
                       index_dtype=D.int64)
    return out, _take_along(t, perm, dimension)


# reduce_sum and cumsum are linear: their JVP is the generic `tenferro_ad.jvp.linear_jvp`.
JVP: dict = {
    "reduce_prod": _reduce_prod_jvp,
    "reduce_max": _reduce_extremum_jvp(lax.reduce_max),
    "reduce_min": _reduce_extremum_jvp(lax.reduce_min),
    "sort": _sort_jvp,
}

TRANSPOSE: dict = {
    "reduce_sum": _reduce_sum_t,
    "cumsum": _cumsum_t,
}
