"""Manipulation functions of the Array API, composed from core structural primitives."""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

from .. import lax
from ..tensor import Tensor
from ._args import as_ints, as_shape, check_size
from ._helpers import broadcast_shapes as _broadcast_shapes
from ._helpers import broadcast_to as _broadcast_to
from ._helpers import (
    check_tensor,
    fresh,
    full,
    normalize_axes,
    normalize_axis,
    promote,
)
from ._helpers import reshape as _reshape
from ._indexing import gather_axis


def _tensors(name: str, arrays: Any) -> list[Tensor]:
    if isinstance(arrays, Tensor) or not isinstance(arrays, (tuple, list)):
        raise ArgumentError(
            f"{name}: expected a tuple or list of tensors, got {type(arrays).__name__}"
        )
    if not arrays:
        raise ShapeError(f"{name}: needs at least one tensor, got an empty sequence")
    for i, a in enumerate(arrays):
        check_tensor(name, a, f"arrays[{i}]")
    return promote(name, *arrays)


def _transpose(x: Tensor, perm: Sequence[int]) -> Tensor:
    perm = tuple(perm)
    return x if perm == tuple(range(x.ndim)) else lax.transpose(x, permutation=perm)


# ---- broadcasting ------------------------------------------------------------
def broadcast_arrays(*arrays: Tensor) -> tuple[Tensor, ...]:
    """Broadcast tensors against one another (dtypes are kept)."""
    for i, a in enumerate(arrays):
        check_tensor("broadcast_arrays", a, f"arrays[{i}]")
    if not arrays:
        return ()
    shape = _broadcast_shapes(*(a.shape for a in arrays))
    return tuple(fresh(_broadcast_to(a, shape)) for a in arrays)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The shape that `shapes` broadcast to (``()`` for none); ShapeError when incompatible."""
    norm = []
    for i, s in enumerate(shapes):
        if isinstance(s, Tensor) or not isinstance(s, (tuple, list)):
            raise ArgumentError(
                f"broadcast_shapes: shapes[{i}] must be a tuple of ints, got {type(s).__name__}"
            )
        norm.append(as_shape("broadcast_shapes", s, f"shapes[{i}]"))
    return _broadcast_shapes(*norm) if norm else ()


def broadcast_to(x: Tensor, /, shape: Sequence[int]) -> Tensor:
    """Broadcast x to `shape`; ShapeError when the shapes are incompatible."""
    check_tensor("broadcast_to", x)
    shape = as_shape("broadcast_to", shape)
    return fresh(_broadcast_to(x, shape))


# ---- joining and splitting -----------------------------------------------------
def concat(arrays: Sequence[Tensor], /, *, axis: int | None = 0) -> Tensor:
    """Join tensors along an existing axis; axis=None joins their flattened values."""
    ts = _tensors("concat", arrays)
    if axis is None:
        ts = [_reshape(t, (t.size,)) for t in ts]
        axis = 0
    nd = ts[0].ndim
    if any(t.ndim != nd for t in ts):
        raise ShapeError(
            f"concat: all tensors must have the same rank, got shapes {[t.shape for t in ts]}"
        )
    if nd == 0:
        raise ShapeError("concat: 0-d tensors cannot be concatenated; use stack")
    ax = normalize_axis("concat", axis, nd)
    for t in ts:
        if t.shape[:ax] + t.shape[ax + 1:] != ts[0].shape[:ax] + ts[0].shape[ax + 1:]:
            raise ShapeError(
                f"concat: shapes must match except along axis {axis}, got "
                f"{[t.shape for t in ts]}"
            )
    return fresh(ts[0]) if len(ts) == 1 else lax.concatenate(*ts, dimension=ax)


def stack(arrays: Sequence[Tensor], /, *, axis: int = 0) -> Tensor:
    """Join same-shape tensors along a new axis."""
    ts = _tensors("stack", arrays)
    shape = ts[0].shape
    if any(t.shape != shape for t in ts):
        raise ShapeError(f"stack: all tensors must have one shape, got {[t.shape for t in ts]}")
    ax = normalize_axis("stack", axis, len(shape) + 1)
    new = shape[:ax] + (1,) + shape[ax:]
    ts = [_reshape(t, new) for t in ts]
    return fresh(ts[0]) if len(ts) == 1 else lax.concatenate(*ts, dimension=ax)


def unstack(x: Tensor, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    """Split x along `axis` into a tuple of tensors of rank x.ndim - 1."""
    check_tensor("unstack", x)
    ax = normalize_axis("unstack", axis, x.ndim)
    rest = x.shape[:ax] + x.shape[ax + 1:]
    out = []
    for i in range(x.shape[ax]):
        starts = tuple(i if d == ax else 0 for d in range(x.ndim))
        limits = tuple(i + 1 if d == ax else n for d, n in enumerate(x.shape))
        out.append(_reshape(lax.slice(x, start_indices=starts, limit_indices=limits), rest))
    return tuple(out)


# ---- shape -----------------------------------------------------------------------
def expand_dims(x: Tensor, /, axis: int | tuple[int, ...] = 0) -> Tensor:
    """Insert size-1 axes at `axis` (an int, or a tuple of positions in the output)."""
    check_tensor("expand_dims", x)
    axes = as_ints("expand_dims", "axis", axis)
    m = x.ndim + len(axes)
    pos = normalize_axes("expand_dims", axes, m)
    shape = list(x.shape)
    for p in pos:
        shape.insert(p, 1)
    return fresh(_reshape(x, shape))


def squeeze(x: Tensor, /, axis: int | tuple[int, ...]) -> Tensor:
    """Remove the size-1 axes `axis`; ShapeError for an axis whose size is not 1."""
    check_tensor("squeeze", x)
    axes = normalize_axes("squeeze", as_ints("squeeze", "axis", axis), x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(
                f"squeeze: axis {a} has size {x.shape[a]}; only size-1 axes can be removed"
            )
    return fresh(_reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes)))


def reshape(x: Tensor, /, shape: Sequence[int], *, copy: bool | None = None) -> Tensor:
    """Reshape x; one entry may be -1 (inferred). copy=True always returns a new buffer."""
    check_tensor("reshape", x)
    shape = as_shape("reshape", shape, allow_infer=True)
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or x.size % known:
            raise ShapeError(
                f"reshape: cannot infer the -1 entry of {shape} for a tensor of size {x.size}"
            )
        shape = tuple(x.size // known if n == -1 else n for n in shape)
    if math.prod(shape) != x.size:
        raise ShapeError(
            f"reshape: cannot reshape a tensor of shape {x.shape} (size {x.size}) into shape "
            f"{shape} (size {math.prod(shape)}); the sizes must match (one entry may be -1 to infer it)"
        )
    if copy not in (None, True, False):
        raise ArgumentError(f"reshape: copy must be None, True or False, got {copy!r}")
    out = _reshape(x, shape)
    return lax.copy(out) if copy else fresh(out)


def permute_dims(x: Tensor, /, axes: tuple[int, ...]) -> Tensor:
    """Reorder the axes of x; `axes` is a permutation of range(x.ndim) (negatives allowed)."""
    check_tensor("permute_dims", x)
    axes = as_ints("permute_dims", "axes", axes)
    if len(axes) != x.ndim:
        raise AxisError(
            f"permute_dims: axes needs {x.ndim} entries (the tensor's rank), got {axes}"
        )
    perm = tuple(normalize_axis("permute_dims", a, x.ndim) for a in axes)
    if len(set(perm)) != len(perm):
        raise AxisError(f"permute_dims: axes {axes} has repeated entries")
    return fresh(_transpose(x, perm))


def moveaxis(x: Tensor, source: int | tuple[int, ...], destination: int | tuple[int, ...], /
             ) -> Tensor:
    """Move axes `source` to positions `destination`; the others keep their order."""
    check_tensor("moveaxis", x)
    src = as_ints("moveaxis", "source", source)
    dst = as_ints("moveaxis", "destination", destination)
    if len(src) != len(dst):
        raise AxisError(
            f"moveaxis: source {source} and destination {destination} need the same length"
        )
    src = tuple(normalize_axis("moveaxis", a, x.ndim) for a in src)
    dst = tuple(normalize_axis("moveaxis", a, x.ndim) for a in dst)
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise AxisError(f"moveaxis: repeated axis in {source} or {destination}")
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return fresh(_transpose(x, order))


# ---- reordering and repetition --------------------------------------------------------
def flip(x: Tensor, /, *, axis: int | tuple[int, ...] | None = None) -> Tensor:
    """Reverse the order of elements along `axis` (all axes when None)."""
    check_tensor("flip", x)
    axes = normalize_axes("flip", axis, x.ndim)
    return lax.reverse(x, dimensions=axes) if axes else fresh(x)


def _roll_axis(x: Tensor, shift: int, ax: int) -> Tensor:
    n = x.shape[ax]
    s = shift % n if n else 0
    if s == 0:
        return x

    def part(lo, hi):
        return lax.slice(x, start_indices=tuple(lo if d == ax else 0 for d in range(x.ndim)),
                         limit_indices=tuple(hi if d == ax else m for d, m in enumerate(x.shape)))

    return lax.concatenate(part(n - s, n), part(0, n - s), dimension=ax)


def roll(x: Tensor, /, shift: int | tuple[int, ...], *,
         axis: int | tuple[int, ...] | None = None) -> Tensor:
    """Roll elements along `axis` (flattened when None); shifts on a repeated axis add up."""
    check_tensor("roll", x)
    shifts = as_ints("roll", "shift", shift)
    if axis is None:
        if len(shifts) != 1:
            raise ArgumentError(f"roll: with axis=None, shift must be one int, got {shift!r}")
        flat = _reshape(x, (x.size,))
        return fresh(_reshape(_roll_axis(flat, shifts[0], 0), x.shape))
    axes = as_ints("roll", "axis", axis)
    if len(shifts) == 1 and len(axes) > 1 and not isinstance(shift, (tuple, list)):
        shifts = shifts * len(axes)
    if len(shifts) != len(axes):
        raise ArgumentError(f"roll: shift {shift!r} and axis {axis!r} need the same length")
    total: dict[int, int] = {}
    for s, a in zip(shifts, axes):
        a = normalize_axis("roll", a, x.ndim)
        total[a] = total.get(a, 0) + s
    for a, s in total.items():
        x = _roll_axis(x, s, a)
    return fresh(x)


def _nonneg(name: str, reps: tuple[int, ...], what: str) -> None:
    if any(r < 0 for r in reps):
        raise ShapeError(f"{name}: {what} must be non-negative, got {reps}")


def tile(x: Tensor, repetitions: tuple[int, ...], /) -> Tensor:
    """Repeat x `repetitions[i]` times along each axis (shapes are left-padded with 1)."""
    check_tensor("tile", x)
    reps = as_ints("tile", "repetitions", repetitions)
    _nonneg("tile", reps, "repetitions")
    d = max(x.ndim, len(reps))
    shape = (1,) * (d - x.ndim) + x.shape
    reps = (1,) * (d - len(reps)) + reps
    check_size("tile", tuple(r * n for r, n in zip(reps, shape)), x.dtype.itemsize)
    big = tuple(v for r, n in zip(reps, shape) for v in (r, n))
    y = lax.broadcast_in_dim(_reshape(x, shape), shape=big,
                             broadcast_dimensions=tuple(range(1, 2 * d, 2)))
    return _reshape(y, tuple(r * n for r, n in zip(reps, shape)))


def repeat(x: Tensor, repeats: int | Tensor, /, *, axis: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along `axis` (flattened when None)."""
    check_tensor("repeat", x)
    if axis is None:
        x = _reshape(x, (x.size,))
        axis = 0
    if x.ndim == 0:
        raise AxisError("repeat: x must have at least one axis when axis is given")
    ax = normalize_axis("repeat", axis, x.ndim)
    n = x.shape[ax]
    if isinstance(repeats, Tensor):
        return _repeat_counts(x, repeats, ax)
    if isinstance(repeats, (tuple, list)):
        raise ArgumentError("repeat: repeats must be an int or a 1-d integer tensor")
    (r,) = as_ints("repeat", "repeats", repeats)
    _nonneg("repeat", (r,), "repeats")
    check_size("repeat", x.shape[:ax] + (n * r,) + x.shape[ax + 1:], x.dtype.itemsize)
    shape = x.shape[:ax] + (n, r) + x.shape[ax + 1:]
    dims = tuple(d if d <= ax else d + 1 for d in range(x.ndim))
    y = lax.broadcast_in_dim(x, shape=shape, broadcast_dimensions=dims)
    return _reshape(y, x.shape[:ax] + (n * r,) + x.shape[ax + 1:])


