"""Searching: `argmax`, `argmin`, `count_nonzero`, `nonzero`, `searchsorted`, `where`.

`nonzero` lives with the indexing functions and is re-exported here.
`where` accepts Python scalars for `x1`/`x2` (2024.12) and, beyond the
standard, a non-bool condition (its truthiness, ``condition != 0``).
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError

from .. import lax
from ..tensor import Tensor
from ._helpers import (
    broadcast_shapes,
    broadcast_to,
    check_tensor,
    convert,
    expand_reduced,
    full,
    normalize_axes,
    normalize_axis,
    promote,
    reshape,
)
from ._indexing import nonzero
from ._sorting import put, take
from ._utility import truthy


def _arg(name: str, prim: Any, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    check_tensor(name, x)
    if not isinstance(keepdims, bool):
        raise ArgumentError(f"{name}: keepdims must be True or False, got {keepdims!r}")
    if x.dtype.kind == "c":
        raise DTypeError(f"{name}: complex numbers have no order, got a {x.dtype} tensor; "
                         f"use abs(x) or real(x)")
    if axis is None:
        src, ax = reshape(x, (x.size,)), 0
    else:
        src, ax = x, normalize_axis(name, axis, x.ndim)
    if src.shape[ax] == 0:
        raise ShapeError(f"{name}: cannot search an empty axis (tensor of shape {x.shape}); "
                         f"there is no {name[3:]}imum. Check the size first")
    out = prim(src, axis=ax, index_dtype=D.DEFAULT_INDEX)
    if not keepdims:
        return out
    if axis is None:
        return reshape(out, (1,) * x.ndim)
    return expand_reduced(out, x.shape, (ax,))


def argmax(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first maximum along `axis` (None: of the flattened tensor)."""
    return _arg("argmax", lax.argmax, x, axis, keepdims)


def argmin(x: Tensor, /, *, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first minimum along `axis` (None: of the flattened tensor)."""
    return _arg("argmin", lax.argmin, x, axis, keepdims)


def count_nonzero(x: Tensor, /, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Number of nonzero elements (NaN counts) along `axis`, in the default integer dtype."""
    check_tensor("count_nonzero", x)
    if not isinstance(keepdims, bool):
        raise ArgumentError(f"count_nonzero: keepdims must be True or False, got {keepdims!r}")
    axes = normalize_axes("count_nonzero", axis, x.ndim)
    out = lax.reduce_sum(convert(truthy(x), D.DEFAULT_INT), axes=axes)
    return expand_reduced(out, x.shape, axes) if keepdims else out


def searchsorted(x1: Tensor, x2: Any, /, *, side: str = "left", sorter: Tensor | None = None) -> Tensor:
    """Insertion indices of `x2` into the ascending 1-d `x1` that keep it sorted.

    Merge by sorting, O((n+m) log(n+m)): one stable argsort of ``x1`` and ``x2``
    concatenated (``x2`` first for side='left', so it precedes equal ``x1``
    values; last for 'right'), a running count of ``x1`` elements in sorted
    order, and a scatter of those counts back to ``x2``'s positions. NaN sorts
    last, as in NumPy.
    """
    check_tensor("searchsorted", x1, "x1")
    if x1.ndim != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-d, got shape {x1.shape}")
    if side not in ("left", "right"):
        raise ArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    n = x1.shape[0]
    if sorter is not None:
        check_tensor("searchsorted", sorter, "sorter")
        if sorter.shape != (n,):
            raise ShapeError(f"searchsorted: sorter must have shape {(n,)} like x1, got {sorter.shape}")
        if sorter.dtype.kind not in "iu":
            raise DTypeError(f"searchsorted: sorter must have an integer dtype, got {sorter.dtype}")
        x1 = take(x1, sorter)
    a, v = promote("searchsorted", x1, x2)
    if a.dtype.kind == "c":
        raise DTypeError(f"searchsorted: complex numbers have no order, got {a.dtype}")
    m = v.size
    if n == 0 or m == 0:
        return full(v.shape, 0, D.DEFAULT_INDEX, a.device)
    vf = reshape(v, (m,))
    keys = lax.concatenate(vf, a, dimension=0) if side == "left" else lax.concatenate(a, vf, dimension=0)
    perm = lax.argsort(keys, dimension=0, index_dtype=D.DEFAULT_INDEX)
    bound = full((n + m,), m if side == "left" else n, D.DEFAULT_INDEX, a.device)
    from_x1 = lax.ge(perm, bound) if side == "left" else lax.lt(perm, bound)
    seen = lax.cumsum(convert(from_x1, D.DEFAULT_INDEX), axis=0)  # x1 elements up to here
    merged = put(n + m, perm, seen)
    start = 0 if side == "left" else n
    out = lax.slice(merged, start_indices=(start,), limit_indices=(start + m,))
    return reshape(out, v.shape)


def where(condition: Tensor, x1: Any, x2: Any, /) -> Tensor:
    """Elements of `x1` where `condition` holds, else of `x2`; broadcasts and promotes."""
    check_tensor("where", condition, "condition")
    a, b = promote("where", x1, x2)
    cond = truthy(condition)
    shape = broadcast_shapes(cond.shape, a.shape, b.shape)
    return lax.select(broadcast_to(cond, shape), broadcast_to(a, shape), broadcast_to(b, shape))


__all__ = ["argmax", "argmin", "count_nonzero", "nonzero", "searchsorted", "where"]
