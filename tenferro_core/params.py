"""Validators that return the one canonical, hashable form of a primitive parameter.

Each takes (primitive name, parameter name, value) and returns the canonical value or
raises ArgumentError naming what was expected, what was given and what to do. Canonical
means exact types, so that equal params are also identical in caches, CSE and printing:
an int is a Python `int` (NumPy integers are converted, as NumPy accepts them; a bool or a
float is rejected, as NumPy rejects a bool axis), a flag is a `bool`, a sequence is a tuple,
a dtype is a DType and a scalar keeps its exact Python type. Every validator returns an
already canonical value unchanged, and checks it first, on a fast path.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from .dtypes import DType, as_dtype
from .errors import ArgumentError, ArgumentValueError, DTypeError

Validator = Callable[[str, str, Any], Any]


def _given(v: Any) -> str:
    t = type(v).__name__
    return f"{v!r} ({'an' if t[0] in 'aeiou' else 'a'} {t})"


def _fail(prim: str, name: str, expected: str, value: Any, hint: str = "",
          error: type = ArgumentError) -> ArgumentError:
    return error(
        f"{prim}: parameter {name!r} expects {expected}, got {_given(value)}"
        + (f"; {hint}" if hint else "")
    )


def _as_int(prim: str, name: str, v: Any, whole: Any = None) -> int:
    """`v` as a Python int: NumPy integers convert; bools and floats are rejected."""
    if type(v) is int:
        return v
    if not isinstance(v, (bool, np.bool_, float, np.floating)):
        try:
            return operator.index(v)
        except TypeError:
            pass
    what = "an int" if whole is None else "ints"
    inside = "" if whole is None else f" in {whole!r}"
    raise ArgumentError(
        f"{prim}: parameter {name!r} expects {what}, got {_given(v)}{inside}; pass Python ints "
        f"(NumPy integers are accepted too; bools and floats are not)"
    )


def p_int(prim: str, name: str, v: Any) -> int:
    if type(v) is int:
        return v
    return _as_int(prim, name, v)


def p_nonneg_int(prim: str, name: str, v: Any) -> int:
    i = v if type(v) is int else _as_int(prim, name, v)
    if i < 0:
        raise _fail(prim, name, "a non-negative int", v)
    return i


def p_bool(prim: str, name: str, v: Any) -> bool:
    if type(v) is bool:
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    raise _fail(prim, name, "True or False", v, "pass a bool")


def _items(prim: str, name: str, v: Any, expected: str, example: str) -> tuple:
    if not isinstance(v, (str, bytes)):
        try:
            return tuple(v)
        except TypeError:
            pass
    raise _fail(prim, name, expected, v, f"pass a tuple such as {example}")


def p_ints(prim: str, name: str, v: Any) -> tuple[int, ...]:
    if type(v) is tuple:
        for i in v:
            if type(i) is not int:
                break
        else:
            return v
    items = _items(prim, name, v, "a sequence of ints", "(0, 1)")
    return tuple([i if type(i) is int else _as_int(prim, name, i, v) for i in items])


def p_shape(prim: str, name: str, v: Any) -> tuple[int, ...]:
    t = p_ints(prim, name, v)
    for i in t:
        if i < 0:
            raise _fail(prim, name, "a shape of non-negative ints", v)
    return t


def p_int_pairs(prim: str, name: str, v: Any) -> tuple[tuple[int, ...], ...]:
    if type(v) is tuple:
        for p in v:
            if type(p) is not tuple or any(type(i) is not int for i in p):
                break
        else:
            return v
    items = _items(prim, name, v, "a sequence of int tuples", "((0, 1), (1, 0))")
    return tuple([p_ints(prim, name, p) for p in items])


def p_dtype(prim: str, name: str, v: Any) -> DType:
    if type(v) is DType:
        return v
    if v is not None:  # np.dtype(None) is float64: not a spelling of any dtype here
        try:
            return as_dtype(v)
        except DTypeError:
            pass
    raise _fail(prim, name, "a dtype", v, "pass a tenferro dtype such as tenferro_core.dtypes.float32")


def p_scalar(prim: str, name: str, v: Any) -> bool | int | float | complex:
    t = type(v)
    if t is bool or t is int or t is float or t is complex:
        return v
    if isinstance(v, np.generic):
        py = _from_numpy(v)
        if py is not v:
            return py
    elif isinstance(v, numbers.Integral):
        return operator.index(v)
    elif isinstance(v, numbers.Real):
        return float(v)
    elif isinstance(v, numbers.Complex):
        return complex(v)
    raise _fail(prim, name, "a Python scalar (bool, int, float, complex)", v)


def p_any(prim: str, name: str, v: Any) -> Any:
    try:
        hash(v)
    except TypeError:
        raise _fail(prim, name, "a hashable value", v) from None
    return v


def _from_numpy(v: Any) -> Any:
    """A NumPy bool, integer, floating or complex scalar as the Python scalar of its kind;
    anything else as it is."""
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.complexfloating):
        return complex(v)
    return v


def _atom(v: Any) -> Any:
    """NumPy scalars and str subclasses as the Python value they spell."""
    return str(v) if isinstance(v, str) else _from_numpy(v)


def p_choice(*options: Any) -> Validator:
    """One of `options`, matched by type and value (1.0 and True are not the option 1). A
    value of an option's type that is none of them is an ArgumentValueError (a ValueError,
    as NumPy raises for an unknown mode); a value of another type an ArgumentError."""
    table = {(type(o), o): o for o in options}
    types = {type(o) for o in options}

    def check(prim: str, name: str, v: Any) -> Any:
        try:
            return table[type(v), v]
        except (KeyError, TypeError):
            pass
        a = _atom(v)
        try:
            return table[type(a), a]
        except (KeyError, TypeError):
            error = ArgumentValueError if type(a) in types else ArgumentError
            raise _fail(prim, name, f"one of {options}", v, error=error) from None

    return check


def p_optional(inner: Validator) -> Validator:
    def check(prim: str, name: str, v: Any) -> Any:
        return None if v is None else inner(prim, name, v)

    return check


CONV_LAYOUTS = ("channels_first", "channels_last")


def p_conv_layout(prim: str, name: str, v: Any) -> str:
    """A convolution layout: "channels_first" (lhs and output (N, C, *spatial)) or
    "channels_last" ((N, *spatial, C)); the kernel stays (O, C/groups, *window)."""
    if type(v) is str and v in CONV_LAYOUTS:
        return v
    if isinstance(v, str) and str(v) in CONV_LAYOUTS:
        return str(v)
    raise _fail(prim, name, '"channels_first" or "channels_last"', v,
                'channels_first is lhs (N, C, *spatial), channels_last (N, *spatial, C); '
                'spell it out ("NCHW" and "NHWC" are not accepted)')
