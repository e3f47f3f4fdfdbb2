"""Creation functions and host/device transfer."""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError

from ..tensor import Tensor
from ._helpers import convert, full as _full, resolve_device

_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def _natural_dtype(host: np.ndarray) -> D.DType:
    if host.dtype == object:
        raise ShapeError(
            "asarray: expected a (nested) sequence of numbers with a regular shape, got a ragged "
            "sequence or non-numeric objects"
        )
    if host.dtype.kind in "US":
        raise DTypeError(f"asarray: strings are not supported, got NumPy dtype {host.dtype}")
    return D.from_numpy(host.dtype)


def _host_from_python(obj: Any, dtype: D.DType | None) -> np.ndarray:
    try:
        host = np.asarray(obj)
    except (ValueError, OverflowError) as exc:
        raise ShapeError(f"asarray: cannot convert {type(obj).__name__} to an array: {exc}") from None
    if host.dtype.kind == "O" and isinstance(obj, int):
        raise DTypeError(f"asarray: Python int {obj} does not fit in int64 or uint64")
    natural = _natural_dtype(host)
    if host.dtype.kind == "i" and host.dtype != np.int64:
        natural = D.int64  # NumPy picks uint64 only for ints beyond int64
    if dtype is None:
        dtype = natural
    elif _KIND_RANK[dtype.kind] < _KIND_RANK[natural.kind]:
        raise DTypeError(
            f"asarray: Python {natural.name} data cannot be stored as {dtype} without losing "
            f"information; convert explicitly with astype after creating the tensor"
        )
    if dtype.kind in "iu" and host.size:
        info = np.iinfo(dtype.numpy)
        lo, hi = host.min(), host.max()
        if lo < info.min or hi > info.max:
            raise DTypeError(
                f"asarray: values in [{lo}, {hi}] do not fit {dtype} ({info.min}..{info.max}); "
                f"pick a wider dtype"
            )
    return host.astype(dtype.numpy, copy=False)


def from_host(host: np.ndarray, device: Any = None) -> Tensor:
    """A tensor on `device` from a NumPy array of a tenferro dtype."""
    dev = resolve_device(device)
    dtype = D.from_numpy(host.dtype)
    if not dev.supports(dtype):
        raise DTypeError(
            f"device {dev} does not support {dtype}; it supports "
            f"{sorted(d.name for d in dev.dtypes)}"
        )
    host = np.ascontiguousarray(host)
    return Tensor._new(dev.backend.from_host(host, dev.id), Aval(host.shape, dtype, dev))


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Tensor:
    """Array API `asarray`: tensors, NumPy arrays, DLPack objects, Python scalars and sequences."""
    dtype = None if dtype is None else D.as_dtype(dtype)
    if isinstance(obj, Tensor):
        out = obj
        if device is not None and resolve_device(device) != obj.device:
            if copy is False:
                raise ArgumentError("asarray: copy=False but the tensor is on another device")
            out = to_device(out, device)
        if dtype is not None and dtype is not out.dtype:
            if copy is False:
                raise ArgumentError(
                    f"asarray: copy=False but converting {out.dtype} to {dtype} needs a copy"
                )
            return convert(out, dtype)
        if copy and out is obj:
            from .. import lax

            return lax.copy(out)
        return out
    if isinstance(obj, (np.ndarray, np.generic)):
        host = np.asarray(obj)
        _natural_dtype(host)
        if dtype is not None and host.dtype != dtype.numpy:
            if copy is False:
                raise ArgumentError(f"asarray: copy=False but casting {host.dtype} to {dtype} copies")
            host = host.astype(dtype.numpy)
        elif copy:
            host = host.copy()
    elif hasattr(obj, "__dlpack__") and not isinstance(obj, (list, tuple)):
        return asarray(from_dlpack(obj, device=device, copy=copy), dtype=dtype)
    else:
        if copy is False:
            raise ArgumentError("asarray: copy=False is impossible for Python scalars and sequences")
        host = _host_from_python(obj, dtype)
    return from_host(host, device)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """Array API `from_dlpack`: share memory with any `__dlpack__` object where possible."""
    if not hasattr(x, "__dlpack__"):
        raise ArgumentError(
            f"from_dlpack: expected an object with __dlpack__, got {type(x).__name__}"
        )
    dev = resolve_device(device)
    buf = dev.backend.from_dlpack(x, dev.id)
    shape, dtype = dev.backend.describe(buf)
    t = Tensor._new(buf, Aval(tuple(shape), dtype, dev))
    if copy:
        from .. import lax

        return lax.copy(t)
    return t


def to_device(x: Tensor, device: Any, /, *, stream: Any = None) -> Tensor:
    """Move a tensor to another device (an explicit host round trip)."""
    dst = resolve_device(device)
    if dst == x.device and dst.runtime is x.device.runtime:
        return x
    if not dst.supports(x.dtype):
        raise DTypeError(f"to_device: {dst} does not support {x.dtype}; convert with astype first")
    host = np.ascontiguousarray(x.device.backend.to_host(x._buf))
    return Tensor._new(dst.backend.from_host(host, dst.id), Aval(x.shape, x.dtype, dst))


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(int(s) if not isinstance(s, bool) else None for s in shape)
    except TypeError:
        raise ArgumentError(f"{name}: shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(s is None or s < 0 for s in out):
        raise ShapeError(f"{name}: shape entries must be non-negative ints, got {shape!r}")
    return out


def full(shape: Any, fill_value: bool | int | float | complex, *, dtype: Any = None,
         device: Any = None) -> Tensor:
    """Array API `full`."""
    if not isinstance(fill_value, (bool, int, float, complex)):
        raise ArgumentError(f"full: fill_value must be a Python scalar, got {type(fill_value).__name__}")
    if dtype is None:
        dtype = D.as_dtype(type(fill_value))
    dtype = D.as_dtype(dtype)
    from ._helpers import scalar_like

    dev = resolve_device(device)
    if D.promote_scalar(dtype, fill_value) is not dtype and dtype.kind != "c":
        raise DTypeError(f"full: fill_value {fill_value!r} does not fit dtype {dtype} without a cast")
    scalar_like("full", fill_value, dtype, dev)  # checks the value fits
    return _full(_shape("full", shape), fill_value, dtype, dev)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 0.0 if dtype is None else False if D.as_dtype(dtype) is D.bool_ else 0,
                dtype=dtype or D.DEFAULT_FLOAT, device=device)


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 1.0 if dtype is None else True if D.as_dtype(dtype) is D.bool_ else 1,
                dtype=dtype or D.DEFAULT_FLOAT, device=device)


def empty(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros(shape, dtype=dtype, device=device)


def _like(name: str, x: Tensor, value: Any, dtype: Any, device: Any) -> Tensor:
    from ._helpers import check_tensor

    check_tensor(name, x)
    dtype = x.dtype if dtype is None else D.as_dtype(dtype)
    if dtype is D.bool_:
        value = bool(value)
    elif dtype.kind in "iu" and isinstance(value, float) and value.is_integer():
        value = int(value)
    return full(x.shape, value, dtype=dtype, device=x.device if device is None else device)


def zeros_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    return _like("zeros_like", x, 0, dtype, device)


def ones_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    return _like("ones_like", x, 1, dtype, device)


def empty_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros_like(x, dtype=dtype, device=device)


def full_like(x: Tensor, /, fill_value: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return _like("full_like", x, fill_value, dtype, device)


__all__ = [
    "asarray", "from_dlpack", "full", "zeros", "ones", "empty", "zeros_like", "ones_like",
    "empty_like", "full_like",
]
