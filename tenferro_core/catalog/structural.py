"""Structural primitives: layout, dtype conversion, slicing, indexing, creation."""

from __future__ import annotations

import math

from ..dtypes import DEFAULT_INDEX
from ..errors import DTypeError, ShapeError
from ..params import (
    p_any,
    p_dtype,
    p_int_pairs,
    p_ints,
    p_nonneg_int,
    p_optional,
    p_scalar,
    p_shape,
)
from ..primitive import REQUIRED, Primitive
from ._rules import check_axes, check_kinds, check_scalar_int, same_dtypes


def _reshape(x, *, new_sizes):
    if math.prod(new_sizes) != x.size:
        raise ShapeError(
            f"reshape: cannot reshape an array of shape {x.shape} (size {x.size}) into "
            f"shape {new_sizes} (size {math.prod(new_sizes)}); the sizes must match"
        )
    return new_sizes, x.dtype

reshape = Primitive("reshape", _reshape, params={"new_sizes": (p_shape, REQUIRED)}, linear=(0,))

def _transpose(x, *, permutation):
    if sorted(permutation) != list(range(x.ndim)):
        raise ShapeError(
            f"transpose: permutation must be a reordering of 0..{x.ndim - 1} for an operand "
            f"of rank {x.ndim}, got {permutation}"
        )
    return tuple(x.shape[p] for p in permutation), x.dtype

transpose = Primitive(
    "transpose", _transpose, params={"permutation": (p_ints, REQUIRED)}, linear=(0,)
)

def _broadcast_in_dim(x, *, shape, broadcast_dimensions):
    bd = broadcast_dimensions
    if len(bd) != x.ndim:
        raise ShapeError(
            f"broadcast_in_dim: broadcast_dimensions needs one entry per operand axis "
            f"({x.ndim}), got {bd}"
        )
    check_axes("broadcast_in_dim", bd, len(shape), "broadcast_dimensions")
    if list(bd) != sorted(bd):
        raise ShapeError(f"broadcast_in_dim: broadcast_dimensions must increase, got {bd}")
    for i, d in enumerate(bd):
        if x.shape[i] not in (1, shape[d]):
            raise ShapeError(
                f"broadcast_in_dim: operand axis {i} has size {x.shape[i]}, which cannot "
                f"broadcast to size {shape[d]} of output axis {d}; sizes must be equal or 1"
            )
    return shape, x.dtype

broadcast_in_dim = Primitive(
    "broadcast_in_dim",
    _broadcast_in_dim,
    params={"shape": (p_shape, REQUIRED), "broadcast_dimensions": (p_ints, REQUIRED)},
    linear=(0,),
)

def _convert(x, *, new_dtype):
    return x.shape, new_dtype

convert = Primitive("convert", _convert, params={"new_dtype": (p_dtype, REQUIRED)}, linear=(0,))

def _bitcast(x, *, new_dtype):
    if new_dtype.bits != x.dtype.bits or "b" in (x.dtype.kind, new_dtype.kind):
        raise DTypeError(
            f"bitcast_convert: expected a non-bool dtype of the same width as {x.dtype} "
            f"({x.dtype.bits} bits), got {new_dtype}"
        )
    return x.shape, new_dtype

bitcast_convert = Primitive(
    "bitcast_convert", _bitcast, params={"new_dtype": (p_dtype, REQUIRED)}, differentiable=False
)

