"""Creation functions and host/device transfer."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError

from .. import lax
from ..tensor import Tensor
from ._args import MAX_ELEMENTS, as_int, as_shape, check_count, check_size
from ._helpers import convert, resolve_device
from ._helpers import full as _full

_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def _python_dtype(pytype: type, device: Any) -> D.DType:
    """The dtype of Python `pytype` values on `device`: floats (and complex numbers) in its
    runtime's default float dtype (`Runtime.default_float_dtype`), ints int64, bools bool."""
    if pytype is float:
        return device.runtime.default_float_dtype
    if pytype is complex:
        return D.complex_of(device.runtime.default_float_dtype)
    return D.as_dtype(pytype)


def _natural_dtype(host: np.ndarray) -> D.DType:
    if host.dtype == object:
        raise ShapeError(
            "asarray: expected a (nested) sequence of numbers with a regular shape, got a ragged "
            "sequence or non-numeric objects"
        )
    if host.dtype.kind in "US":
        raise DTypeError(f"asarray: strings are not supported, got NumPy dtype {host.dtype}")
    return D.from_numpy(host.dtype)


_INT_ORDER = (D.int8, D.uint8, D.int16, D.uint16, D.int32, D.uint32, D.int64, D.uint64)


def _exact_ints(obj: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """`obj` as an object array of Python ints (None unless every element is a true int)."""
    try:
        objs = np.array(obj, dtype=object)
    except (ValueError, TypeError):
        return None
    if objs.shape != shape or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in objs.flat
    ):
        return None
    return objs


def _check_int_range(lo: int, hi: int, dtype: D.DType) -> None:
    """The one refusal of integers beyond `dtype`'s range (a scalar or a sequence alike)."""
    info = np.iinfo(dtype.numpy)
    if info.min <= lo and hi <= info.max:
        return
    wider = next((d for d in _INT_ORDER if np.iinfo(d.numpy).min <= lo and hi <= np.iinfo(d.numpy).max),
                 None)
    advice = (f"pick a dtype that holds them, e.g. {wider}" if wider is not None else
              "no integer dtype holds them: use a float dtype (dtype=float64) or smaller values")
    raise DTypeError(
        f"asarray: values in [{lo}, {hi}] do not fit {dtype} ({info.min}..{info.max}); {advice}"
    )


def _host_from_python(obj: Any, dtype: D.DType | None) -> np.ndarray:
    """A host array of Python scalars or (nested) sequences, in `dtype` (or the natural one).

    Integers are checked against an integer `dtype` as Python ints, exactly, so a scalar and a
    sequence holding the same values are refused with the same DTypeError (NumPy may have made
    float64 or objects of them: [0, 2**64 - 1], 2**64)."""
    try:
        host = np.asarray(obj)
    except (ValueError, OverflowError) as exc:
        raise ShapeError(f"asarray: cannot convert {type(obj).__name__} to an array: {exc}") from None
    if dtype is not None and dtype.kind in "iu" and host.size:
        exact = _exact_ints(obj, host.shape) if host.dtype.kind in "fO" else None
        if exact is not None:
            _check_int_range(int(min(exact.flat)), int(max(exact.flat)), dtype)
            host = exact.astype(dtype.numpy)
        elif host.dtype.kind in "iu":
            _check_int_range(int(host.min()), int(host.max()), dtype)
    if host.dtype.kind == "O" and host.size and all(isinstance(v, numbers.Number) for v in host.flat):
        big = max((v for v in host.flat if isinstance(v, int)), key=abs, default=None)
        if big is not None and dtype is not None and dtype.kind in "fc":
            host = host.astype(dtype.numpy)  # huge ints into a float dtype, as asked
        elif big is not None:  # numbers NumPy kept as objects: an int beyond int64 and uint64
            raise DTypeError(
                f"asarray: Python int {big} does not fit in int64 or uint64 (the largest integer "
                f"dtypes); use a float dtype (dtype=float64) or smaller values")
    natural = _natural_dtype(host)
    if host.dtype.kind == "i" and host.dtype != np.int64:
        natural = D.int64  # NumPy picks uint64 only for ints beyond int64
    if dtype is None:
        dtype = natural
    elif host.size and _KIND_RANK[dtype.kind] < _KIND_RANK[natural.kind]:
        raise DTypeError(
            f"asarray: Python {natural.name} data cannot be stored as {dtype} without losing "
            f"information; convert explicitly with astype after creating the tensor"
        )
    return host.astype(dtype.numpy, copy=False)


