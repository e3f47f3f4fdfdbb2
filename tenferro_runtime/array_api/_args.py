"""Shared checks of non-tensor arguments: integers, axes, shapes and sizes.

Every namespace function that takes an int-like parameter (an axis, a shape, a count)
goes through these, so each rule lives in one place:

- an int is a Python int, a NumPy integer scalar or any object with ``__index__``
  (via `operator.index`); bool (Python or NumPy), float, str, NaN and inf are an
  `ArgumentError` (a TypeError), never silently truncated with ``int()``;
- a shape is an int or a tuple/list of ints; a negative size is a `ShapeError`
  (a ValueError);
- a result may hold at most `MAX_ELEMENTS` elements (and `MAX_BYTES` bytes): bigger
  requests are a `ShapeError` naming the limit, raised before anything is allocated
  (the element count is computed with Python ints, so it never overflows).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, ShapeError

#: Most elements one tensor may hold (an int64 element count with room to spare).
MAX_ELEMENTS = 2**62
#: Most bytes one tensor may span (NumPy's and DLPack's signed 64-bit byte offsets).
MAX_BYTES = 2**63 - 1


def _describe(v: Any) -> str:
    r = repr(v)
    return f"{type(v).__name__} {r if len(r) <= 60 else r[:57] + '...'}"


def as_int(name: str, what: str, v: Any) -> int:
    """`v` as a Python int; ArgumentError for bool, float, str and other non-integers."""
    if isinstance(v, (bool, np.bool_)):
        raise ArgumentError(f"{name}: {what} must be an int, got bool {v!r}; pass 0 or 1 explicitly")
    try:
        return operator.index(v)
    except TypeError:
        raise ArgumentError(f"{name}: {what} must be an int, got {_describe(v)}") from None


def as_axis(name: str, axis: Any, what: str = "axis") -> int:
    """An axis as an int (range is checked by the caller, who knows the rank)."""
    return as_int(name, what, axis)


def as_ints(name: str, what: str, value: Any) -> tuple[int, ...]:
    """An int, or a tuple/list of ints, as a tuple of Python ints."""
    if isinstance(value, (tuple, list)):
        items: Iterable[Any] = value
    else:
        items = (value,)
    out = []
    for v in items:
        try:
            out.append(as_int(name, what, v))
        except ArgumentError:
            raise ArgumentError(
                f"{name}: {what} must be an int or a tuple of ints, got {_describe(value)}"
                + ("" if v is value else f" (entry {_describe(v)})")
            ) from None
    return tuple(out)


def check_size(name: str, shape: Iterable[int], itemsize: int = 1) -> int:
    """The element count of `shape` (Python ints, no overflow); ShapeError beyond the limits."""
    shape = tuple(shape)
    n = math.prod(shape)
    for d in shape:
        if d > MAX_ELEMENTS:
            raise ShapeError(
                f"{name}: size {d} of shape {shape} is too large; at most {MAX_ELEMENTS} "
                f"(2**62) elements per axis and per tensor can be allocated"
            )
    if n > MAX_ELEMENTS or n * itemsize > MAX_BYTES:
        raise ShapeError(
            f"{name}: a tensor of shape {shape} ({n} elements) is too large to allocate; at most "
            f"{MAX_ELEMENTS} (2**62) elements and {MAX_BYTES} bytes per tensor"
        )
    return n


def check_count(name: str, what: str, n: int, itemsize: int = 1) -> int:
    """A non-negative element count (eye's rows, linspace's num, ...) within the size limits."""
    n = as_int(name, what, n)
    if n < 0:
        raise ShapeError(f"{name}: {what} must be a non-negative int, got {n}")
    if n > MAX_ELEMENTS or n * itemsize > MAX_BYTES:
        raise ShapeError(
            f"{name}: {what} {n} is too large; a tensor can hold at most {MAX_ELEMENTS} (2**62) "
            f"elements and {MAX_BYTES} bytes"
        )
    return n


def as_shape(name: str, shape: Any, what: str = "shape", *, allow_infer: bool = False,
             itemsize: int = 1) -> tuple[int, ...]:
    """A shape (an int or a tuple/list of ints) as a tuple of non-negative Python ints.

    Strings, floats, bools and other non-integers are an ArgumentError; a negative size
    (other than a single -1 when `allow_infer`) or a size beyond `MAX_ELEMENTS` is a ShapeError.
    """
    if isinstance(shape, (str, bytes)) or not (
        isinstance(shape, (tuple, list)) or hasattr(shape, "__index__")
    ) or isinstance(shape, (bool, np.bool_)):
        raise ArgumentError(f"{name}: {what} must be an int or a tuple of ints, got {_describe(shape)}")
    out = as_ints(name, what, shape)
    infer = sum(n == -1 for n in out) if allow_infer else 0
    if infer > 1 or any(n < -infer for n in out):
        extra = ", with at most one -1 (inferred)" if allow_infer else ""
        raise ShapeError(f"{name}: {what} entries must be non-negative{extra}; got {out}")
    check_size(name, tuple(1 if n == -1 else n for n in out), itemsize)  # -1: inferred later
    return out


__all__ = ["MAX_BYTES", "MAX_ELEMENTS", "as_axis", "as_int", "as_ints", "as_shape", "check_count",
           "check_size"]