def _slice(x, *, start_indices, limit_indices, strides):
    if not len(start_indices) == len(limit_indices) == len(strides) == x.ndim:
        raise ShapeError(
            f"slice: start_indices, limit_indices and strides need {x.ndim} entries each "
            f"(the operand's rank), got {start_indices}, {limit_indices}, {strides}"
        )
    out = []
    for ax, (s, e, st, n) in enumerate(zip(start_indices, limit_indices, strides, x.shape)):
        if not 0 <= s <= e <= n or st < 1:
            raise ShapeError(
                f"slice: axis {ax} of size {n} needs 0 <= start <= limit <= {n} and stride >= 1, "
                f"got start={s}, limit={e}, stride={st}"
            )
        out.append(-(-(e - s) // st))
    return tuple(out), x.dtype

def _resolve_slice(avals, params):
    """strides=None: unit strides, one per operand axis."""
    if params["strides"] is None:
        params["strides"] = (1,) * avals[0].ndim
    return params

slice = Primitive(
    "slice",
    _slice,
    params={
        "start_indices": (p_ints, REQUIRED),
        "limit_indices": (p_ints, REQUIRED),
        "strides": (p_optional(p_ints), None),
    },
    resolve=_resolve_slice,
    linear=(0,),
)

def _dynamic_slice(x, *starts, slice_sizes):
    if len(starts) != x.ndim or len(slice_sizes) != x.ndim:
        raise ShapeError(
            f"dynamic_slice: needs {x.ndim} start indices and slice sizes (the operand's rank), "
            f"got {len(starts)} and {slice_sizes}"
        )
    for s in starts:
        check_scalar_int("dynamic_slice", s, "each start index")
    for ax, (k, n) in enumerate(zip(slice_sizes, x.shape)):
        if k > n:
            raise ShapeError(f"dynamic_slice: slice size {k} exceeds axis {ax} of size {n}")
    return slice_sizes, x.dtype

dynamic_slice = Primitive(
    "dynamic_slice",
    _dynamic_slice,
    nin=None,
    params={"slice_sizes": (p_shape, REQUIRED)},
    linear=(0,),
)

def _dynamic_update_slice(x, update, *starts):
    same_dtypes("dynamic_update_slice", (x, update))
    if update.ndim != x.ndim or len(starts) != x.ndim:
        raise ShapeError(
            f"dynamic_update_slice: update rank and number of start indices must equal the "
            f"operand rank {x.ndim}, got update {update.shape} and {len(starts)} start indices"
        )
    for s in starts:
        check_scalar_int("dynamic_update_slice", s, "each start index")
    if any(u > n for u, n in zip(update.shape, x.shape)):
        raise ShapeError(
            f"dynamic_update_slice: update shape {update.shape} does not fit in operand {x.shape}"
        )
    return x.shape, x.dtype

dynamic_update_slice = Primitive(
    "dynamic_update_slice", _dynamic_update_slice, nin=None, linear=(0, 1)
)

def _pad(x, padding_value, *, padding_config):
    same_dtypes("pad", (x, padding_value))
    if padding_value.shape != ():
        raise ShapeError(f"pad: padding_value must be 0-d, got shape {padding_value.shape}")
    if len(padding_config) != x.ndim or any(len(c) != 3 for c in padding_config):
        raise ShapeError(
            f"pad: padding_config needs one (low, high, interior) triple per axis "
            f"({x.ndim}), got {padding_config}"
        )
    out = []
    for ax, ((lo, hi, interior), n) in enumerate(zip(padding_config, x.shape)):
        size = lo + hi + n + max(n - 1, 0) * interior
        if interior < 0 or size < 0:
            raise ShapeError(
                f"pad: axis {ax} of size {n} with (low, high, interior) = {(lo, hi, interior)} "
                f"gives size {size}; interior must be >= 0 and the result non-negative"
            )
        out.append(size)
    return tuple(out), x.dtype

pad = Primitive(
    "pad", _pad, nin=2, params={"padding_config": (p_int_pairs, REQUIRED)}, linear=(0, 1)
)

def _concatenate(*xs, dimension):
    if not xs:
        raise ShapeError("concatenate: needs at least one operand, got none")
    dtype = same_dtypes("concatenate", xs)
    nd = xs[0].ndim
    check_axes("concatenate", (dimension,), nd, "dimension")
    for x in xs:
        if x.ndim != nd or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if i != dimension
        ):
            raise ShapeError(
                f"concatenate: operands must match except along axis {dimension}, got shapes "
                f"{', '.join(str(y.shape) for y in xs)}"
            )
    shape = list(xs[0].shape)
    shape[dimension] = sum(x.shape[dimension] for x in xs)
    return tuple(shape), dtype

concatenate = Primitive(
    "concatenate",
    _concatenate,
    nin=None,
    params={"dimension": (p_nonneg_int, REQUIRED)},
    linear="all",
)

def _reverse(x, *, dimensions):
    check_axes("reverse", dimensions, x.ndim, "dimensions")
    return x.shape, x.dtype

reverse = Primitive("reverse", _reverse, params={"dimensions": (p_ints, REQUIRED)}, linear=(0,))

def _gather_shape(prim, x, indices, axes):
    check_kinds(prim, indices, "iu", "indices")
    if indices.ndim < 1 or indices.shape[-1] != len(axes):
        raise ShapeError(
            f"{prim}: indices must have shape (..., {len(axes)}) for axes {axes}, "
            f"got {indices.shape}"
        )
    check_axes(prim, axes, x.ndim)
    rest = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    return indices.shape[:-1] + rest

def _gather(x, indices, *, axes):
    shape = _gather_shape("gather", x, indices, axes)
    if math.prod(shape) and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"gather: cannot take elements along a zero-length axis of shape {x.shape}")
    return shape, x.dtype

gather = Primitive("gather", _gather, nin=2, params={"axes": (p_ints, REQUIRED)}, linear=(0,))

def _scatter_rule(prim):
    def rule(x, indices, updates, *, axes):
        shape = _gather_shape(prim, x, indices, axes)
        same_dtypes(prim, (x, updates))
        if updates.shape != shape:
            raise ShapeError(
                f"{prim}: updates must have shape {shape} (index batch + remaining operand axes), "
                f"got {updates.shape}"
            )
        return x.shape, x.dtype

    return rule

scatter = Primitive("scatter", _scatter_rule("scatter"), nin=3, params={"axes": (p_ints, REQUIRED)})
scatter_add = Primitive(
    "scatter_add",
    _scatter_rule("scatter_add"),
    nin=3,
    params={"axes": (p_ints, REQUIRED)},
    linear=(0, 2),
)

def _iota(*, dtype, shape, dimension, device):
    check_axes("iota", (dimension,), len(shape), "dimension")
    if dtype.kind == "b":
        raise DTypeError("iota: expected a numeric dtype, got bool")
    return shape, dtype

iota = Primitive(
    "iota",
    _iota,
    nin=0,
    params={
        "dtype": (p_dtype, DEFAULT_INDEX),
        "shape": (p_shape, REQUIRED),
        "dimension": (p_nonneg_int, 0),
        "device": (p_any, REQUIRED),
    },
    differentiable=False,
)

def _full(*, shape, fill_value, dtype, device):
    return shape, dtype

full = Primitive(
    "full",
    _full,
    nin=0,
    params={
        "shape": (p_shape, REQUIRED),
        "fill_value": (p_scalar, REQUIRED),
        "dtype": (p_dtype, REQUIRED),
        "device": (p_any, REQUIRED),
    },
    differentiable=False,
    exact_params=("fill_value",),
)

def _copy(x):
    return x.shape, x.dtype

copy = Primitive("copy", _copy, linear=(0,), doc="A fresh buffer with the operand's values.")

PRIMITIVES = (
    reshape, transpose, broadcast_in_dim, convert, bitcast_convert, slice, dynamic_slice,
    dynamic_update_slice, pad, concatenate, reverse, gather, scatter, scatter_add, iota, full,
    copy,
)

__all__ = [p.name for p in PRIMITIVES]
