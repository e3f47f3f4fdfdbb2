"""Validators that normalize primitive parameters to hashable values.

Each takes (primitive name, parameter name, value) and returns the normalized
value or raises ArgumentError naming what was expected and what was given.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable
from typing import Any

from .dtypes import DType, as_dtype
from .errors import ArgumentError, DTypeError

Validator = Callable[[str, str, Any], Any]


def _fail(prim: str, name: str, expected: str, value: Any) -> ArgumentError:
    return ArgumentError(f"{prim}: parameter {name!r} expects {expected}, got {value!r}")


def _as_int(prim: str, name: str, v: Any) -> int:
    if isinstance(v, bool):
        raise _fail(prim, name, "an int", v)
    try:
        return operator.index(v)
    except TypeError:
        raise _fail(prim, name, "an int", v) from None


def p_int(prim: str, name: str, v: Any) -> int:
    return _as_int(prim, name, v)


def p_nonneg_int(prim: str, name: str, v: Any) -> int:
    i = _as_int(prim, name, v)
    if i < 0:
        raise _fail(prim, name, "a non-negative int", v)
    return i


def p_bool(prim: str, name: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise _fail(prim, name, "True or False", v)
    return v


def p_ints(prim: str, name: str, v: Any) -> tuple[int, ...]:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise _fail(prim, name, "a sequence of ints", v)
    return tuple(_as_int(prim, name, i) for i in v)


def p_shape(prim: str, name: str, v: Any) -> tuple[int, ...]:
    t = p_ints(prim, name, v)
    if any(i < 0 for i in t):
        raise _fail(prim, name, "a shape of non-negative ints", v)
    return t


def p_int_pairs(prim: str, name: str, v: Any) -> tuple[tuple[int, ...], ...]:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise _fail(prim, name, "a sequence of int tuples", v)
    return tuple(p_ints(prim, name, p) for p in v)


def p_dtype(prim: str, name: str, v: Any) -> DType:
    try:
        return as_dtype(v)
    except DTypeError:
        raise _fail(prim, name, "a dtype", v) from None


def p_scalar(prim: str, name: str, v: Any) -> bool | int | float | complex:
    if isinstance(v, (bool, int, float, complex)):
        return v
    if isinstance(v, numbers.Number):
        return v.item() if hasattr(v, "item") else complex(v)
    raise _fail(prim, name, "a Python scalar (bool, int, float, complex)", v)


def p_any(prim: str, name: str, v: Any) -> Any:
    try:
        hash(v)
    except TypeError:
        raise _fail(prim, name, "a hashable value", v) from None
    return v


def p_choice(*options: Any) -> Validator:
    def check(prim: str, name: str, v: Any) -> Any:
        if v not in options:
            raise _fail(prim, name, f"one of {options}", v)
        return v

    return check


def p_optional(inner: Validator) -> Validator:
    def check(prim: str, name: str, v: Any) -> Any:
        return None if v is None else inner(prim, name, v)

    return check
