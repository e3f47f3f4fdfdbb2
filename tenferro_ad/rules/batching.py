"""Batch rules of the core primitives: ``rule(args, dims, **params) -> (out, out_dims)``.

Most move the batch axis of every operand to the front (broadcasting unbatched operands
where the op needs equal shapes) and shift the op's axis params by one. Indexing ops whose
indices are batched add a batch column to the indices (gather/scatter), and dynamic slices
with batched starts become gathers/scatters of the window's index grid.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_core import catalog
from tenferro_core.avals import Aval
from tenferro_core.dtypes import DEFAULT_INDEX, bool_
from tenferro_runtime import lax

from ..batching import batch_size, moveaxis, to_front


def elementwise(prim: Any) -> Any:
    """Operands of one shape: batched ones moved to one axis, unbatched ones broadcast."""
    def rule(args: tuple, dims: tuple, **params: Any) -> tuple:
        batched = {d for d in dims if d is not None}
        if len(batched) == 1 and None not in dims:
            return prim.bind(*args, **params), dims[0]
        size = batch_size(args, dims)
        return prim.bind(*[to_front(x, d, size) for x, d in zip(args, dims)], **params), 0

    return rule


def _front(x: Any, d: int | None) -> Any:
    return moveaxis(x, d, 0)


def _shift(axes: tuple) -> tuple:
    return tuple(a + 1 for a in axes)


def axes_rule(prim: Any, key: str, many: bool = True) -> Any:
    """For ops of one operand with axis params: the batch axis moves to the front and the
    param `key` (a tuple of axes, or with `many=False` one axis) shifts by one."""
    def rule(args: tuple, dims: tuple, **params: Any) -> tuple:
        v = params[key]
        params[key] = _shift(v) if many else v + 1
        return prim.bind(_front(args[0], dims[0]), **params), (
            (0,) * len(prim.abstract_eval((args[0].aval,), params)) if prim.multiple_results else 0)

    return rule


def leading_batch(prim: Any) -> Any:
    """For ops that take leading batch dimensions, equal on every operand (linalg's
    ``(..., M, N)``): every operand's batch axis first (shared operands broadcast), every
    result batched on axis 0."""
    def rule(args: tuple, dims: tuple, **params: Any) -> tuple:
        size = batch_size(args, dims)
        out = prim.bind(*[to_front(x, d, size) for x, d in zip(args, dims)], **params)
        return out, ((0,) * len(out) if prim.multiple_results else 0)

    return rule


def _reshape(args, dims, *, new_sizes):
    x = _front(args[0], dims[0])
    return lax.reshape(x, new_sizes=(x.shape[0],) + new_sizes), 0


def _transpose(args, dims, *, permutation):
    return lax.transpose(_front(args[0], dims[0]), permutation=(0,) + _shift(permutation)), 0


def _broadcast_in_dim(args, dims, *, shape, broadcast_dimensions):
    x = _front(args[0], dims[0])
    return lax.broadcast_in_dim(x, shape=(x.shape[0],) + shape,
                                broadcast_dimensions=(0,) + _shift(broadcast_dimensions)), 0


def _slice(args, dims, *, start_indices, limit_indices, strides):
    x = _front(args[0], dims[0])
    return lax.slice(x, start_indices=(0,) + start_indices,
                     limit_indices=(x.shape[0],) + limit_indices, strides=(1,) + strides), 0


def _zero_index(like: Any, device: Any) -> Any:
    dtype = like.dtype if like is not None else DEFAULT_INDEX
    return lax.full(shape=(), fill_value=0, dtype=dtype, device=device)


def _window_indices(x_shape: tuple, starts: list, sdims: list, sizes: tuple, size: int) -> Any:
    """Indices (size, *sizes, 1 + rank) of every element of each example's window: the batch
    index, then each axis' start (clamped so the window fits, as dynamic_slice does) plus
    its offset in the window."""
    device = starts[0].device
    dtype = DEFAULT_INDEX  # the starts may have different integer dtypes
    shape = (size,) + tuple(sizes)
    cols = [lax.iota(dtype=dtype, shape=shape + (1,), dimension=0, device=device)]
    for ax, (s, d, k) in enumerate(zip(starts, sdims, sizes)):
        # clamped in the start's own dtype, then widened: a uint64 start of 2**64 - 1 would
        # wrap to -1 in int64 and clamp to 0 instead of the last window
        s = to_front(s, d, size)  # (size,)
        top = min(x_shape[ax] - k, int(np.iinfo(s.dtype.numpy).max))
        hi = lax.full(shape=(size,), fill_value=top, dtype=s.dtype, device=device)
        lo = lax.full(shape=(size,), fill_value=0, dtype=s.dtype, device=device)
        s = lax.convert(lax.clamp(lo, s, hi), new_dtype=dtype)
        s = lax.broadcast_in_dim(s, shape=shape + (1,), broadcast_dimensions=(0,))
        off = lax.iota(dtype=dtype, shape=shape + (1,), dimension=ax + 1, device=device)
        cols.append(lax.add(s, off))
    return lax.concatenate(*cols, dimension=len(shape))


def _dynamic_slice(args, dims, *, slice_sizes):
    x, starts = args[0], list(args[1:])
    if all(d is None for d in dims[1:]):
        x = _front(x, dims[0])
        zero = _zero_index(starts[0] if starts else None, x.device)
        return lax.dynamic_slice(x, zero, *starts, slice_sizes=(x.shape[0],) + slice_sizes), 0
    size = batch_size(args, dims)
    x = to_front(x, dims[0], size)
    idx = _window_indices(x.shape[1:], starts, list(dims[1:]), slice_sizes, size)
    return lax.gather(x, idx, axes=tuple(range(x.ndim))), 0


def _dynamic_update_slice(args, dims):
    x, update, starts = args[0], args[1], list(args[2:])
    size = batch_size(args, dims)
    x = to_front(x, dims[0], size)
    update = to_front(update, dims[1], size)
    if all(d is None for d in dims[2:]):
        zero = _zero_index(starts[0] if starts else None, x.device)
        return lax.dynamic_update_slice(x, update, zero, *starts), 0
    idx = _window_indices(x.shape[1:], starts, list(dims[2:]), update.shape[1:], size)
    return lax.scatter(x, idx, update, axes=tuple(range(x.ndim))), 0


def _pad(args, dims, *, padding_config):
    x, value = args
    config = ((0, 0, 0),) + padding_config
    if dims[1] is None:
        return lax.pad(_front(x, dims[0]), value, padding_config=config), 0
    size = batch_size(args, dims)
    x = to_front(x, dims[0], size)
    zero = lax.full(shape=(), fill_value=0, dtype=x.dtype, device=x.device)
    padded = lax.pad(x, zero, padding_config=config)
    inside = lax.full(shape=x.shape, fill_value=True, dtype=bool_, device=x.device)
    outside = lax.full(shape=(), fill_value=False, dtype=bool_, device=x.device)
    mask = lax.pad(inside, outside, padding_config=config)
    fill = lax.broadcast_in_dim(to_front(value, dims[1], size), shape=padded.shape,
                                broadcast_dimensions=(0,))
    return lax.select(mask, padded, fill), 0


def _concatenate(args, dims, *, dimension):
    size = batch_size(args, dims)
    xs = [to_front(x, d, size) for x, d in zip(args, dims)]
    return lax.concatenate(*xs, dimension=dimension + 1), 0


def _with_batch_column(idx: Any, d: int | None, size: int) -> Any:
    """Indices (size, ..., 1 + k): each example's indices with its batch index first."""
    idx = to_front(idx, d, size)
    col = lax.iota(dtype=idx.dtype, shape=idx.shape[:-1] + (1,), dimension=0, device=idx.device)
    return lax.concatenate(col, idx, dimension=idx.ndim - 1)


