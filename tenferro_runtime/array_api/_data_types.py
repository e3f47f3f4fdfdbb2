"""Array API data-type functions: astype, can_cast, finfo, iinfo, isdtype, result_type.

Promotion is tenferro's (`tenferro_core.dtypes`): the Array API table within a
kind, and the operand of the higher kind across kinds (int + float -> the
float). `astype` from complex to a real dtype raises DTypeError: take
`real(x)` (or `abs(x)`) first, so no imaginary part is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError

from .. import lax
from ..tensor import Tensor
from ._helpers import check_tensor, is_scalar, resolve_device


def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """x converted to `dtype` (and moved to `device`); copy=False reuses x when nothing changes."""
    check_tensor("astype", x)
    dtype = D.as_dtype(dtype)
    if not isinstance(copy, bool):
        raise ArgumentError(f"astype: copy must be True or False, got {copy!r}")
    if x.dtype.kind == "c" and dtype.kind != "c":
        raise DTypeError(
            f"astype: casting {x.dtype} to {dtype} would drop the imaginary part; "
            f"take real(x) (or abs(x)) first and cast that"
        )
    moved = False
    if device is not None and resolve_device(device) != x.device:
        from ._creation import to_device

        x, moved = to_device(x, device), True
    if dtype is x.dtype:
        return lax.copy(x) if copy and not moved else x
    return lax.convert(x, new_dtype=dtype)


def _dtype_arg(name: str, obj: Any) -> D.DType:
    if isinstance(obj, D.DType):
        return obj
    d = getattr(obj, "dtype", None)
    if isinstance(d, D.DType):
        return d
    try:
        return D.as_dtype(obj)
    except (DTypeError, TypeError):  # TypeError: unhashable objects such as lists
        raise DTypeError(
            f"{name}: expected a dtype or a tensor, got {type(obj).__name__} {obj!r}; pass e.g. "
            f"tenferro_runtime.array_api.float32"
        ) from None


def can_cast(from_: Any, to: Any, /) -> bool:
    """True when promotion alone turns `from_` (a dtype or tensor) into `to`."""
    return D.can_cast(_dtype_arg("can_cast", from_), _dtype_arg("can_cast", to))


@dataclass(frozen=True)
class finfo_object:
    """Machine limits of a floating-point dtype (Python floats)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: D.DType


@dataclass(frozen=True)
class iinfo_object:
    """Machine limits of an integer dtype (Python ints)."""

    bits: int
    max: int
    min: int
    dtype: D.DType


_BF16_MAX = (2 - 2.0**-7) * 2.0**127
_BFLOAT16 = finfo_object(16, 2.0**-7, _BF16_MAX, -_BF16_MAX, 2.0**-126, D.bfloat16)


def finfo(type: Any, /) -> finfo_object:
    """Limits of a real or complex floating dtype; complex reports its real component."""
    d = D.real_of(_dtype_arg("finfo", type))
    if d.kind != "f":
        raise DTypeError(
            f"finfo: expected a floating-point or complex dtype, got {d}; use iinfo for integers"
        )
    if d is D.bfloat16:
        return _BFLOAT16
    f = np.finfo(d.numpy)
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min),
                        float(f.smallest_normal), d)


def iinfo(type: Any, /) -> iinfo_object:
    """Limits of an integer dtype."""
    d = _dtype_arg("iinfo", type)
    if d.kind not in "iu":
        raise DTypeError(
            f"iinfo: expected an integer dtype, got {d}; use finfo for floating-point dtypes"
        )
    i = np.iinfo(d.numpy)
    return iinfo_object(int(i.bits), int(i.max), int(i.min), d)


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether `dtype` is `kind`: a dtype, a kind name ('integral', ...) or a tuple of them."""
    if not isinstance(dtype, D.DType):
        raise DTypeError(
            f"isdtype: expected a tenferro dtype, got {type(dtype).__name__} {dtype!r}; "
            f"pass x.dtype for a tensor"
        )
    return D.isdtype(dtype, kind)


def result_type(*arrays_and_dtypes: Any) -> D.DType:
    """The promoted dtype of tensors, dtypes and Python scalars (scalars are weak; a float with
    integers gives the runtime's default float dtype, as ``int_tensor + 0.5`` does)."""
    dtypes, scalars = [], []
    for a in arrays_and_dtypes:
        if is_scalar(a):
            scalars.append(a)
        else:
            dtypes.append(_dtype_arg("result_type", a))
    if not dtypes:
        raise DTypeError(
            "result_type: needs at least one tensor or dtype; Python scalars alone have no "
            "tensor dtype (pass e.g. float64 alongside them)"
        )
    out = D.result_type(*dtypes)
    if scalars:
        default = resolve_device(None).runtime.default_float_dtype
        for s in scalars:
            out = D.promote_scalar(out, s, default)
    return out


__all__ = ["astype", "can_cast", "finfo", "iinfo", "isdtype", "result_type"]
