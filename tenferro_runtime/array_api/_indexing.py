"""Indexing: ``Tensor.__getitem__`` / ``__setitem__`` (NumPy semantics), take, nonzero.

A key is parsed into a plan: per-axis basic slices, then one gather over the
advanced (integer-array / mask) axes. Values are never written in place;
`setitem` returns the new tensor and `Tensor.__setitem__` rebinds it.
Out-of-range indices are checked on concrete (eager) index values only; the
gather primitive itself clamps.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import (
    ArgumentError,
    AxisError,
    DTypeError,
    ShapeError,
    TenferroIndexError,
)

from .. import lax
from ..tensor import Tensor
from ._creation import asarray
from ._helpers import (
    broadcast_shapes,
    broadcast_to,
    check_scalar_fits,
    check_tensor,
    convert,
    fresh,
    full,
    iota,
    is_scalar,
    normalize_axis,
    reshape,
)

_IDX = D.DEFAULT_INDEX
_ERR_KIND = (
    "only integers, slices (`:`), ellipsis (`...`), None (newaxis) and integer or boolean "
    "tensors are valid indices"
)


# ---- small helpers ---------------------------------------------------------
def _host(t: Tensor) -> np.ndarray | None:
    """The values of an eager tensor, None for abstract (traced) ones."""
    return t.numpy() if type(t) is Tensor and t._buf is not None else None


def _mask_fits(mask_shape: tuple[int, ...], axes_shape: tuple[int, ...]) -> bool:
    """Whether a boolean index of `mask_shape` may index axes of `axes_shape`: each of its
    sizes equals the axis' or is 0 (the Array API standard's rule, NumPy's too; a mask with a
    0 axis selects nothing, whatever the sizes it is matched against)."""
    return len(mask_shape) == len(axes_shape) and all(
        m in (n, 0) for m, n in zip(mask_shape, axes_shape))


def _mask_mismatch(mask_shape: tuple[int, ...], axes_shape: tuple[int, ...],
                   where: str) -> TenferroIndexError:
    return TenferroIndexError(
        f"boolean index of shape {mask_shape} does not match the indexed {where} of shape "
        f"{axes_shape}; each of its sizes must equal the axis' size or be 0"
    )


def _stack_last(ts: list[Tensor]) -> Tensor:
    """Stack same-shape tensors along a new trailing axis."""
    cols = [reshape(t, t.shape + (1,)) for t in ts]
    return cols[0] if len(cols) == 1 else lax.concatenate(*cols, dimension=len(ts[0].shape))


def _check_range(values: np.ndarray, n: int, where: str) -> bool:
    """Raise TenferroIndexError for values outside [-n, n); True if any is negative."""
    if values.size == 0:
        return False
    lo, hi = values.min(), values.max()
    if lo < -n or hi >= n:
        bad = lo if lo < -n else hi
        raise TenferroIndexError(
            f"index {bad} is out of bounds for {where} with size {n}; expected {-n} <= index < {n}"
        )
    return bool(lo < 0)


def normalize_indices(idx: Tensor, n: int, where: str) -> Tensor:
    """int64 indices with negatives wrapped; range-checked when the values are concrete."""
    if idx.dtype.kind not in "iu":
        raise DTypeError(f"{where}: index tensors must have an integer dtype, got {idx.dtype}")
    host = _host(idx)
    neg = _check_range(host, n, where) if host is not None else idx.dtype.kind == "i"
    idx = convert(idx, _IDX)
    if neg:
        wrapped = lax.add(idx, full(idx.shape, n, _IDX, idx.device))
        idx = lax.select(lax.lt(idx, full(idx.shape, 0, _IDX, idx.device)), wrapped, idx)
    return idx


def nonzero_coords(mask: Tensor) -> list[Tensor]:
    """Row-major coordinates of the True entries of a bool tensor (one host read: the count)."""
    dev, shape = mask.device, mask.shape
    size = math.prod(shape)
    flat = convert(reshape(mask, (size,)), _IDX)
    count = int(lax.reduce_sum(flat, axes=(0,))) if size else 0
    if count == 0:
        return [full((0,), 0, _IDX, dev) for _ in shape]
    csum = lax.cumsum(flat, axis=0)
    target = lax.select(
        reshape(mask, (size,)), lax.sub(csum, full((size,), 1, _IDX, dev)),
        full((size,), count, _IDX, dev),
    )
    pos = lax.scatter(full((count + 1,), 0, _IDX, dev), reshape(target, (size, 1)),
                      iota((size,), 0, dev), axes=(0,))
    pos = lax.slice(pos, start_indices=(0,), limit_indices=(count,))
    coords, stride = [], 1
    for j in range(len(shape) - 1, -1, -1):
        c = pos if stride == 1 else lax.div(pos, full((count,), stride, _IDX, dev))
        if j:
            c = lax.rem(c, full((count,), shape[j], _IDX, dev))
        coords.append(c)
        stride *= shape[j]
    return coords[::-1]


# ---- key parsing -------------------------------------------------------------
class _Adv:
    """One advanced index: int64 tensor `idx` on x axis `axis` (None: a 0-d mask, size only)."""

    __slots__ = ("axis", "idx", "shape")

    def __init__(self, axis, idx, shape):
        self.axis, self.idx, self.shape = axis, idx, shape


def _slice_int(v: Any, what: str) -> int | None:
    if v is None:
        return None
    try:
        return operator.index(v)
    except TypeError:
        raise TenferroIndexError(
            f"slice {what} must be an int or None, got {type(v).__name__}"
        ) from None


def _classify(k: Any, device: Any) -> tuple[str, Any]:
    """Kind and payload of one key entry: int, slice, none, ellipsis, array, mask."""
    if k is None:
        return "none", None
    if k is Ellipsis:
        return "ellipsis", None
    if isinstance(k, slice):
        step = _slice_int(k.step, "step")
        if step == 0:
            raise TenferroIndexError("slice step cannot be zero")
        return "slice", slice(_slice_int(k.start, "start"), _slice_int(k.stop, "stop"), step)
    if isinstance(k, (bool, np.bool_)):
        return "mask", full((), bool(k), D.bool_, device)
    if isinstance(k, Tensor):
        if k.dtype is D.bool_:
            return "mask", k
        if k.dtype.kind in "iu":
            return "array", k
        raise TenferroIndexError(f"{_ERR_KIND}; got a tensor of dtype {k.dtype}")
    if isinstance(k, (list, tuple, np.ndarray)):
        try:
            host = np.asarray(k)
        except ValueError:
            raise TenferroIndexError(f"{_ERR_KIND}; got a ragged sequence") from None
        if host.size == 0 and host.dtype.kind == "f":
            host = host.astype(np.int64)
        if host.dtype.kind == "b":
            return "mask", asarray(host, device=device)
        if host.dtype.kind not in "iu":
            raise TenferroIndexError(f"{_ERR_KIND}; got a sequence of dtype {host.dtype}")
        return "array", host
    try:
        return "int", operator.index(k)
    except TypeError:
        raise TenferroIndexError(f"{_ERR_KIND}; got {type(k).__name__}") from None


class _Plan:
    """What a key selects: basic slices per axis, then advanced indices, then layout."""

    def __init__(self, x: Tensor, key: Any):
        if not isinstance(key, tuple):
            key = (key,)
        entries = [_classify(k, x.device) for k in key]
        ndim, shape = x.ndim, x.shape
        n_ell = sum(kind == "ellipsis" for kind, _ in entries)
        if n_ell > 1:
            raise TenferroIndexError("an index can only have a single ellipsis ('...')")
        used = sum(p.ndim if kind == "mask" else kind in ("int", "slice", "array")
                   for kind, p in entries)
        if used > ndim:
            raise TenferroIndexError(
                f"too many indices: the tensor is {ndim}-dimensional, but {used} were indexed"
            )
        self.x, self.shape = x, shape
        self.advanced = any(kind in ("array", "mask") for kind, _ in entries)
        self.slices: list[tuple[int, int, int, bool] | None] = [None] * ndim
        self.int_axes: list[int] = []
        self.advs: list[_Adv] = []
        tokens: list[str] = []  # per output position: "S" (slice axis), "N" (new), "B" (advanced)
        adv_pos: list[int] = []
        axis = 0
        for pos, (kind, p) in enumerate(entries):
            if kind == "ellipsis":
                for _ in range(ndim - used):
                    self._slice(axis, slice(None))
                    tokens.append("S")
                    axis += 1
            elif kind == "none":
                tokens.append("N")
            elif kind == "slice":
                self._slice(axis, p)
                tokens.append("S")
                axis += 1
            else:
                adv_pos.append(pos)
                if not adv_pos[:-1] or adv_pos[-2] != pos - 1 or tokens[-1:] != ["B"]:
                    tokens.append("B")
                axis = self._advanced(kind, p, axis)
        for _ in range(axis, ndim):
            self._slice(axis, slice(None))
            tokens.append("S")
            axis += 1
        tokens = [t for t in tokens if self.advanced or t != "B"]
        if tokens.count("B") > 1:  # non-adjacent advanced indices go first (NumPy's rule)
            tokens = ["B"] + [t for t in tokens if t != "B"]
        self.tokens = tokens
        try:
            self.bshape = broadcast_shapes(*(a.shape for a in self.advs)) if self.advs else ()
        except ShapeError as exc:
            raise TenferroIndexError(f"index arrays cannot be broadcast together: {exc}") from None
        if self.advanced:
            self.advs = [a for a in self.advs if a.axis is not None]

    def _slice(self, axis: int, s: slice) -> None:
        n = self.shape[axis]
        start, stop, step = s.indices(n)
        m = len(range(start, stop, step))
        if m == 0:
            self.slices[axis] = (0, 0, 1, False)
        elif step > 0:
            self.slices[axis] = (start, start + (m - 1) * step + 1, step, False)
        else:
            last = start + (m - 1) * step
            self.slices[axis] = (last, start + 1, -step, True)

    def _advanced(self, kind: str, p: Any, axis: int) -> int:
        shape, dev = self.shape, self.x.device
        if kind == "int":
            n = shape[axis]
            if not -n <= p < n:
                raise TenferroIndexError(
                    f"index {p} is out of bounds for axis {axis} with size {n}; "
                    f"expected {-n} <= index < {n}"
                )
            if self.advanced:
                self.advs.append(_Adv(axis, full((), p % n, _IDX, dev), ()))
            else:
                self.slices[axis] = (p % n, p % n + 1, 1, False)
                self.int_axes.append(axis)
            return axis + 1
        if kind == "array":
            where = f"axis {axis}"
            if isinstance(p, np.ndarray):
                if _check_range(p, shape[axis], where):
                    p = p % shape[axis]
                idx = asarray(p.astype(np.int64), device=dev)
            else:
                idx = normalize_indices(p, shape[axis], where)
            self.advs.append(_Adv(axis, idx, idx.shape))
            return axis + 1
        k = p.ndim  # a bool mask over axes axis .. axis + k - 1
        if not _mask_fits(p.shape, shape[axis:axis + k]):
            raise _mask_mismatch(p.shape, shape[axis:axis + k], f"axes {axis}..{axis + k - 1}")
        if k == 0:
            self.advs.append(_Adv(None, None, (1,) if bool(p) else (0,)))
        for j, c in enumerate(nonzero_coords(p) if k else ()):
            self.advs.append(_Adv(axis + j, c, c.shape))
        return axis + k

    # -- shapes of the stages
    def box_shape(self) -> tuple[int, ...]:
        """Shape after the basic slices (int axes kept as size 1, advanced axes untouched)."""
        return tuple(n if s is None else -(-(s[1] - s[0]) // s[2])
                     for n, s in zip(self.shape, self.slices))

    def _rest(self) -> list[int]:
        box = self.box_shape()
        adv_axes = {a.axis for a in self.advs}
        return [box[i] for i in range(len(box)) if i not in adv_axes and i not in self.int_axes]

    def gathered_shape(self) -> tuple[int, ...]:
        return tuple(self.bshape) + tuple(self._rest()) if self.advanced else tuple(self._rest())

    def layout(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(permutation from gathered to output order without new axes, the output shape)."""
        nb, rest = len(self.bshape), self._rest()
        perm, out, r = [], [], 0
        for t in self.tokens:
            if t == "B":
                perm.extend(range(nb))
                out.extend(self.bshape)
            elif t == "S":
                perm.append(nb + r if self.advanced else r)
                out.append(rest[r])
                r += 1
            else:
                out.append(1)
        return tuple(perm), tuple(out)