def _canonical(host: np.ndarray, dtype: D.DType) -> np.ndarray:
    """`host` (C-contiguous) with `dtype`'s own NumPy type: NumPy spells some dtypes two ways
    (np.ulonglong and np.uint64 are equal dtypes of distinct types on Linux; NumPy gives the
    former for Python ints beyond int64), and backends (torch.from_numpy) may take only one."""
    host = np.asarray(host, order="C")
    if host.dtype.type is not dtype.numpy.type:
        host = host.view(dtype.numpy)
    return host


def from_host(host: np.ndarray, device: Any = None) -> Tensor:
    """A tensor on `device` from a NumPy array of a tenferro dtype."""
    dev = resolve_device(device)
    if isinstance(host, np.ndarray) and not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    dtype = D.from_numpy(host.dtype)
    if not dev.supports(dtype):
        raise DTypeError(
            f"device {dev} does not support {dtype}; it supports "
            f"{sorted(d.name for d in dev.dtypes)}"
        )
    host = _canonical(host, dtype)
    return Tensor._new(dev.backend.from_host(host, dev.id), Aval(host.shape, dtype, dev))


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Tensor:
    """Array API `asarray`: tensors, NumPy arrays, DLPack objects, Python scalars and sequences.
    A host-side copy that cannot be allocated is a `KernelMemoryError` (a MemoryError)."""
    try:
        return _asarray(obj, dtype, device, copy)
    except MemoryError as exc:
        from tenferro_core.errors import KernelMemoryError

        from ..kernels import memory_error

        if isinstance(exc, KernelMemoryError):
            raise
        where = device if device is not None else "the default device"
        raise memory_error("asarray (a host-side copy of the data)", where, exc) from exc


def _asarray(obj: Any, dtype: Any, device: Any, copy: bool | None) -> Tensor:
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
        if not host.dtype.isnative:
            if copy is False:
                raise ArgumentError(
                    f"asarray: copy=False but the NumPy array is in non-native byte order "
                    f"({host.dtype.str}); converting it to native order copies"
                )
            host = host.astype(host.dtype.newbyteorder("="))
            copy = None  # already a fresh array
        natural = _natural_dtype(host)
        if dtype is not None and host.dtype != dtype.numpy:
            if host.size and _KIND_RANK[dtype.kind] < _KIND_RANK[natural.kind]:
                raise DTypeError(
                    f"asarray: a NumPy {natural} array cannot be stored as {dtype} without "
                    f"losing information (the {'imaginary part' if natural.kind == 'c' else 'fraction'}"
                    f"); convert explicitly with astype after creating the tensor")
            if copy is False:
                raise ArgumentError(f"asarray: copy=False but casting {host.dtype} to {dtype} copies")
            host = host.astype(dtype.numpy)
        elif copy:
            host = host.copy()
    elif hasattr(obj, "__dlpack__") and not isinstance(obj, (list, tuple)):
        return _asarray(from_dlpack(obj, device=device, copy=copy), dtype, None, None)
    else:
        if copy is False:
            raise ArgumentError("asarray: copy=False is impossible for Python scalars and sequences")
        host = _host_from_python(obj, dtype)
        if dtype is None and host.dtype.type in (np.float64, np.complex128):
            want = _python_dtype(float if host.dtype.kind == "f" else complex, resolve_device(device))
            if want.numpy != host.dtype and _python_numbers(obj):
                host = host.astype(want.numpy)
    return from_host(host, device)


