"""Utility functions: `all`, `any` (truthiness of any dtype) and `diff`."""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, ShapeError

from .. import lax
from ..tensor import Tensor
from ._args import as_int
from ._helpers import (
    broadcast_to,
    check_tensor,
    expand_reduced,
    full,
    normalize_axes,
    normalize_axis,
    promote,
)


def truthy(x: Tensor) -> Tensor:
    """A bool tensor: ``x != 0`` (NaN counts as true), or `x` itself when it is bool."""
    if x.dtype is D.bool_:
        return x
    return lax.ne(x, full(x.shape, 0, x.dtype, x.device))


def _logical(name: str, prim: Any, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    check_tensor(name, x)
    if not isinstance(keepdims, bool):
        raise ArgumentError(f"{name}: keepdims must be True or False, got {keepdims!r}")
    axes = normalize_axes(name, axis, x.ndim)
    out = prim(truthy(x), axes=axes)
    return expand_reduced(out, x.shape, axes) if keepdims else out


def all(x: Tensor, /, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """True where every element along `axis` is nonzero (True for empty axes)."""
    return _logical("all", lax.reduce_and, x, axis, keepdims)


def any(x: Tensor, /, *, axis: Any = None, keepdims: bool = False) -> Tensor:
    """True where some element along `axis` is nonzero (False for empty axes)."""
    return _logical("any", lax.reduce_or, x, axis, keepdims)


def _edge(name: str, what: str, t: Tensor, x: Tensor, ax: int) -> Tensor:
    """A prepend/append operand shaped to concatenate with `x` along `ax`."""
    if t.ndim == 0:
        return broadcast_to(t, tuple(1 if i == ax else n for i, n in enumerate(x.shape)))
    if t.ndim != x.ndim or _mismatch(t.shape, x.shape, ax):
        raise ShapeError(
            f"{name}: {what} must be a scalar or have shape {x.shape} except along axis {ax}, "
            f"got shape {t.shape}"
        )
    return t


def _mismatch(a: tuple[int, ...], b: tuple[int, ...], ax: int) -> bool:
    return True in (m != n for i, (m, n) in enumerate(zip(a, b)) if i != ax)


def diff(x: Tensor, /, *, axis: int = -1, n: int = 1, prepend: Any = None,
         append: Any = None) -> Tensor:
    """The n-th forward difference along `axis` (bool input: ``!=`` as in NumPy)."""
    check_tensor("diff", x)
    if x.ndim == 0:
        raise ShapeError("diff: expected a tensor with at least one axis, got a 0-d tensor")
    ax = normalize_axis("diff", axis, x.ndim)
    n = as_int("diff", "n", n)
    if n < 0:
        raise ArgumentError(f"diff: n must be a non-negative int, got {n}")
    names = [w for w, q in (("prepend", prepend), ("x", x), ("append", append)) if q is not None]
    ts = promote("diff", *(q for q in (prepend, x, append) if q is not None))
    y = ts[names.index("x")]
    if len(ts) > 1:
        y = lax.concatenate(
            *(t if w == "x" else _edge("diff", w, t, y, ax) for w, t in zip(names, ts)), dimension=ax
        )
    for _ in range(n):
        length = y.shape[ax]
        if length <= 1:
            limit = tuple(0 if i == ax else s for i, s in enumerate(y.shape))
            return lax.slice(y, start_indices=(0,) * y.ndim, limit_indices=limit)
        start = tuple(1 if i == ax else 0 for i in range(y.ndim))
        stop = tuple(length - 1 if i == ax else s for i, s in enumerate(y.shape))
        hi = lax.slice(y, start_indices=start, limit_indices=y.shape)
        lo = lax.slice(y, start_indices=(0,) * y.ndim, limit_indices=stop)
        y = lax.ne(hi, lo) if y.dtype is D.bool_ else lax.sub(hi, lo)
    return y


__all__ = ["all", "any", "diff"]
