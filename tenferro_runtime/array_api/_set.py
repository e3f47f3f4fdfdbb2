"""Set functions: `unique_all`, `unique_counts`, `unique_inverse`, `unique_values`.

The input is flattened. Values come out sorted ascending (complex: by real,
then imaginary part), NaNs last, and every NaN is its own unique value, as the
standard asks. `inverse_indices` has the input's shape; `indices` are the
first occurrences in the flattened input.

The algorithm uses primitives only: a stable sort, a comparison of adjacent
sorted values to flag group starts, and a cumulative sum for group ids. The
number of unique values decides the output shape, so it is read back to the
host once (these functions therefore cannot be traced with abstract inputs).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError

from .. import lax
from ..tensor import Tensor
from ._helpers import check_tensor, convert, full, promote, reshape
from ._sorting import compact, put, stable_order, take


class UniqueAllResult(NamedTuple):
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


class _Groups:
    """Sorted flat values and where each group of equal values starts."""

    def __init__(self, name: str, x: Tensor):
        check_tensor(name, x)
        self.x = x
        self.n = n = x.size
        self.device = dev = x.device
        flat = reshape(x, (n,))
        self.perm = stable_order(flat)
        self.sorted = s = take(flat, self.perm)
        if n == 0:
            self.starts = lax.iota(dtype=D.DEFAULT_INDEX, shape=(0,), dimension=0, device=dev)
            self.new = full((0,), False, D.bool_, dev)
            self.count = 0
            return
        tail = lax.slice(s, start_indices=(1,), limit_indices=(n,))
        head = lax.slice(s, start_indices=(0,), limit_indices=(n - 1,))
        # NaN != NaN, so every NaN starts its own group.
        self.new = lax.concatenate(full((1,), True, D.bool_, dev), lax.ne(tail, head), dimension=0)
        self.count = int(lax.reduce_sum(convert(self.new, D.DEFAULT_INDEX), axes=(0,)))  # host read
        self.starts = compact(self.new, self.count)

    def values(self) -> Tensor:
        return take(self.sorted, self.starts)

    def indices(self) -> Tensor:
        return take(self.perm, self.starts)

    def counts(self) -> Tensor:
        if self.count == 0:
            return self.starts
        ends = lax.concatenate(
            lax.slice(self.starts, start_indices=(1,), limit_indices=(self.count,)),
            full((1,), self.n, D.DEFAULT_INDEX, self.device),
            dimension=0,
        )
        return lax.sub(ends, self.starts)

    def inverse(self) -> Tensor:
        if self.n == 0:
            return full(self.x.shape, 0, D.DEFAULT_INDEX, self.device)
        one = full((self.n,), 1, D.DEFAULT_INDEX, self.device)
        group = lax.sub(lax.cumsum(convert(self.new, D.DEFAULT_INDEX), axis=0), one)
        return reshape(put(self.n, self.perm, group), self.x.shape)


def unique_all(x: Tensor, /) -> UniqueAllResult:
    """Unique values, first-occurrence indices, inverse indices and counts."""
    g = _Groups("unique_all", x)
    return UniqueAllResult(g.values(), g.indices(), g.inverse(), g.counts())


def unique_counts(x: Tensor, /) -> UniqueCountsResult:
    """Unique values and how often each occurs."""
    g = _Groups("unique_counts", x)
    return UniqueCountsResult(g.values(), g.counts())


def unique_inverse(x: Tensor, /) -> UniqueInverseResult:
    """Unique values and, for each element of `x`, the index of its value."""
    g = _Groups("unique_inverse", x)
    return UniqueInverseResult(g.values(), g.inverse())


def unique_values(x: Tensor, /) -> Tensor:
    """The unique values of `x`, sorted."""
    return _Groups("unique_values", x).values()


def isin(x1: Any, x2: Any, /, *, invert: bool = False) -> Tensor:
    """For each element of `x1`, whether it equals some element of `x2` (not: with invert=True).

    Either argument may be a Python scalar (a scalar `x1` gives a 0-d result). Values are
    compared after Array API promotion, by `equal`, so NaN is in nothing. Real dtypes sort
    `x2` and binary-search it, O((n+m) log(n+m)); complex compares every pair.
    """
    if not isinstance(invert, bool):
        raise ArgumentError(f"isin: invert must be True or False, got {invert!r}")
    a, b = promote("isin", x1, x2)
    m = b.size
    if m == 0:
        return full(a.shape, invert, D.bool_, a.device)
    bf = reshape(b, (m,))
    if a.dtype.kind == "c":
        n = a.size
        af = reshape(a, (n, 1))
        eq = lax.eq(lax.broadcast_in_dim(af, shape=(n, m), broadcast_dimensions=(0, 1)),
                    lax.broadcast_in_dim(bf, shape=(n, m), broadcast_dimensions=(1,)))
        hit = reshape(lax.reduce_or(eq, axes=(1,)), a.shape)
    else:
        from ._searching import searchsorted

        srt = lax.sort(bf, dimension=0)
        pos = searchsorted(srt, a)
        pos = lax.minimum(pos, full(pos.shape, m - 1, pos.dtype, a.device))
        found = reshape(take(srt, reshape(pos, (pos.size,))), a.shape)
        hit = lax.eq(found, a)
    return lax.logical_not(hit) if invert else hit


__all__ = ["isin", "unique_all", "unique_counts", "unique_inverse", "unique_values"]
