"""Helpers the elementwise functions share (those of _elementwise.py and of the special-value
modules built on it): operand dtypes, promotion to floating point, filled tensors."""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError

from .. import lax
from ._helpers import check_tensor, default_float, elementwise_operands


def dtype_of(name: str, x: Any) -> D.DType:
    """x's dtype; ArgumentError naming `name` when x is not a tensor."""
    try:
        return x.dtype
    except AttributeError:
        check_tensor(name, x)
        raise


def to_inexact(name: str, x: Any) -> Any:
    """x when floating or complex; integer tensors convert to the default float."""
    kind = dtype_of(name, x).kind
    if kind in "fc":
        return x
    if kind in "iu":
        return lax.convert(x, new_dtype=default_float(x.device))
    raise DTypeError(
        f"{name}: expected a floating-point, complex or integer tensor, got bool; "
        f"convert it first, e.g. astype(x, float64)"
    )


def float_operands(name: str, x1: Any, x2: Any, real: bool = False) -> list:
    """Promoted, broadcast operands of a floating-point binary function."""
    ops = elementwise_operands(name, x1, x2)
    kind = ops[0].dtype.kind
    if kind == "f" or (kind == "c" and not real):
        return ops
    if kind in "iu":
        return [lax.convert(t, new_dtype=default_float(t.device)) for t in ops]
    wanted = "real floating-point or integer" if real else "floating-point, complex or integer"
    raise DTypeError(
        f"{name}: expected {wanted} operands, got {ops[0].dtype}"
        + ("; take real() or abs() of complex inputs first" if kind == "c" else
           "; convert bool inputs with astype first")
    )


def full_like_t(x: Any, value: Any, dtype: D.DType | None = None) -> Any:
    """A tensor of x's shape (and dtype) filled with a Python scalar."""
    return lax.full(shape=x.shape, fill_value=value, dtype=dtype or x.dtype, device=x.device)


__all__ = ["dtype_of", "float_operands", "full_like_t", "to_inexact"]