def _python_numbers(obj: Any) -> bool:
    """Whether `obj` is a Python number or a (nested) list/tuple of them only (no arrays or
    tensors, whose own dtype is kept)."""
    if isinstance(obj, (list, tuple)):
        return all(_python_numbers(v) for v in obj)
    return type(obj) in (bool, int, float, complex)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """Array API `from_dlpack`: share memory with any `__dlpack__` object where possible.

    Without `device`, a backend that claims x's type takes it (a torch.Tensor lands on
    torch:<its device>, a NumPy array on numpy:cpu); anything else goes to the default device.
    """
    if not hasattr(x, "__dlpack__"):
        raise ArgumentError(
            f"from_dlpack: expected an object with __dlpack__, got {type(x).__name__}"
        )
    dev = None
    if device is None:
        from ..runtime import default_runtime

        dev = default_runtime().device_of(x)
    dev = dev or resolve_device(device)
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
    host = _canonical(x.device.backend.to_host(x._buf), x.dtype)
    return Tensor._new(dst.backend.from_host(host, dst.id), Aval(x.shape, x.dtype, dst))


def _shape(name: str, shape: Any, itemsize: int = 1) -> tuple[int, ...]:
    return as_shape(name, shape, itemsize=itemsize)


def full(shape: Any, fill_value: bool | int | float | complex, *, dtype: Any = None,
         device: Any = None) -> Tensor:
    """Array API `full`."""
    if not isinstance(fill_value, (bool, int, float, complex)):
        raise ArgumentError(f"full: fill_value must be a Python scalar, got {type(fill_value).__name__}")
    dev = resolve_device(device)
    dtype = _python_dtype(type(fill_value), dev) if dtype is None else D.as_dtype(dtype)
    from ._helpers import check_scalar_fits

    if D.promote_scalar(dtype, fill_value) is not dtype and dtype.kind != "c":
        raise DTypeError(f"full: fill_value {fill_value!r} does not fit dtype {dtype} without a cast")
    check_scalar_fits("full", fill_value, dtype)
    return _full(_shape("full", shape, dtype.itemsize), fill_value, dtype, dev)


def zeros(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 0.0 if dtype is None else False if D.as_dtype(dtype) is D.bool_ else 0,
                dtype=dtype, device=device)


