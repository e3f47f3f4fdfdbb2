"""Sample frequencies and shifts: fftfreq, rfftfreq, fftshift, ifftshift.

Built from core primitives (iota, select) and `roll`, so they run on every backend and
the shifts differentiate through the core rules.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError
from tenferro_runtime import lax
from tenferro_runtime.array_api import roll
from tenferro_runtime.array_api._helpers import check_tensor, convert, fresh, normalize_axes, resolve_device
from tenferro_runtime.tensor import Tensor

from ._args import check_bytes, length


def _spacing(name: str, d: Any) -> float:
    if isinstance(d, bool) or not isinstance(d, numbers.Real) or d == 0 or math.isnan(d):
        raise ArgumentError(f"{name}: d (the sample spacing) must be a nonzero real number, got {d!r}")
    return float(d)


def _out_dtype(name: str, dtype: Any) -> D.DType:
    dtype = D.DEFAULT_FLOAT if dtype is None else D.as_dtype(dtype)
    if dtype.kind != "f":
        raise DTypeError(
            f"{name}: dtype must be a real floating-point dtype, got {dtype}; use float64 or float32"
        )
    return dtype


def _frequencies(name: str, n: Any, d: Any, dtype: Any, device: Any, count: Any) -> Tensor:
    """k / (n d) for k = 0, 1, ..., with k - n in place of k from `count(n)` on."""
    n = length(name, n, optional=False)
    scale = 1.0 / (n * _spacing(name, d))
    dtype, dev = _out_dtype(name, dtype), resolve_device(device)
    work = D.float64 if dev.supports(D.float64) else dtype
    size, split = count(n)
    check_bytes(name, "the result", (size,), work)
    k = lax.iota(dtype=work, shape=(size,), dimension=0, device=dev)

    def full(v):
        return lax.full(shape=(size,), fill_value=v, dtype=work, device=dev)

    if split < size:
        k = lax.select(lax.lt(k, full(float(split))), k, lax.sub(k, full(float(n))))
    return convert(lax.mul(k, full(scale)), dtype)


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Tensor:
    """[0, 1, ..., (n-1)//2, -(n//2), ..., -1] / (d n): the frequencies of an n-point fft."""
    return _frequencies("fftfreq", n, d, dtype, device, lambda n: (n, (n + 1) // 2))


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Tensor:
    """[0, 1, ..., n//2] / (d n): the frequencies of an n-point rfft."""
    return _frequencies("rfftfreq", n, d, dtype, device, lambda n: (n // 2 + 1, n // 2 + 1))


def _shift(name: str, x: Any, axes: Any, sign: int) -> Tensor:
    check_tensor(name, x)
    if isinstance(axes, bool) or (isinstance(axes, (tuple, list)) and any(isinstance(a, bool) for a in axes)):
        raise ArgumentError(f"{name}: axes must be an int or a tuple of ints, not bool; got {axes!r}")
    axes = normalize_axes(name, axes, x.ndim)
    if not axes:
        return fresh(x)
    return roll(x, tuple(sign * (x.shape[a] // 2) for a in axes), axis=axes)


def fftshift(x: Tensor, /, *, axes: int | tuple[int, ...] | None = None) -> Tensor:
    """Move the zero frequency to the center: roll each axis (all by default) by n//2."""
    return _shift("fftshift", x, axes, 1)


def ifftshift(x: Tensor, /, *, axes: int | tuple[int, ...] | None = None) -> Tensor:
    """Inverse of fftshift: roll each axis by -(n//2)."""
    return _shift("ifftshift", x, axes, -1)


__all__ = ["fftfreq", "rfftfreq", "fftshift", "ifftshift"]