# ---- getitem -----------------------------------------------------------------
def _apply_slices(x: Tensor, slices: list) -> Tensor:
    rev = tuple(i for i, s in enumerate(slices) if s is not None and s[3])
    if rev:
        x = lax.reverse(x, dimensions=rev)
    if all(s is None or s[:3] == (0, n, 1) for s, n in zip(slices, x.shape)):
        return x
    starts, limits, strides = [], [], []
    for n, s in zip(x.shape, slices):
        lo, hi, st, r = s if s is not None else (0, n, 1, False)
        if r:
            lo, hi = n - hi, n - lo
        starts.append(lo)
        limits.append(hi)
        strides.append(st)
    return lax.slice(x, start_indices=tuple(starts), limit_indices=tuple(limits),
                     strides=tuple(strides))


def _broadcast_indices(plan: _Plan) -> Tensor:
    return _stack_last([broadcast_to(a.idx, plan.bshape) for a in plan.advs])


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` with NumPy semantics (basic, integer-array and boolean-mask indexing)."""
    check_tensor("__getitem__", x)
    plan = _Plan(x, key)
    y = _apply_slices(x, plan.slices)
    if plan.advanced:
        if plan.advs:
            y = lax.gather(y, _broadcast_indices(plan), axes=tuple(a.axis for a in plan.advs))
        else:  # only 0-d masks: a new axis of size 1 or 0
            nb = len(plan.bshape)
            y = lax.broadcast_in_dim(y, shape=tuple(plan.bshape) + y.shape,
                                     broadcast_dimensions=tuple(range(nb, nb + y.ndim)))
    perm, out = plan.layout()
    if perm != tuple(range(len(perm))):
        y = lax.transpose(reshape(y, plan.gathered_shape()), permutation=perm)
    return fresh(reshape(y, out))


# ---- setitem -----------------------------------------------------------------
def _value_tensor(x: Tensor, value: Any) -> Tensor:
    """`value` as a tensor of x's dtype; DTypeError when that needs more than promotion."""
    if isinstance(value, Tensor):
        try:
            ok = D.promote_types(x.dtype, value.dtype) is x.dtype
        except DTypeError:
            ok = False
        if not ok:
            raise DTypeError(
                f"__setitem__: cannot store {value.dtype} values in a {x.dtype} tensor without "
                f"changing its dtype; cast the value with astype(value, {x.dtype}) first"
            )
        return convert(value, x.dtype)
    if is_scalar(value):
        if D.promote_scalar(x.dtype, value) is not x.dtype:
            raise DTypeError(
                f"__setitem__: cannot store a Python {type(value).__name__} in a {x.dtype} "
                f"tensor; in-place assignment keeps the tensor's dtype"
            )
        check_scalar_fits("__setitem__", value, x.dtype)
        return full((), value, x.dtype, x.device)
    if isinstance(value, (list, tuple, np.ndarray, np.generic)):
        if isinstance(value, (list, tuple)):
            return asarray(value, dtype=x.dtype, device=x.device)
        return _value_tensor(x, asarray(np.asarray(value), device=x.device))
    raise ArgumentError(
        f"__setitem__: value must be a Tensor or a Python scalar, got {type(value).__name__}"
    )


def _fit_value(v: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Broadcast v to the indexed shape (extra leading size-1 axes allowed, as in NumPy)."""
    while v.ndim > len(shape) and v.shape[0] == 1:
        v = reshape(v, v.shape[1:])
    try:
        return broadcast_to(v, shape)
    except ShapeError:
        raise ShapeError(
            f"__setitem__: value of shape {v.shape} cannot be broadcast to the indexed shape {shape}"
        ) from None


def _write_box(x: Tensor, slices: list, box: Tensor) -> Tensor:
    """x with the strided box selected by `slices` replaced by `box` (no scatter)."""
    if any(n == 0 for n in box.shape):
        return x
    rev = tuple(i for i, s in enumerate(slices) if s is not None and s[3])
    if rev:
        box = lax.reverse(box, dimensions=rev)
    spans = [(0, n, 1) if s is None else s[:3] for s, n in zip(slices, x.shape)]
    if all(sp == (0, n, 1) for sp, n in zip(spans, x.shape)):
        return fresh(box)
    dev = x.device
    if all(st == 1 for _, _, st in spans):
        starts = [full((), lo, _IDX, dev) for lo, _, _ in spans]
        return lax.dynamic_update_slice(x, box, *starts)
    config = tuple((lo, n - (lo + (k - 1) * st + 1), st - 1)
                   for (lo, _, st), n, k in zip(spans, x.shape, box.shape))
    padded = lax.pad(box, full((), 0, x.dtype, dev), padding_config=config)
    mask = lax.pad(full(box.shape, True, D.bool_, dev), full((), False, D.bool_, dev),
                   padding_config=config)
    return lax.select(mask, padded, x)


def _mask_select(x: Tensor, key: Any, value: Tensor) -> Tensor | None:
    """``x[mask] = v`` as one select when v does not vary along the selected entries."""
    if isinstance(key, tuple):
        if len(key) == 2 and key[1] is Ellipsis:
            key = key[0]
        elif len(key) == 1:
            key = key[0]
        else:
            return None
    if not (isinstance(key, Tensor) and key.dtype is D.bool_ and 0 < key.ndim <= x.ndim):
        return None
    k = key.ndim
    if key.shape != x.shape[:k]:
        if _mask_fits(key.shape, x.shape[:k]):
            return None  # a 0 axis: the mask selects nothing, the general path knows
        raise _mask_mismatch(key.shape, x.shape[:k], "axes")
    v = value
    while v.ndim > x.ndim - k and v.shape[0] == 1:
        v = reshape(v, v.shape[1:])
    if v.ndim > x.ndim - k:
        return None
    v = _fit_value(v, x.shape[k:])
    v = lax.broadcast_in_dim(v, shape=x.shape, broadcast_dimensions=tuple(range(k, x.ndim)))
    m = lax.broadcast_in_dim(key, shape=x.shape, broadcast_dimensions=tuple(range(k)))
    return lax.select(m, v, x)


def setitem(x: Tensor, key: Any, value: Any) -> Tensor:
    """The tensor ``x`` with ``x[key] = value`` applied (x itself is not changed)."""
    check_tensor("__setitem__", x)
    v = _value_tensor(x, value)
    fast = _mask_select(x, key, v)
    if fast is not None:
        return fast
    plan = _Plan(x, key)
    perm, out = plan.layout()
    v = _fit_value(v, out)
    if math.prod(out) == 0:
        return x
    v = reshape(v, tuple(n for n, t in zip(out, _expand(plan.tokens, plan.bshape)) if t != "N"))
    if perm != tuple(range(len(perm))):
        v = lax.transpose(v, permutation=tuple(np.argsort(perm).tolist()))
    if not plan.advanced:
        return _write_box(x, plan.slices, reshape(v, plan.box_shape()))
    y = _apply_slices(x, plan.slices)
    if plan.advs:
        y = lax.scatter(y, _broadcast_indices(plan), v, axes=tuple(a.axis for a in plan.advs))
    else:
        y = reshape(v, y.shape)
    return _write_box(x, plan.slices, y)


def _expand(tokens: list[str], bshape: tuple[int, ...]) -> list[str]:
    out = []
    for t in tokens:
        out.extend(["B"] * len(bshape) if t == "B" else [t])
    return out


# ---- functions of the namespace ----------------------------------------------
def _int_indices(name: str, indices: Any) -> Tensor:
    check_tensor(name, indices, "indices")
    if indices.dtype.kind not in "iu":
        raise DTypeError(f"{name}: indices must have an integer dtype, got {indices.dtype}")
    return indices


def take(x: Tensor, indices: Tensor, /, *, axis: int | None = None) -> Tensor:
    """Elements of x at `indices` along `axis` (axis may be omitted only for 1-d x)."""
    check_tensor("take", x)
    _int_indices("take", indices)
    if axis is None:
        if x.ndim != 1:
            raise ArgumentError(f"take: axis is required for a {x.ndim}-d tensor")
        axis = 0
    if x.ndim == 0:
        raise AxisError("take: x must have at least one axis, got a 0-d tensor")
    axis = normalize_axis("take", axis, x.ndim)
    return gather_axis(x, normalize_indices(indices, x.shape[axis], f"axis {axis}"), axis)


def gather_axis(x: Tensor, idx: Tensor, axis: int) -> Tensor:
    """``take`` without checks: idx holds valid non-negative int64 indices."""
    y = lax.gather(x, reshape(idx, idx.shape + (1,)), axes=(axis,))
    k = idx.ndim
    perm = tuple(range(k, k + axis)) + tuple(range(k)) + tuple(range(k + axis, y.ndim))
    return y if perm == tuple(range(y.ndim)) else lax.transpose(y, permutation=perm)


def take_along_axis(x: Tensor, indices: Tensor, /, *, axis: int = -1) -> Tensor:
    """Elements of x at per-position `indices` along `axis` (other axes broadcast)."""
    check_tensor("take_along_axis", x)
    _int_indices("take_along_axis", indices)
    if indices.ndim != x.ndim:
        raise ShapeError(
            f"take_along_axis: indices must have the rank of x ({x.ndim}), got shape {indices.shape}"
        )
    axis = normalize_axis("take_along_axis", axis, x.ndim)
    others = broadcast_shapes(
        *(s[:axis] + (1,) + s[axis + 1:] for s in (x.shape, indices.shape))
    )
    xb = broadcast_to(x, others[:axis] + (x.shape[axis],) + others[axis + 1:])
    out = others[:axis] + (indices.shape[axis],) + others[axis + 1:]
    idx = broadcast_to(normalize_indices(indices, x.shape[axis], f"axis {axis}"), out)
    if math.prod(out) == 0:
        return full(out, 0, x.dtype, x.device)
    coords = [idx if d == axis else iota(out, d, x.device) for d in range(x.ndim)]
    return lax.gather(xb, _stack_last(coords), axes=tuple(range(x.ndim)))


def nonzero(x: Tensor, /) -> tuple[Tensor, ...]:
    """Indices of the non-zero elements, one int64 tensor per axis (row-major order)."""
    check_tensor("nonzero", x)
    if x.ndim == 0:
        raise ShapeError("nonzero: x must have at least one axis, got a 0-d tensor")
    mask = x if x.dtype is D.bool_ else lax.ne(x, full(x.shape, 0, x.dtype, x.device))
    return tuple(nonzero_coords(mask))


__all__ = ["take", "take_along_axis", "nonzero"]
