"""Sorting: `sort` and `argsort` along one axis.

Real dtypes only (complex numbers have no order). NaN sorts as the largest
value: last in ascending order, first in descending order (as NumPy's
``flip(sort(x))``). The sort primitives are always stable, so ``stable=False``
is accepted and gives the stable order too; descending sorts keep equal
elements in their original order.
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError

from .. import lax
from ..tensor import Tensor
from ._helpers import check_tensor, convert, full, iota, normalize_axis, reshape
from ._indexing import gather_axis


def _setup(name: str, x: Tensor, axis: Any, descending: Any, stable: Any) -> int:
    check_tensor(name, x)
    for what, v in (("descending", descending), ("stable", stable)):
        if not isinstance(v, bool):
            raise ArgumentError(f"{name}: {what} must be True or False, got {v!r}")
    if x.dtype.kind == "c":
        raise DTypeError(
            f"{name}: complex numbers have no order, got a {x.dtype} tensor; sort real(x), "
            f"imag(x) or abs(x) instead"
        )
    return normalize_axis(name, axis, x.ndim)


def sort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The values of `x` sorted along `axis`."""
    ax = _setup("sort", x, axis, descending, stable)
    return lax.sort(x, dimension=ax, descending=descending, stable=True)


def argsort(x: Tensor, /, *, axis: int = -1, descending: bool = False,
            stable: bool = True) -> Tensor:
    """Indices (default index dtype) that sort `x` along `axis`."""
    ax = _setup("argsort", x, axis, descending, stable)
    return lax.argsort(x, dimension=ax, descending=descending, stable=True,
                       index_dtype=D.DEFAULT_INDEX)


# ---- 1-d building blocks shared by searching and set functions -------------


def take(v: Tensor, idx: Tensor) -> Tensor:
    """``v[idx]`` for a 1-d `v` and a 1-d tensor of valid indices."""
    return gather_axis(v, idx, 0)


def put(size: int, idx: Tensor, values: Tensor) -> Tensor:
    """A 1-d tensor of `size` zeros with ``out[idx] = values`` (a permutation scatter)."""
    zeros = full((size,), 0, values.dtype, values.device)
    return lax.scatter(zeros, reshape(idx, (idx.size, 1)), values, axes=(0,))


def stable_order(v: Tensor) -> Tensor:
    """The stable ascending argsort of a 1-d tensor; complex sorts by (real, imag)."""
    if v.dtype.kind != "c":
        return lax.argsort(v, dimension=0, index_dtype=D.DEFAULT_INDEX)
    by_imag = lax.argsort(lax.imag(v), dimension=0, index_dtype=D.DEFAULT_INDEX)
    by_real = lax.argsort(take(lax.real(v), by_imag), dimension=0, index_dtype=D.DEFAULT_INDEX)
    return take(by_imag, by_real)


def compact(flags: Tensor, count: int) -> Tensor:
    """Positions (ascending) of the True entries of a 1-d bool tensor with `count` of them."""
    n = flags.size
    slot = lax.sub(lax.cumsum(convert(flags, D.DEFAULT_INDEX), axis=0),
                   full((n,), 1, D.DEFAULT_INDEX, flags.device))
    slot = lax.select(flags, slot, full((n,), count, D.DEFAULT_INDEX, flags.device))
    out = put(count + 1, slot, iota((n,), 0, flags.device))  # the extra slot absorbs the False entries
    return lax.slice(out, start_indices=(0,), limit_indices=(count,))


__all__ = ["argsort", "sort"]