def _repeat_counts(x: Tensor, repeats: Tensor, ax: int) -> Tensor:
    """repeat with per-element counts: the counts are read once on the host."""
    n = x.shape[ax]
    if repeats.dtype.kind not in "iu":
        raise DTypeError(f"repeat: repeats must have an integer dtype, got {repeats.dtype}")
    if repeats.ndim != 1 or repeats.shape[0] not in (1, n):
        raise ShapeError(f"repeat: repeats must have shape (1,) or ({n},), got {repeats.shape}")
    counts = repeats.numpy()
    _nonneg("repeat", tuple(counts.tolist()), "repeats")
    if repeats.shape[0] == 1 or n == 0:
        return repeat(x, int(counts[0]) if n else 0, axis=ax)
    total = builtins.sum(int(c) for c in counts.tolist())  # Python ints: no int64 wraparound
    check_size("repeat", x.shape[:ax] + (total,) + x.shape[ax + 1:], x.dtype.itemsize)
    # source index of every output position: cumsum of 1s placed at each segment end
    dev = x.device
    ends = lax.cumsum(lax.convert(repeats, new_dtype=D.int64), axis=0)
    marks = lax.scatter_add(full((total + 1,), 0, D.int64, dev), _reshape(ends, (n, 1)),
                            full((n,), 1, D.int64, dev), axes=(0,))
    src = lax.cumsum(lax.slice(marks, start_indices=(0,), limit_indices=(total,)), axis=0)
    return gather_axis(x, src, ax)


__all__ = [
    "broadcast_arrays", "broadcast_shapes", "broadcast_to", "concat", "expand_dims", "flip", "moveaxis",
    "permute_dims", "repeat", "reshape", "roll", "squeeze", "stack", "tile", "unstack",
]