def _gather(args, dims, *, axes):
    x, idx = args
    if dims[1] is None:
        return lax.gather(_front(x, dims[0]), idx, axes=_shift(axes)), idx.ndim - 1
    if dims[0] is None:
        return lax.gather(x, _front(idx, dims[1]), axes=axes), 0
    size = batch_size(args, dims)
    idx = _with_batch_column(idx, dims[1], size)
    return lax.gather(_front(x, dims[0]), idx, axes=(0,) + _shift(axes)), 0


def _scatter(prim: Any) -> Any:
    def rule(args, dims, *, axes):
        x, idx, upd = args
        size = batch_size(args, dims)
        x = to_front(x, dims[0], size)
        idx = _with_batch_column(idx, dims[1], size)
        return prim.bind(x, idx, to_front(upd, dims[2], size), axes=(0,) + _shift(axes)), 0

    return rule


def _never(prim: Any) -> Any:
    """Ops without operands are never batched (no operand can carry a batch axis)."""
    def rule(args, dims, **params):
        return prim.bind(**params), None

    return rule


def _dot_general(args, dims, *, contracting_dims, batch_dims):
    lhs, rhs = args
    (lc, rc), (lb, rb) = contracting_dims, batch_dims
    ld, rd = dims
    if ld is not None and rd is not None:
        lhs, rhs = _front(lhs, ld), _front(rhs, rd)
        return lax.dot_general(lhs, rhs, contracting_dims=(_shift(lc), _shift(rc)),
                               batch_dims=((0,) + _shift(lb), (0,) + _shift(rb))), 0
    if ld is not None:  # the batch axis is lhs's first free axis
        lhs = _front(lhs, ld)
        out = lax.dot_general(lhs, rhs, contracting_dims=(_shift(lc), rc),
                              batch_dims=(_shift(lb), rb))
        return out, len(lb)
    rhs = _front(rhs, rd)  # rhs's first free axis, after the batch and lhs free axes
    out = lax.dot_general(lhs, rhs, contracting_dims=(lc, _shift(rc)), batch_dims=(lb, _shift(rb)))
    return out, lhs.ndim - len(lc)


