"""The argument checks of tenferro-nn: every optimizer, schedule, layer, functional op and
data loader checks its hyper-parameters here, so one rule holds everywhere.

- A wrong **type** is an `ArgumentError` (a `TypeError`): a str or None where a number is
  required, anything but a bool where a flag is (``nesterov="no"`` is refused, not truthy),
  a float where an int is.
- A right type with a bad **value** is a `HyperparameterError`, an `ArgumentValueError`: a
  `ValueError` (and an `ArgumentError`, as before): NaN, an infinity, a negative number
  where it means nothing, 0 where at least 1 is needed, a probability above 1, an unknown
  mode string.

Numbers are Python or NumPy reals (`numbers.Real`; bools are not numbers here), integers are
`numbers.Integral` (a NumPy int too), flags are `bool` or `numpy.bool_`. Each check returns the
value normalized (a Python float, int or bool) and its message names the owner ("SGD",
"Conv2d", "DataLoader"), the argument, what was expected and what was given. Use them in your
own layers and optimizers.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, ArgumentValueError


class HyperparameterError(ArgumentValueError):
    """A hyper-parameter has the right type but a value out of range (a negative lr or eps,
    NaN, betas outside [0, 1), a batch size of 0, a stride of 0, a dropout probability above
    1, a schedule giving a negative learning rate): a `ValueError`, and an `ArgumentError`."""


def _got(v: Any) -> str:
    return f"{type(v).__name__} {v!r:.60}"


def _fmt(x: float) -> str:
    return "inf" if x == math.inf else "-inf" if x == -math.inf else f"{x:g}"


def is_number(v: Any) -> bool:
    """A Python or NumPy real number, not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def number(owner: str, what: str, v: Any, *, low: float | None = 0.0, high: float | None = None,
           low_open: bool = False, high_open: bool = False, finite: bool = True) -> float:
    """`v` as a float, within [low, high] (an end is open with `low_open` / `high_open`, absent
    when None). NaN is always refused; an infinity unless ``finite=False`` and in range."""
    def want() -> str:  # built only for a message
        return _wanted(low, high, low_open, high_open, finite)

    if not is_number(v):
        raise ArgumentError(f"{owner}: {what} must be {want()}, got {_got(v)}")
    try:
        f = float(v)
    except OverflowError:  # an int too large for a float
        raise HyperparameterError(f"{owner}: {what} must be {want()}, got {v!r:.60} (too large for a "
                                  f"float)") from None
    ok = not math.isnan(f) and (math.isfinite(f) or not finite)
    if ok and low is not None:
        ok = f > low if low_open else f >= low
    if ok and high is not None:
        ok = f < high if high_open else f <= high
    if not ok:
        raise HyperparameterError(f"{owner}: {what} must be {want()}, got {v!r:.60}")
    return f


def _wanted(low: float | None, high: float | None, low_open: bool, high_open: bool, finite: bool) -> str:
    if low is None and high is None:
        return "a finite number" if finite else "a number"
    if high is None:
        return f"a {'finite ' if finite else ''}number {'>' if low_open else '>='} {_fmt(low)}"
    if low is None:
        return f"a {'finite ' if finite else ''}number {'<' if high_open else '<='} {_fmt(high)}"
    return f"a number in {'(' if low_open else '['}{_fmt(low)}, {_fmt(high)}{')' if high_open else ']'}"


def probability(owner: str, what: str, v: Any) -> float:
    """A probability in [0, 1] as a float."""
    if not is_number(v):
        raise ArgumentError(f"{owner}: {what} must be a probability in [0, 1], got {_got(v)}")
    f = float(v)
    if not 0.0 <= f <= 1.0:
        raise HyperparameterError(f"{owner}: {what} must be a probability in [0, 1], got {v!r:.60}")
    return f


def integer(owner: str, what: str, v: Any, low: int | None = None, high: int | None = None) -> int:
    """`v` as an int in [low, high] (either end absent when None)."""
    want = "an int" + (f" >= {low}" if low is not None and high is None else "") + \
        (f" in [{low}, {high}]" if low is not None and high is not None else "") + \
        (f" <= {high}" if low is None and high is not None else "")
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise ArgumentError(f"{owner}: {what} must be {want}, got {_got(v)}")
    if (low is not None and v < low) or (high is not None and v > high):
        raise HyperparameterError(f"{owner}: {what} must be {want}, got {v!r}")
    return int(v)


def flag(owner: str, what: str, v: Any) -> bool:
    """`v` as a bool: only True or False (or a NumPy bool) are accepted, never a truthy value."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise ArgumentError(f"{owner}: {what} must be True or False, got {_got(v)}")


def choice(owner: str, what: str, v: Any, options: Sequence[str]) -> str:
    """One of the strings `options`."""
    if not isinstance(v, str):
        raise ArgumentError(f"{owner}: {what} must be one of {tuple(options)}, got {_got(v)}")
    if v not in options:
        raise HyperparameterError(f"{owner}: {what} must be one of {tuple(options)}, got {v!r}")
    return v


def int_pair(owner: str, what: str, v: Any, low: int = 0) -> tuple[int, int]:
    """An int or a pair of ints, each >= `low`, as a pair (kernel sizes, strides, padding)."""
    want = f"an int >= {low} or a pair of them"
    t = (v, v) if isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) else v
    if (not isinstance(t, (tuple, list)) or len(t) != 2
            or any(isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral) for i in t)):
        raise ArgumentError(f"{owner}: {what} must be {want}, got {_got(v)}")
    if any(i < low for i in t):
        raise HyperparameterError(f"{owner}: {what} must be {want}, got {v!r}")
    return int(t[0]), int(t[1])


__all__ = ["HyperparameterError", "choice", "flag", "int_pair", "integer", "is_number", "number",
           "probability"]
