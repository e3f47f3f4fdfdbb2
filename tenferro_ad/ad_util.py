"""Symbolic zeros and undefined primals: the vocabulary of AD rules.

JVP rule:       ``jvp(primals, tangents, **params) -> (primal_out, tangent_out)``
    `tangents[i]` is a Tensor (or tracer) or a `Zero`; never all Zero (the
    machinery skips the rule then). `tangent_out` may be a `Zero`. For
    multi-result primitives both outputs are tuples. Rules are written with
    `tenferro_runtime.lax`, so they can be traced and differentiated again.

Linear op:      no jvp rule needed; `tenferro_ad.jvp.linear_jvp` derives it from
    `Primitive.linear` (the operands the op is jointly linear in).

VJP rule:       ``vjp(primals, **params) -> (primal_out, backward)`` with ``backward(ct)`` a
    tuple with one cotangent per operand (None for a zero one); tuples for multi-result
    primitives. Reverse mode only: it becomes a `custom_vjp`-style linear op.

Transpose rule: ``transpose(ct, *operands, **params) -> tuple`` with one entry per
    operand: the cotangent for each `UndefinedPrimal` operand (a Tensor or `Zero`),
    None for the others. `ct` is a Tensor or a `Zero`. Operands the primitive is
    not linear in are concrete values (Tensors or tracers).

Complex numbers follow JAX's convention: JVPs are the real-linear maps of the
functions, transposes are plain (unconjugated) transposes, and
``grad(f)(z)`` of a real-valued f is the conjugate of PyTorch's ``z.grad``.
"""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval


class Zero:
    """A symbolic zero tangent or cotangent of a given aval (never materialized)."""

    __slots__ = ("aval",)

    def __init__(self, aval: Aval):
        self.aval = aval

    def __repr__(self) -> str:
        return f"Zero({self.aval.str_short()})"


class UndefinedPrimal:
    """Marks a linear operand whose cotangent a transpose rule must produce."""

    __slots__ = ("aval",)

    def __init__(self, aval: Aval):
        self.aval = aval

    def __repr__(self) -> str:
        return f"UndefinedPrimal({self.aval.str_short()})"


def is_zero(t: Any) -> bool:
    return type(t) is Zero


def is_undefined(x: Any) -> bool:
    return type(x) is UndefinedPrimal


def zeros(aval: Aval) -> Any:
    """A materialized zero tensor of `aval` (shape, dtype, device): a concrete constant, from
    the device's constant memo (buffers are never mutated, so one can back many tensors)."""
    from tenferro_runtime.array_api._helpers import constant

    return constant("zeros", False if aval.dtype is D.bool_ else 0, aval)


def ones(aval: Aval) -> Any:
    """A materialized tensor of ones of `aval` (a gradient's seed), from the constant memo."""
    from tenferro_runtime.array_api._helpers import constant

    one = True if aval.dtype is D.bool_ else 1.0 if aval.dtype.kind in "fc" else 1
    return constant("ones", one, aval)


def instantiate(t: Any) -> Any:
    """`t` itself, or zeros for a `Zero`."""
    return zeros(t.aval) if type(t) is Zero else t


def add_tangents(a: Any, b: Any) -> Any:
    """a + b where either may be a `Zero`."""
    from tenferro_runtime import lax

    if type(a) is Zero:
        return b
    if type(b) is Zero:
        return a
    return lax.add(a, b)