def _conv_general(args, dims, **params):
    """lhs batched only: the batch folds into N. Otherwise (rhs batched) both are made batched
    and the batch folds into the feature groups: lhs channels (B, C), rhs outputs (B, O)."""
    lhs, rhs = args
    last = params["layout"] == "channels_last"
    if dims[1] is None:
        lhs = _front(lhs, dims[0])
        b, n = lhs.shape[:2]
        out = lax.conv_general(lax.reshape(lhs, new_sizes=(b * n,) + lhs.shape[2:]), rhs, **params)
        return lax.reshape(out, new_sizes=(b, n) + out.shape[1:]), 0
    size = batch_size(args, dims)
    lhs, rhs = to_front(lhs, dims[0], size), to_front(rhs, dims[1], size)
    if size == 0:  # no feature groups to fold into: an empty result of the example's shape
        per = [Aval(x.shape[1:], x.dtype, x.device) for x in (lhs, rhs)]
        (aval,) = catalog.conv_general.abstract_eval(per, params)
        return lax.full(shape=(0,) + aval.shape, fill_value=0, dtype=aval.dtype,
                        device=aval.device), 0
    b, n = lhs.shape[:2]
    if last:  # (B, N, *sp, C) -> (N, *sp, B * C)
        lhs = moveaxis(lhs, 0, lhs.ndim - 2)
        lhs = lax.reshape(lhs, new_sizes=lhs.shape[:-2] + (b * lhs.shape[-1],))
    else:  # (B, N, C, *sp) -> (N, B * C, *sp)
        lhs = moveaxis(lhs, 0, 1)
        lhs = lax.reshape(lhs, new_sizes=(n, b * lhs.shape[2]) + lhs.shape[3:])
    o = rhs.shape[1]
    rhs = lax.reshape(rhs, new_sizes=(b * o,) + rhs.shape[2:])
    params["feature_group_count"] = params["feature_group_count"] * b
    out = lax.conv_general(lhs, rhs, **params)
    if last:  # (N, *out, B * O) -> (N, *out, B, O)
        out = lax.reshape(out, new_sizes=out.shape[:-1] + (b, o))
        return out, out.ndim - 2
    out = lax.reshape(out, new_sizes=(n, b, o) + out.shape[2:])
    return out, 1


def _table() -> dict:
    c = catalog
    table: dict[str, Any] = {}
    for p in c.PRIMITIVES:
        if p.category == "elementwise" and p.nin:
            table[p.name] = elementwise(p)
    for p in (c.iota, c.full):
        table[p.name] = _never(p)
    table["copy"] = elementwise(c.copy)
    for p in (c.reduce_sum, c.reduce_prod, c.reduce_max, c.reduce_min, c.reduce_and,
              c.reduce_or, c.reverse):
        table[p.name] = axes_rule(p, "dimensions" if p is c.reverse else "axes")
    for p in (c.argmax, c.argmin, c.cumsum):
        table[p.name] = axes_rule(p, "axis", many=False)
    for p in (c.sort, c.argsort):
        table[p.name] = axes_rule(p, "dimension", many=False)
    table.update(
        reshape=_reshape, transpose=_transpose, broadcast_in_dim=_broadcast_in_dim, slice=_slice,
        dynamic_slice=_dynamic_slice, dynamic_update_slice=_dynamic_update_slice, pad=_pad,
        concatenate=_concatenate, gather=_gather, scatter=_scatter(c.scatter),
        scatter_add=_scatter(c.scatter_add), dot_general=_dot_general,
        conv_general=_conv_general,
    )
    return table


BATCH = _table()

__all__ = ["BATCH", "axes_rule", "elementwise", "leading_batch"]
