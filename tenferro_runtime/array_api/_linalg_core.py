"""Linear algebra in the main namespace: matmul, matrix_transpose, tensordot, vecdot.

Each lowers to one `dot_general` (plus explicit broadcasts and transposes).
"""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

from .. import lax
from ..tensor import Tensor
from ._args import as_axis, as_int
from ._helpers import (
    broadcast_shapes,
    broadcast_to,
    check_tensor,
    normalize_axis,
    numpy_operands,
    promote,
    reshape,
)


def _operands(name: str, x1: Any, x2: Any) -> tuple[Tensor, Tensor]:
    if isinstance(x1, Tensor) or isinstance(x2, Tensor):  # a NumPy operand: as promote converts it
        x1, x2 = numpy_operands(name, (x1, x2))
    check_tensor(name, x1, "x1")
    check_tensor(name, x2, "x2")
    if "b" in (x1.dtype.kind, x2.dtype.kind):
        raise DTypeError(
            f"{name}: expected numeric tensors, got {x1.dtype} and {x2.dtype}; "
            f"convert bool tensors with astype first"
        )
    a, b = promote(name, x1, x2)
    return a, b


def matmul(x1: Tensor, x2: Tensor, /) -> Tensor:
    """Matrix product with NumPy's 1-d promotion and batch broadcasting."""
    a, b = _operands("matmul", x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(
            f"matmul: operands must be at least 1-d, got shapes {x1.shape} and {x2.shape}; "
            f"use multiply for scalars"
        )
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = reshape(a, (1,) + a.shape)
    if vb:
        b = reshape(b, b.shape + (1,))
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(
            f"matmul: inner dimensions differ: x1 {x1.shape} has {a.shape[-1]} columns but "
            f"x2 {x2.shape} has {b.shape[-2]} rows"
        )
    na, nb = a.ndim, b.ndim
    if nb == 2:  # no batch on the right: contract directly, batch of x1 stays leading
        out = lax.dot_general(a, b, contracting_dims=((na - 1,), (0,)))
    elif na == 2:  # no batch on the left: (M, batch..., N) -> (batch..., M, N)
        out = lax.dot_general(a, b, contracting_dims=((1,), (nb - 2,)))
        k = nb - 2
        out = lax.transpose(out, permutation=tuple(range(1, k + 1)) + (0, k + 1))
    else:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        a = broadcast_to(a, batch + a.shape[-2:])
        b = broadcast_to(b, batch + b.shape[-2:])
        k = len(batch)
        out = lax.dot_general(a, b, contracting_dims=((k + 1,), (k,)),
                              batch_dims=(tuple(range(k)), tuple(range(k))))
    if va and vb:
        return reshape(out, out.shape[:-2])
    if va:
        return reshape(out, out.shape[:-2] + out.shape[-1:])
    if vb:
        return reshape(out, out.shape[:-1])
    return out


def matrix_transpose(x: Tensor, /) -> Tensor:
    """Swap the last two axes of a stack of matrices."""
    check_tensor("matrix_transpose", x)
    if x.ndim < 2:
        raise ShapeError(f"matrix_transpose: x must be at least 2-d, got shape {x.shape}")
    n = x.ndim
    return lax.transpose(x, permutation=tuple(range(n - 2)) + (n - 1, n - 2))


def _axes_list(name: str, axes: Any, ndim: int, which: str) -> tuple[int, ...]:
    seq = axes if isinstance(axes, (tuple, list)) else (axes,)
    try:
        out = tuple(normalize_axis(name, a, ndim) for a in seq)
    except ArgumentError:
        raise ArgumentError(f"{name}: axes for {which} must be ints, got {axes!r}") from None
    if len(set(out)) != len(out):
        raise AxisError(f"{name}: repeated axis in {axes!r} for {which}")
    return out


def tensordot(x1: Tensor, x2: Tensor, /, *, axes: int | tuple[Any, Any] = 2) -> Tensor:
    """Contract the last `axes` axes of x1 with the first of x2, or the given pairs of axes."""
    a, b = _operands("tensordot", x1, x2)
    if isinstance(axes, (tuple, list)):
        if len(axes) != 2:
            raise ArgumentError(f"tensordot: axes must be an int or a pair of sequences, got {axes!r}")
        la = _axes_list("tensordot", axes[0], a.ndim, "x1")
        lb = _axes_list("tensordot", axes[1], b.ndim, "x2")
        if len(la) != len(lb):
            raise ShapeError(f"tensordot: axes {axes!r} pair up different numbers of axes")
    else:
        try:
            n = as_int("tensordot", "axes", axes)
        except ArgumentError:
            raise ArgumentError(f"tensordot: axes must be an int or a pair, got {axes!r}") from None
        if n < 0 or n > a.ndim or n > b.ndim:
            raise AxisError(
                f"tensordot: axes={n} must be in 0..min(x1.ndim, x2.ndim) = "
                f"{min(a.ndim, b.ndim)}"
            )
        la, lb = tuple(range(a.ndim - n, a.ndim)), tuple(range(n))
    for i, j in zip(la, lb):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(
                f"tensordot: contracted axes must have equal sizes; x1 axis {i} has size "
                f"{a.shape[i]} but x2 axis {j} has size {b.shape[j]}"
            )
    return lax.dot_general(a, b, contracting_dims=(la, lb))


def vecdot(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """Dot products of vectors along `axis` (x1 conjugated), broadcasting the other axes."""
    a, b = _operands("vecdot", x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"vecdot: operands must be at least 1-d, got {x1.shape} and {x2.shape}")
    axis = as_axis("vecdot", axis)
    if not -min(a.ndim, b.ndim) <= axis < 0 and not 0 <= axis < min(a.ndim, b.ndim):
        raise AxisError(
            f"vecdot: axis {axis} is out of range for shapes {x1.shape} and {x2.shape}"
        )
    ts = []
    for t in (a, b):
        ax = normalize_axis("vecdot", axis, t.ndim)
        perm = tuple(d for d in range(t.ndim) if d != ax) + (ax,)
        ts.append(t if ax == t.ndim - 1 else lax.transpose(t, permutation=perm))
    a, b = ts
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(
            f"vecdot: the contracted axis must have one size, got {a.shape[-1]} ({x1.shape}) "
            f"and {b.shape[-1]} ({x2.shape})"
        )
    if a.dtype.kind == "c":
        a = lax.conj(a)
    batch = broadcast_shapes(a.shape[:-1], b.shape[:-1])
    a = broadcast_to(a, batch + a.shape[-1:])
    b = broadcast_to(b, batch + b.shape[-1:])
    k = len(batch)
    out = lax.dot_general(a, b, contracting_dims=((k,), (k,)),
                          batch_dims=(tuple(range(k)), tuple(range(k))))
    return out


__all__ = ["matmul", "matrix_transpose", "tensordot", "vecdot"]
