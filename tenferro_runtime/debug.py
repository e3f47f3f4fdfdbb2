"""Debugging inside traced code: `debug.print(fmt, *args, **kwargs)`.

Inside `compile`, `grad`, `vmap` or any trace, tensors are tracers with no value yet;
`debug.print` binds `debug_print_p`, an effectful primitive with no results: dead-code
elimination keeps it, passes keep it in program order among effects, and it prints the
concrete values when the graph runs. Called on concrete tensors (eagerly, under a
`GradientTape`) it prints at once. `fmt` follows `str.format`; tensor arguments arrive as
NumPy arrays.
"""

from __future__ import annotations

import builtins
import string
from typing import Any

from tenferro_core.errors import ArgumentError, ConcretizationError
from tenferro_core.extension import define_op
from tenferro_core.params import p_any

from .pytree import tree_flatten, tree_unflatten
from .tensor import Tensor


class _Static:
    """Non-tensor leaves of a call (a params value): hashed by value when they can be."""

    __slots__ = ("values", "_key")

    def __init__(self, values: tuple):
        self.values = values
        try:
            hash(values)
            self._key: Any = values
        except TypeError:
            self._key = id(self)

    def __eq__(self, other: Any) -> bool:
        return type(other) is _Static and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)


def _no_results(*avals: Any, **params: Any) -> tuple:
    return ()


def _rebuild(tensors: tuple, tree: Any, slots: tuple, statics: _Static) -> tuple:
    """(args, kwargs) with each tensor leaf replaced by `tensors[i]`."""
    it, st = iter(tensors), iter(statics.values)
    leaves = [next(it) if is_tensor else next(st) for is_tensor in slots]
    return tree_unflatten(tree, leaves)


def _emit(*tensors: Any, fmt: str, tree: Any, slots: tuple, statics: _Static) -> tuple:
    """The primitive's evaluation on concrete tensors (eager, or a step of a plan): print."""
    args, kwargs = _rebuild(tuple(t.numpy() for t in tensors), tree, slots, statics)
    builtins.print(fmt.format(*args, **kwargs))
    return ()


debug_print_p = define_op(
    "tenferro_runtime.debug_print.v1", _no_results, nin=None, multiple_results=True, effects=True,
    differentiable=False, decomposition=_emit,
    payload={k: (p_any, None) for k in ("fmt", "tree", "slots", "statics")},
    doc="Print formatted operand values when run (effectful: kept by DCE, in program order).",
)


class _Any:
    """A stand-in value that formats under any spec (checks a format string's fields)."""

    def __format__(self, spec: str) -> str:
        return ""

    def __getattr__(self, name: str) -> Any:
        return self

    def __getitem__(self, key: Any) -> Any:
        return self


def _check_format(fmt: Any, args: tuple, kwargs: dict) -> None:
    if not isinstance(fmt, str):
        raise ArgumentError(
            f"debug.print: the first argument is the format string (str.format syntax, e.g. "
            f"'x={{x}}'), got {type(fmt).__name__}; pass values after it: debug.print('{{}}', x)")
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(fmt) if f is not None]
        fmt.format(*[_Any()] * len(args), **{k: _Any() for k in kwargs})
    except (IndexError, KeyError) as err:
        raise ArgumentError(
            f"debug.print: format string {fmt!r} names field(s) {fields} but the call gave "
            f"{len(args)} positional value(s) and keyword(s) {sorted(kwargs)} ({type(err).__name__}: "
            f"{err}); pass one value per field") from None
    except ValueError as err:
        raise ArgumentError(f"debug.print: malformed format string {fmt!r}: {err}") from None


def print(fmt: str, *args: Any, **kwargs: Any) -> None:  # noqa: A001  (jax.debug.print's name)
    """Print ``fmt.format(*args, **kwargs)`` with the concrete values of tensor arguments, also
    inside `compile`, `grad` and `vmap` (then when the traced code runs)."""
    _check_format(fmt, args, kwargs)
    leaves, tree = tree_flatten((args, kwargs))
    tensors = tuple(x for x in leaves if isinstance(x, Tensor))
    slots = tuple(isinstance(x, Tensor) for x in leaves)
    statics = _Static(tuple(x for x in leaves if not isinstance(x, Tensor)))
    params = {"fmt": fmt, "tree": tree, "slots": slots, "statics": statics}
    values = _concrete(tensors)
    if values is not None:  # print now: no observer (a tape) sees an op
        args, kwargs = _rebuild(values, tree, slots, statics)
        builtins.print(fmt.format(*args, **kwargs))
        return
    debug_print_p.bind(*tensors, **params)


def _concrete(tensors: tuple) -> tuple | None:
    """The values as NumPy arrays where every one is known now (concrete tensors, or tracers
    of transformations that have them, such as a JVP of concrete primals); else None."""
    values = []
    for x in tensors:
        try:
            values.append(x.numpy())
        except ConcretizationError:
            return None
    return tuple(values)


__all__ = ["debug_print_p", "print"]
