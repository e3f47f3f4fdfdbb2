"""Shared pieces of shape/dtype rules."""

from __future__ import annotations

from collections.abc import Sequence

from ..avals import Aval
from ..dtypes import DType
from ..errors import AxisError, DTypeError, ShapeError

KIND_NAMES = {
    "b": "bool",
    "i": "signed integer",
    "u": "unsigned integer",
    "f": "floating",
    "c": "complex",
}


def check_kinds(prim: str, aval: Aval, kinds: str, what: str = "operand") -> None:
    if aval.dtype.kind not in kinds:
        allowed = " or ".join(KIND_NAMES[k] for k in kinds)
        raise DTypeError(
            f"{prim}: {what} must have a {allowed} dtype, got {aval.dtype}; "
            f"convert it first (for example with astype)"
        )


def same_shapes(prim: str, avals: Sequence[Aval]) -> tuple[int, ...]:
    shape = avals[0].shape
    for a in avals[1:]:
        if a.shape != shape:
            raise ShapeError(
                f"{prim}: core primitives do not broadcast; expected operands of one shape, "
                f"got {', '.join(str(b.shape) for b in avals)}; use broadcast_in_dim or the "
                f"array_api namespace, which broadcasts"
            )
    return shape


def same_dtypes(prim: str, avals: Sequence[Aval]) -> DType:
    dtype = avals[0].dtype
    for a in avals[1:]:
        if a.dtype is not dtype:
            raise DTypeError(
                f"{prim}: core primitives do not promote; expected operands of one dtype, "
                f"got {', '.join(str(b.dtype) for b in avals)}; insert convert or use the "
                f"array_api namespace, which promotes"
            )
    return dtype


def check_axes(prim: str, axes: Sequence[int], ndim: int, name: str = "axes") -> None:
    for ax in axes:
        if not 0 <= ax < ndim:
            raise AxisError(
                f"{prim}: {name} entry {ax} is out of range for an operand of rank {ndim}; "
                f"expected 0 <= axis < {ndim} (core primitives take non-negative axes)"
            )
    if len(set(axes)) != len(axes):
        raise AxisError(f"{prim}: {name} {tuple(axes)} has repeated entries; expected distinct axes")


def check_scalar_int(prim: str, aval: Aval, what: str) -> None:
    if aval.shape != ():
        raise ShapeError(f"{prim}: {what} must be a 0-d tensor, got shape {aval.shape}")
    check_kinds(prim, aval, "iu", what)