def ones(shape: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return full(shape, 1.0 if dtype is None else True if D.as_dtype(dtype) is D.bool_ else 1,
                dtype=dtype, device=device)


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



# ---------------------------------------------------------------- ranges, grids, triangles
# Built from iota/full/compare/select primitives, so they run on any backend.


def _index_arg(name: str, what: str, v: Any, nonneg: bool = True) -> int:
    if nonneg:
        return check_count(name, what, v)
    return as_int(name, what, v)


def _number_arg(name: str, what: str, v: Any, complex_ok: bool = False) -> int | float | complex:
    allowed = numbers.Number if complex_ok else numbers.Real
    if isinstance(v, bool) or not isinstance(v, allowed):
        kinds = "an int, float or complex" if complex_ok else "an int or float"
        raise ArgumentError(f"{name}: {what} must be {kinds} Python scalar, got {type(v).__name__} {v!r}")
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    return complex(v)


def _wrap_int(v: int, dtype: D.DType) -> int:
    """v modulo 2**bits, in dtype's range: fixed-width arithmetic then stays exact."""
    m = v % (1 << dtype.bits)
    return m - (1 << dtype.bits) if dtype.kind == "i" and m >= 1 << (dtype.bits - 1) else m


def _work_dtype(dev: Any, preferred: D.DType, fallback: D.DType) -> D.DType:
    return preferred if dev.supports(preferred) else fallback


def arange(start: int | float, /, stop: int | float | None = None, step: int | float = 1, *,
           dtype: Any = None, device: Any = None) -> Tensor:
    """Values start, start + step, ... up to (excluding) stop; ceil((stop - start) / step) of them."""
    start = _number_arg("arange", "start", start)
    step = _number_arg("arange", "step", step)
    if stop is None:
        start, stop = 0, start
    else:
        stop = _number_arg("arange", "stop", stop)
    args = (start, stop, step)
    floats = any(isinstance(v, float) for v in args)
    dev = resolve_device(device)
    dtype = _python_dtype(float if floats else int, dev) if dtype is None else D.as_dtype(dtype)
    if dtype is D.bool_:
        raise DTypeError("arange: expected a numeric dtype, got bool; compare an integer arange instead")
    if step == 0:
        raise ShapeError("arange: step must be nonzero, got 0")
    if floats:
        if not all(math.isfinite(v) for v in args):
            raise ShapeError(f"arange: start, stop and step must be finite, got {args}")
        ratio = (stop - start) / step
        if not math.isfinite(ratio):  # e.g. arange(-1e308, 1e308): the count overflows a float
            raise ShapeError(f"arange: {args} gives too many values; a tensor can hold at most "
                             f"{MAX_ELEMENTS} (2**62) elements")
        n = math.ceil(ratio)
    else:
        n = -((start - stop) // step)
    n = check_count("arange", "the number of values", max(n, 0), dtype.itemsize)
    if dtype.kind in "iu":
        if floats and not all(float(v).is_integer() for v in args):
            raise DTypeError(
                f"arange: start/stop/step {args} are not whole numbers, so they do not fit integer "
                f"dtype {dtype}; use a floating dtype"
            )
        start, step = int(start), int(step)
        if n:
            info = np.iinfo(dtype.numpy)
            last = start + (n - 1) * step
            if not (info.min <= start <= info.max and info.min <= last <= info.max):
                raise DTypeError(
                    f"arange: values from {start} to {last} do not fit {dtype} "
                    f"({info.min}..{info.max}); pick a wider dtype"
                )
        work = _work_dtype(dev, D.uint64 if dtype is D.uint64 else D.int64, dtype)
        i = lax.iota(dtype=work, shape=(n,), dimension=0, device=dev)
        out = lax.add(lax.mul(i, _full((n,), _wrap_int(step, work), work, dev)),
                      _full((n,), _wrap_int(start, work), work, dev))
        return convert(out, dtype)
    work = _work_dtype(dev, D.float64, D.real_of(dtype))
    i = lax.iota(dtype=work, shape=(n,), dimension=0, device=dev)
    out = lax.add(lax.mul(i, _full((n,), float(step), work, dev)),
                  _full((n,), float(start), work, dev))
    return convert(out, dtype)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None,
        device: Any = None) -> Tensor:
    """A 2-d tensor with ones on diagonal k (k > 0 above the main diagonal) and zeros elsewhere."""
    n_rows = _index_arg("eye", "n_rows", n_rows)
    n_cols = n_rows if n_cols is None else _index_arg("eye", "n_cols", n_cols)
    k = _index_arg("eye", "k", k, nonneg=False)
    dev = resolve_device(device)
    dtype = _python_dtype(float, dev) if dtype is None else D.as_dtype(dtype)
    check_size("eye", (n_rows, n_cols), max(dtype.itemsize, 8))  # the int64 iota grids of _band
    mask = _band(n_rows, n_cols, k, lax.eq, dev)
    return mask if dtype is D.bool_ else lax.convert(mask, new_dtype=dtype)


def _band(m: int, n: int, k: int, cmp: Any, dev: Any) -> Tensor:
    """cmp(col - row, k) over an (m, n) grid, as a bool tensor."""
    k = min(max(k, -m - 1), n + 1)  # beyond the matrix every k gives the same mask
    rows = lax.iota(dtype=D.int64, shape=(m, n), dimension=0, device=dev)
    cols = lax.iota(dtype=D.int64, shape=(m, n), dimension=1, device=dev)
    return cmp(lax.sub(cols, rows), _full((m, n), k, D.int64, dev))


def linspace(start: int | float | complex, stop: int | float | complex, /, num: int, *,
             dtype: Any = None, device: Any = None, endpoint: bool = True) -> Tensor:
    """`num` evenly spaced values from start to stop (stop included when endpoint)."""
    start = _number_arg("linspace", "start", start, complex_ok=True)
    stop = _number_arg("linspace", "stop", stop, complex_ok=True)
    num = _index_arg("linspace", "num", num)
    if not isinstance(endpoint, bool):
        raise ArgumentError(f"linspace: endpoint must be True or False, got {endpoint!r}")
    is_complex = isinstance(start, complex) or isinstance(stop, complex)
    dev = resolve_device(device)
    dtype = _python_dtype(complex if is_complex else float, dev) if dtype is None else D.as_dtype(dtype)
    if dtype.kind not in "fc" or (is_complex and dtype.kind != "c"):
        wanted = "a complex dtype (the endpoints are complex)" if is_complex else \
            "a floating-point or complex dtype"
        raise DTypeError(f"linspace: expected {wanted}, got {dtype}; use arange for integer steps")
    rwork = _work_dtype(dev, D.float64, D.real_of(dtype))
    work = D.complex_of(rwork) if dtype.kind == "c" else rwork
    conv = complex if work.kind == "c" else float
    start, stop = conv(start), conv(stop)
    div = num - 1 if endpoint else num
    step = (stop - start) / div if div > 0 else conv(0)
    i = lax.iota(dtype=rwork, shape=(num,), dimension=0, device=dev)
    y = lax.add(lax.mul(convert(i, work), _full((num,), step, work, dev)),
                _full((num,), start, work, dev))
    if endpoint and num > 1:
        last = lax.eq(i, _full((num,), num - 1, rwork, dev))
        y = lax.select(last, _full((num,), stop, work, dev), y)
    return convert(y, dtype)


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d tensors; 'xy' swaps the first two output axes."""
    from ._helpers import check_tensor

    if indexing not in ("xy", "ij"):
        raise ArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    for i, a in enumerate(arrays):
        check_tensor("meshgrid", a, f"array {i}")
        if a.ndim != 1:
            raise ShapeError(f"meshgrid: every array must be 1-d, got shape {a.shape} for array {i}")
    if not arrays:
        return ()
    dtype = D.result_type(*(a.dtype for a in arrays))
    dims = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        dims[0], dims[1] = 1, 0
    shape = [0] * len(arrays)
    for a, d in zip(arrays, dims):
        shape[d] = a.shape[0]
    return tuple(lax.broadcast_in_dim(convert(a, dtype), shape=tuple(shape), broadcast_dimensions=(d,))
                 for a, d in zip(arrays, dims))


def _triangle(name: str, x: Tensor, k: Any, cmp: Any) -> Tensor:
    from ._helpers import check_tensor

    check_tensor(name, x)
    k = _index_arg(name, "k", k, nonneg=False)
    if x.ndim < 2:
        raise ShapeError(f"{name}: expected a tensor of rank >= 2 (..., M, N), got shape {x.shape}")
    m, n = x.shape[-2:]
    mask = lax.broadcast_in_dim(_band(m, n, k, cmp, x.device), shape=x.shape,
                                broadcast_dimensions=(x.ndim - 2, x.ndim - 1))
    zero = _full(x.shape, False if x.dtype is D.bool_ else 0, x.dtype, x.device)
    return lax.select(mask, x, zero)


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    """Zero the elements above diagonal k of each matrix in x (..., M, N)."""
    return _triangle("tril", x, k, lax.le)


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    """Zero the elements below diagonal k of each matrix in x (..., M, N)."""
    return _triangle("triu", x, k, lax.ge)


__all__ = [
    "asarray", "from_dlpack", "full", "zeros", "ones", "empty", "zeros_like", "ones_like",
    "empty_like", "full_like", "arange", "eye", "linspace", "meshgrid", "tril", "triu",
]
