"""Shared internals of the namespace: conversion, promotion, broadcasting, axes.

Every namespace module builds on these; none of them touches backend buffers.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

import numpy as np

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, AxisError, DTypeError, ShapeError

from .. import lax, tracing
from ..runtime import Device, default_runtime
from ..tensor import Tensor
from ._args import as_axis

SCALAR_TYPES = (bool, int, float, complex)

_INT_RANGE = {d: (np.iinfo(d.numpy).min, np.iinfo(d.numpy).max) for d in D.INTEGER}


def fresh(x: Any) -> Any:
    """A new Tensor object over x's (immutable) buffer, so a later in-place update of x
    never shows through the result; tracers pass through. This context's observers
    (gradient tapes) see the identity edge as a `copy`, so gradients flow through it."""
    if type(x) is not Tensor:
        return x
    new = Tensor._new(x._buf, x._aval)
    tracing.observe(catalog.copy, (x,), {}, new)
    return new


def is_scalar(x: Any) -> bool:
    return isinstance(x, SCALAR_TYPES)


def resolve_device(device: Any) -> Device:
    """A Device from None (the default), a name or a Device."""
    if isinstance(device, Device):
        return device
    return default_runtime().device(device)


def check_tensor(name: str, x: Any, what: str = "x") -> Tensor:
    if not isinstance(x, Tensor):
        raise ArgumentError(
            f"{name}: {what} must be a tenferro Tensor, got {type(x).__name__}; "
            f"wrap it with tenferro_runtime.array_api.asarray"
        )
    return x


def check_scalar_fits(name: str, value: Any, dtype: D.DType) -> None:
    """Python int scalars must fit the integer dtype they combine with (as in NumPy 2)."""
    if dtype in _INT_RANGE and isinstance(value, int) and not isinstance(value, bool):
        lo, hi = _INT_RANGE[dtype]
        if not lo <= value <= hi:
            raise DTypeError(
                f"{name}: Python int {value} is out of range for {dtype} ({lo}..{hi}); "
                f"convert the tensor to a wider dtype first"
            )


def full(shape: Sequence[int], value: Any, dtype: D.DType, device: Device) -> Tensor:
    return lax.full(shape=tuple(shape), fill_value=value, dtype=dtype, device=device)


def iota(shape: Sequence[int], dim: int, device: Device) -> Tensor:
    """Indices along axis `dim` of `shape`, in the default index dtype."""
    return lax.iota(dtype=D.DEFAULT_INDEX, shape=tuple(shape), dimension=dim, device=device)


def scalar_like(name: str, value: Any, dtype: D.DType, device: Device) -> Tensor:
    """A 0-d tensor of `dtype` holding a Python scalar."""
    check_scalar_fits(name, value, dtype)
    if isinstance(value, complex) and dtype.kind != "c":
        raise DTypeError(f"{name}: cannot combine a complex scalar with a {dtype} tensor")
    return full((), value, dtype, device)


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Array API broadcasting of shapes; ShapeError naming the incompatible sizes."""
    if len(shapes) == 1:
        return shapes[0]
    nd = builtins.max(len(s) for s in shapes)
    out = []
    for i in range(-nd, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i:
                n = s[i]
                if n != 1:
                    if size not in (1, n):
                        raise ShapeError(
                            f"shapes {', '.join(map(str, shapes))} cannot be broadcast together: "
                            f"axis {i} has sizes {size} and {n}; sizes must match or be 1"
                        )
                    size = n
        out.append(size)
    return tuple(out)


def broadcast_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    if x.shape == shape:
        return x
    if len(shape) < x.ndim or broadcast_shapes(x.shape, shape) != shape:
        raise ShapeError(f"cannot broadcast a tensor of shape {x.shape} to shape {shape}")
    return lax.broadcast_in_dim(
        x, shape=shape, broadcast_dimensions=tuple(range(len(shape) - x.ndim, len(shape)))
    )


def convert(x: Tensor, dtype: D.DType) -> Tensor:
    return x if x.dtype is dtype else lax.convert(x, new_dtype=dtype)


def promote(name: str, *args: Any) -> list[Tensor]:
    """Tensors of one dtype from tensors, NumPy arrays and scalars, and Python scalars (Array API
    promotion). The one place non-tensor operands are converted: a NumPy array or NumPy scalar
    becomes a tensor of its own dtype on the first tensor's device and promotes as a tensor
    (``float32 tensor + float64 ndarray`` is float64, as in NumPy 2); a Python scalar is weak
    (the tensors' dtype wins within its kind; a Python float with integer tensors gives the
    runtime's default float dtype)."""
    tensors = [a for a in args if isinstance(a, Tensor)]
    if not tensors:
        raise ArgumentError(
            f"{name}: at least one argument must be a tenferro Tensor, got "
            f"{', '.join(type(a).__name__ for a in args)}"
        )
    device = tensors[0].device
    if len(tensors) != len(args):
        args = numpy_operands(name, args, device)
        tensors = [a for a in args if isinstance(a, Tensor)]
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        if t.dtype is not dtype:
            dtype = D.promote_types(dtype, t.dtype)
    for a in args:
        if not isinstance(a, Tensor):
            if not is_scalar(a):
                raise ArgumentError(
                    f"{name}: expected a Tensor, a NumPy array or a Python scalar, got "
                    f"{type(a).__name__}; wrap array-likes with asarray"
                )
            dtype = D.promote_scalar(dtype, a, default_float(device))
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(convert(a, dtype))
        else:
            out.append(scalar_like(name, a, dtype, device))
    return out


def numpy_operands(name: str, args: tuple, device: Device | None = None) -> tuple:
    """`args` with each NumPy array or NumPy scalar made a tensor of its own dtype on `device`
    (default: the first tensor's), once; other arguments as they are."""
    if not any(isinstance(a, (np.ndarray, np.generic)) for a in args):
        return args
    from ._creation import asarray  # creation builds on these helpers

    if device is None:
        device = next((a.device for a in args if isinstance(a, Tensor)), None)
    out = []
    for a in args:
        if isinstance(a, (np.ndarray, np.generic)):
            if a.dtype.kind not in "biufc":
                raise ArgumentError(
                    f"{name}: a NumPy operand must hold numbers (bool, int, float or complex), got "
                    f"NumPy dtype {a.dtype}; convert it with .astype() first")
            a = asarray(a, device=device)
        out.append(a)
    return tuple(out)


def default_float(device: Device) -> D.DType:
    """The default floating dtype of `device`'s runtime (`Runtime.default_float_dtype`)."""
    return device.runtime.default_float_dtype


# Python scalar type -> kind rank; a scalar keeps a tensor's dtype when its rank is not higher.
_SCALAR_RANK = {bool: 0, int: 1, float: 2, complex: 3}
_DTYPE_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def constant(name: str, value: Any, aval: Any) -> Tensor:
    """A tensor like `aval` (shape, dtype, device) filled with a Python scalar, cached per device.

    Loops like ``x * 0.5`` then cost one kernel, not three. Buffers are never
    mutated, so a cached one can back many tensors; each call gets a fresh wrapper.
    """
    if type(value) in (float, complex) and (value == 0 or value != value):
        return _constant(name, value, aval)  # -0.0 == 0.0 and nan != nan: never cached
    buf = aval.device.constant(type(value), value, aval, name)
    t = _new_tensor(Tensor)
    t._buf = buf
    t._aval = aval
    return t


def constant_buffer(name: str, value: Any, aval: Any) -> Any:
    """The buffer of a dense (or broadcast) constant like `aval` (the device's constant memo)."""
    return _constant(name, value, aval)._buf


def _constant(name: str, value: Any, aval: Any) -> Tensor:
    if aval.size <= _DENSE_CONSTANT_MAX:  # kernels run faster on dense operands than on broadcasts
        check_scalar_fits(name, value, aval.dtype)
        return full(aval.shape, value, aval.dtype, aval.device)
    return broadcast_to(scalar_like(name, value, aval.dtype, aval.device), aval.shape)


_new_tensor = object.__new__
_DENSE_CONSTANT_MAX = 4096


def elementwise_operands(name: str, *args: Any) -> tuple[Tensor, ...]:
    """Promote, then broadcast to one shape: the operands of an elementwise primitive."""
    if len(args) == 2:  # tensors or tracers of one aval, or one with a Python scalar of its kind
        a, b = args
        if isinstance(a, Tensor):
            av = a._aval
            if isinstance(b, Tensor):
                if av is b._aval:
                    return (a, b)
            elif _SCALAR_RANK.get(type(b), 9) <= _DTYPE_RANK[av.dtype.kind]:
                return (a, constant(name, b, av))
        elif isinstance(b, Tensor) and _SCALAR_RANK.get(type(a), 9) <= _DTYPE_RANK[b._aval.dtype.kind]:
            return (constant(name, a, b._aval), b)
    ts = promote(name, *args)
    shape = broadcast_shapes(*(t.shape for t in ts))
    return tuple([broadcast_to(t, shape) for t in ts])


def normalize_axis(name: str, axis: Any, ndim: int) -> int:
    """A non-negative axis of a rank-`ndim` tensor; ArgumentError for a bool, float or str axis."""
    ax = as_axis(name, axis)
    if not -ndim <= ax < ndim:
        raise AxisError(
            f"{name}: axis {ax} is out of range for a tensor of rank {ndim}; "
            f"expected {-ndim} <= axis < {ndim}"
        )
    return ax % ndim


def normalize_axes(name: str, axis: Any, ndim: int) -> tuple[int, ...]:
    """None -> all axes; an int or tuple of ints -> sorted non-negative axes, no repeats."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(name, a, ndim) for a in axis)
    elif not hasattr(axis, "__index__") or isinstance(axis, (str, bytes)):
        raise ArgumentError(f"{name}: axis must be None, an int or a tuple of ints, got "
                            f"{type(axis).__name__} {axis!r}")
    else:
        axes = (normalize_axis(name, axis, ndim),)
    if len(set(axes)) != len(axes):
        raise AxisError(f"{name}: repeated axis in {axis}")
    return tuple(sorted(axes))


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    shape = tuple(shape)
    return x if x.shape == shape else lax.reshape(x, new_sizes=shape)


def expand_reduced(x: Tensor, in_shape: tuple[int, ...], axes: tuple[int, ...]) -> Tensor:
    """Reinsert reduced axes as size-1 axes (keepdims)."""
    return reshape(x, tuple(1 if i in axes else n for i, n in enumerate(in_shape)))
