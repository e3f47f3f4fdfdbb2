"""Cost rules of the core primitives: FLOPs and bytes moved, from avals and params.

A cost rule is ``rule(in_avals, out_avals, **params) -> Cost`` (params as `check_params`
returns them). Memory planning, scheduling and energy estimates read it (DESIGN.md
sections 7 and 8); `tenferro_runtime.cost` looks rules up, preferring a plugin's
``registry.add_rule("cost", op, fn)`` over this table.

Conventions:

- `flops` counts arithmetic operations on elements of the operands' dtype: a complex
  multiply counts one, like a real one. Counts are estimates for planning, not measurements.
- Elementwise: `ELEMENTWISE_FLOPS` per output element. Arithmetic, comparisons, logic,
  rounding, select, convert, and also div, rem, sqrt and rsqrt (one hardware instruction
  each, if a slow one) count 1; clamp 2 (a max and a min); exp, log, the trigonometric and
  hyperbolic functions, logistic and pow count `TRANSCENDENTAL_FLOPS` (about the
  multiply-adds of their polynomial approximations); real, imag, bitcast_convert, iota and
  full compute nothing and count 0.
- Reductions (reduce_*, argmax/argmin, cumsum) count one operation per input element;
  sort and argsort ceil(log2 n) comparisons per element for an axis of length n.
- dot_general counts 2 * batch * M * N * K (a multiply and an add per term);
  conv_general 2 * output elements * (C_in / groups) * window size (dilation zeros included).
- Structural, broadcast and indexing ops compute nothing: 0 flops, scatter_add one add per
  update.
- `bytes` is bytes read plus bytes written: every operand's and result's size times its
  dtype's itemsize, except that slice, dynamic_slice and gather read only the elements they
  take. A backend may do a reshape as a view (no bytes); the rule counts the copy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from ..avals import Aval
from . import elementwise


class Cost(NamedTuple):
    """FLOPs and bytes moved (read + written) of one op application."""

    flops: int
    bytes: int

    def __add__(self, other: Any) -> Cost:  # type: ignore[override]
        """Componentwise sum (a tuple would concatenate)."""
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.flops + other.flops, self.bytes + other.bytes)

    def __radd__(self, other: Any) -> Cost:
        """Lets `sum(costs)` start from 0."""
        if other == 0:
            return self
        return NotImplemented


CostRule = Callable[..., Cost]
ZERO = Cost(0, 0)
TRANSCENDENTAL_FLOPS = 8


def nbytes(avals: Iterable[Aval]) -> int:
    """Total bytes of the arrays the avals describe."""
    return sum(a.size * a.dtype.itemsize for a in avals)


def io_bytes(in_avals: Iterable[Aval], out_avals: Iterable[Aval]) -> int:
    """Bytes read (every operand, whole) plus bytes written (every result)."""
    return nbytes(in_avals) + nbytes(out_avals)


def elementwise_rule(flops_per_element: int) -> CostRule:
    """The cost rule of an elementwise op (also for extension ops: softplus, ...)."""

    def rule(in_avals: tuple[Aval, ...], out_avals: tuple[Aval, ...], **params: Any) -> Cost:
        return Cost(flops_per_element * out_avals[0].size, io_bytes(in_avals, out_avals))

    return rule


_T = TRANSCENDENTAL_FLOPS
_TRANSCENDENTAL = (
    "exp", "expm1", "log", "log1p", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
    "tanh", "asinh", "acosh", "atanh", "logistic", "atan2", "pow",
)
ELEMENTWISE_FLOPS: dict[str, int] = {
    **{p.name: 1 for p in elementwise.PRIMITIVES},
    **{name: _T for name in _TRANSCENDENTAL},
    "real": 0, "imag": 0, "clamp": 2,
    "convert": 1, "bitcast_convert": 0, "iota": 0, "full": 0,
}
"""Flops per output element of every elementwise primitive."""


def _reduction(in_avals, out_avals, **params) -> Cost:
    return Cost(in_avals[0].size, io_bytes(in_avals, out_avals))


def _sort(in_avals, out_avals, *, dimension, **params) -> Cost:
    x = in_avals[0]
    n = x.shape[dimension]
    compares = math.ceil(math.log2(n)) if n > 1 else 0
    return Cost(x.size * compares, io_bytes(in_avals, out_avals))


def _moved(in_avals, out_avals, **params) -> Cost:
    return Cost(0, io_bytes(in_avals, out_avals))


def _taken(in_avals, out_avals, **params) -> Cost:
    """slice, dynamic_slice, gather: read what the result holds (and the indices), write it."""
    return Cost(0, nbytes(in_avals[1:]) + 2 * nbytes(out_avals))


def _scatter_add(in_avals, out_avals, **params) -> Cost:
    return Cost(in_avals[2].size, io_bytes(in_avals, out_avals))


def _dot_general(in_avals, out_avals, *, contracting_dims, **params) -> Cost:
    lhs = in_avals[0]
    k = math.prod(lhs.shape[i] for i in contracting_dims[0])
    return Cost(2 * out_avals[0].size * k, io_bytes(in_avals, out_avals))


def _conv_general(in_avals, out_avals, **params) -> Cost:
    rhs = in_avals[1]  # (O, C_in / groups, *window)
    return Cost(2 * out_avals[0].size * math.prod(rhs.shape[1:]), io_bytes(in_avals, out_avals))


_REDUCTIONS = (
    "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and", "reduce_or",
    "argmax", "argmin", "cumsum",
)
_MOVES = (
    "reshape", "transpose", "broadcast_in_dim", "pad", "concatenate", "reverse", "copy",
    "scatter", "dynamic_update_slice",
)

CORE_COST_RULES: dict[str, CostRule] = {
    **{name: elementwise_rule(f) for name, f in ELEMENTWISE_FLOPS.items()},
    **{name: _reduction for name in _REDUCTIONS},
    **{name: _moved for name in _MOVES},
    "sort": _sort,
    "argsort": _sort,
    "slice": _taken,
    "dynamic_slice": _taken,
    "gather": _taken,
    "scatter_add": _scatter_add,
    "dot_general": _dot_general,
    "conv_general": _conv_general,
}
"""Core primitive name -> its cost rule."""

__all__ = [
    "CORE_COST_RULES", "ELEMENTWISE_FLOPS", "TRANSCENDENTAL_FLOPS", "ZERO", "Cost", "CostRule",
    "elementwise_rule", "io_bytes", "nbytes",
]
