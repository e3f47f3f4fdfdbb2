"""`Tensor`: a backend buffer with its aval (shape, dtype, device).

Operators and methods go through the Array API namespace, so they promote,
broadcast and dispatch exactly as its functions do. Tensors are values;
in-place operators and `__setitem__` compute a new buffer and rebind it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError, TenferroError

_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12")


class Tensor:
    """An n-d array on a tenferro device. Build one with `array_api.asarray`."""

    __slots__ = ("_buf", "_aval", "__weakref__")
    __array_priority__ = 1000.0
    __hash__ = None  # arrays compare elementwise, so they are unhashable (as in NumPy)

    def __init__(self, data: Any, dtype: Any = None, device: Any = None):
        t = _xp.asarray(data, dtype=dtype, device=device)
        self._buf, self._aval = t._buf, t._aval

    @classmethod
    def _new(cls, buf: Any, aval: Aval) -> Tensor:
        t = object.__new__(cls)
        t._buf = buf
        t._aval = aval
        return t

    # ---- attributes --------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._aval.shape

    @property
    def dtype(self):
        return self._aval.dtype

    @property
    def device(self):
        return self._aval.device

    @property
    def ndim(self) -> int:
        return len(self._aval.shape)

    @property
    def size(self) -> int:
        return self._aval.size

    @property
    def aval(self) -> Aval:
        return self._aval

    @property
    def T(self) -> Tensor:
        if self.ndim != 2:
            raise ShapeError(
                f".T needs a 2-d tensor, got {self.ndim}-d; use .mT for stacks of matrices or "
                f"permute_dims for other ranks"
            )
        return _xp.permute_dims(self, (1, 0))

    @property
    def mT(self) -> Tensor:
        return _xp.matrix_transpose(self)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ---- interop -----------------------------------------------------
    def __array_namespace__(self, *, api_version: str | None = None):
        if api_version is not None and api_version not in _API_VERSIONS:
            raise ValueError(
                f"unsupported Array API version {api_version!r}; tenferro implements 2025.12 and "
                f"accepts {', '.join(_API_VERSIONS)}"
            )
        return _xp

    def to_device(self, device: Any, /, *, stream: Any = None) -> Tensor:
        return _xp._creation.to_device(self, device, stream=stream)

    def numpy(self) -> np.ndarray:
        """The values as a read-only NumPy array: it may share the tensor's buffer, which is
        immutable (as JAX's arrays are). Copy it to write: ``np.array(t)``."""
        host = self.device.backend.to_host(self._buf).view()
        host.flags.writeable = False
        return host

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        host = self.numpy()
        if dtype is not None and host.dtype != dtype:
            return host.astype(dtype)
        return host.copy() if copy else host

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: bool | None = None) -> Any:
        return self.device.backend.to_dlpack(
            self._buf, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
        )

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device.backend.dlpack_device(self._buf)

    def __repr__(self) -> str:
        body = np.array2string(self._display_values(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype}, device='{self.device}')"

    def __str__(self) -> str:
        return str(self._display_values())

    def _display_values(self) -> np.ndarray:
        """The values for repr/str: the host array, or, for a dtype NumPy cannot hold without
        an optional package (bfloat16 without ml_dtypes), the values widened to float32
        (exact for bfloat16); repr still names the tensor's own dtype."""
        try:
            return self.numpy()
        except DTypeError:
            if self.dtype.name != "bfloat16":
                raise
            from tenferro_core import dtypes as D

            return _xp.astype(self, D.float32).numpy()

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"``: a 0-d tensor formats like its Python scalar (as in NumPy)."""
        if not spec:
            return str(self)
        if self.ndim:
            raise TypeError(
                f"unsupported format string {spec!r} passed to Tensor.__format__: only 0-d tensors take "
                f"a format spec, got shape {self.shape}; format t.item() or the elements one by one"
            )
        return format(self.item(), spec)

    # ---- pickling (every protocol): the values travel as a host NumPy array ----------------
    def __reduce__(self) -> tuple:
        return (_rebuild, (self.numpy(), self.dtype.name, str(self.device)))

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return self.__reduce__()

    def __copy__(self) -> Tensor:
        new = object.__new__(type(self))
        copy_slots(self, new)  # buffers are never written in place, so sharing one is safe
        return new

    def __deepcopy__(self, memo: Any) -> Tensor:
        """A tensor owning a fresh buffer (``copy.copy`` shares the immutable one)."""
        if type(self) is not Tensor:  # a tracer or a donated tensor: nothing of its own to copy
            return self.__copy__()
        return _xp.asarray(self, copy=True)

    # ---- Python scalars ------------------------------------------------
    def _scalar(self, what: str) -> Any:
        if self.size != 1:
            raise ShapeError(
                f"{what}() needs a tensor with exactly one element, got shape {self.shape}; "
                f"use any()/all() to reduce a boolean tensor"
            )
        value = self.numpy().reshape(()).item()
        if self.dtype.name == "bfloat16" and not isinstance(value, float):
            value = float(value)
        return value

    def item(self) -> Any:
        """The one element of a 0-d or size-1 tensor as a Python scalar (bool, int, float, complex)."""
        return self._scalar("item")

    def tolist(self) -> Any:
        """The values as nested Python lists of Python scalars (a 0-d tensor gives its scalar)."""
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __int__(self) -> int:
        if self.dtype.kind == "c":
            raise DTypeError("int() of a complex tensor; take .real first")
        return int(self._scalar("int"))

    def __float__(self) -> float:
        if self.dtype.kind == "c":
            raise DTypeError("float() of a complex tensor; take real() first")
        return float(self._scalar("float"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise DTypeError(f"only integer tensors can be used as an index, got {self.dtype}")
        return int(self._scalar("index"))

    # ---- methods (delegates to the namespace) ----------------------------
    # The methods NumPy arrays, PyTorch tensors and JAX arrays share, each one call of the
    # Array API namespace (so tracers get them too); keywords as the namespace names them.
    def __iter__(self) -> Iterator[Tensor]:
        if not self._aval.shape:
            raise ArgumentError("iteration over a 0-d tensor; use t.item() for its value")
        return (self[i] for i in range(self._aval.shape[0]))

    @property
    def real(self) -> Tensor:
        return _xp.real(self)

    @property
    def imag(self) -> Tensor:
        return _xp.imag(self)

    def conj(self) -> Tensor:
        return _xp.conj(self)

    def abs(self) -> Tensor:
        return _xp.abs(self)

    def sum(self, axis: Any = None, *, dtype: Any = None, keepdims: bool = False) -> Tensor:
        return _xp.sum(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def prod(self, axis: Any = None, *, dtype: Any = None, keepdims: bool = False) -> Tensor:
        return _xp.prod(self, axis=axis, dtype=dtype, keepdims=keepdims)

    def mean(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        return _xp.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        return _xp.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        return _xp.min(self, axis=axis, keepdims=keepdims)

    def std(self, axis: Any = None, *, correction: float | None = None, ddof: float | None = None,
            keepdims: bool = False) -> Tensor:
        """Standard deviation; `ddof` (NumPy's name) is the same as `correction`."""
        return _xp.std(self, axis=axis, correction=_correction("std", correction, ddof),
                       keepdims=keepdims)

    def var(self, axis: Any = None, *, correction: float | None = None, ddof: float | None = None,
            keepdims: bool = False) -> Tensor:
        """Variance; `ddof` (NumPy's name) is the same as `correction`."""
        return _xp.var(self, axis=axis, correction=_correction("var", correction, ddof),
                       keepdims=keepdims)

    def argmax(self, axis: int | None = None, *, keepdims: bool = False) -> Tensor:
        return _xp.argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, *, keepdims: bool = False) -> Tensor:
        return _xp.argmin(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        return _xp.all(self, axis=axis, keepdims=keepdims)

    def any(self, axis: Any = None, *, keepdims: bool = False) -> Tensor:
        return _xp.any(self, axis=axis, keepdims=keepdims)

    def reshape(self, *shape: Any, copy: bool | None = None) -> Tensor:
        """``t.reshape(2, 3)`` or ``t.reshape((2, 3))``; one entry may be -1."""
        return _xp.reshape(self, _shape_args("reshape", shape), copy=copy)

    def transpose(self, *axes: Any) -> Tensor:
        """No axes: reverse them (as NumPy); else ``permute_dims``, as ``t.transpose(1, 0)`` or
        ``t.transpose((1, 0))``."""
        if not axes or axes == (None,):
            axes = (tuple(range(self.ndim - 1, -1, -1)),)
        return _xp.permute_dims(self, _shape_args("transpose", axes))

    def astype(self, dtype: Any, *, copy: bool = True, device: Any = None) -> Tensor:
        return _xp.astype(self, dtype, copy=copy, device=device)

    def flatten(self) -> Tensor:
        """A 1-d copy of the elements in row-major order (as NumPy's ``flatten``)."""
        return _xp.reshape(self, (self.size,), copy=True)

    def squeeze(self, axis: Any = None) -> Tensor:
        """Remove size-1 axes: `axis` ones, or every one when None (as NumPy)."""
        if axis is None:
            axis = tuple(i for i, n in enumerate(self.shape) if n == 1)
        return _xp.squeeze(self, axis=axis)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        return _xp.clip(self, min=min, max=max)

    def round(self, decimals: int = 0) -> Tensor:
        """Round halves to even; `decimals` digits as NumPy (scaled by ``10**decimals``)."""
        if isinstance(decimals, bool) or not isinstance(decimals, int):
            raise ArgumentError(f"round: decimals must be an int, got {type(decimals).__name__} "
                                f"{decimals!r}")
        if decimals == 0 or (decimals > 0 and self.dtype.kind in "biu"):
            return _xp.round(self)
        if self.dtype.kind not in "fc":
            raise DTypeError(f"round: decimals={decimals} needs a floating or complex tensor, got "
                             f"{self.dtype}; convert it with astype first")
        if decimals > 0:
            return _xp.round(self * 10.0 ** decimals) / 10.0 ** decimals
        return _xp.round(self / 10.0 ** -decimals) * 10.0 ** -decimals

    # ---- operators -----------------------------------------------------
    def __getitem__(self, key: Any) -> Tensor:
        return _xp._indexing.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._assign(_xp._indexing.setitem(self, key, value))

    def _assign(self, new: Tensor) -> None:
        """Make this object hold `new`'s value (in-place operators, item assignment).

        Traced values (tracers) carry more than a buffer, so the object takes over all
        of `new`'s slots; this context's observers (gradient tapes) are told first, so their
        records keep the old value.
        """
        if type(new) is not type(self):
            raise TenferroError(
                f"in-place update of a {type(self).__name__} with a {type(new).__name__} value "
                f"(e.g. assigning a traced value into a concrete tensor) is not supported; "
                f"compute the result out of place (y = xp.where(mask, value, x))"
            )
        from .tracing import notify_assign  # tracing builds on this module

        notify_assign(self, new)
        copy_slots(new, self)

    def _inplace(self, fn: Any, other: Any) -> Tensor:
        res = fn(self, other)
        if res.dtype is not self.dtype or res.shape != self.shape:
            raise DTypeError(
                f"in-place {fn.__name__} would change the tensor from {self.dtype}{list(self.shape)} "
                f"to {res.dtype}{list(res.shape)}; in-place operators keep dtype and shape, so use "
                f"the out-of-place operator"
            )
        if type(self) is not Tensor:  # a tracer: `x += y` rebinds the name x to the result
            return res
        self._assign(res)
        return self

    def __pos__(self) -> Tensor:
        return _xp.positive(self)

    def __neg__(self) -> Tensor:
        return _xp.negative(self)

    def __abs__(self) -> Tensor:
        return _xp.abs(self)

    def __invert__(self) -> Tensor:
        return _xp.bitwise_invert(self)


def _correction(name: str, correction: Any, ddof: Any) -> Any:
    """std/var's degrees-of-freedom correction from `correction` or NumPy's `ddof` (not both)."""
    if correction is not None and ddof is not None:
        raise ArgumentError(f"{name}: pass correction or ddof (the same thing), not both; got "
                            f"correction={correction!r}, ddof={ddof!r}")
    value = correction if ddof is None else ddof
    return 0.0 if value is None else value


def _shape_args(name: str, args: tuple) -> Any:
    """A shape or axes given as ``f(2, 3)`` or ``f((2, 3))``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    if not args:
        raise ArgumentError(f"{name}() needs a shape, as {name}(2, 3) or {name}((2, 3)); got none")
    return args


def copy_slots(src: Tensor, dst: Tensor) -> None:
    """Make `dst` hold what `src` holds (every slot set on `src`, through the slot descriptors,
    so a tracer's buffer guard is not in the way)."""
    for cls in type(src).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot != "__weakref__":
                desc = cls.__dict__[slot]
                try:
                    desc.__set__(dst, desc.__get__(src))
                except AttributeError:  # a slot never set on src (a tracer's buffer)
                    continue


def _rebuild(host: np.ndarray, dtype: str, device: str) -> Tensor:
    """Unpickle a tensor: its host values, dtype name and device name (see `Tensor.__reduce__`)."""
    from tenferro_core import dtypes as D

    d = D.as_dtype(dtype)
    host = np.asarray(host)
    if host.dtype != d.numpy:
        host = host.view(d.numpy) if host.dtype.itemsize == d.numpy.itemsize else host.astype(d.numpy)
    return _xp._creation.from_host(host, device)


def _reflected(fn: Any):
    def op(self, other):
        return fn(other, self)

    return op


def _iop(fn: Any):
    def op(self, other):
        return self._inplace(fn, other)

    return op


_BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide",
    "floordiv": "floor_divide", "mod": "remainder", "pow": "pow", "matmul": "matmul",
    "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
    "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
_COMPARE = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal",
            "eq": "equal", "ne": "not_equal"}


def use_namespace(xp: Any) -> None:
    """Hand Tensor the Array API namespace its methods delegate to, and make its operators
    the namespace functions themselves (``a + b`` is ``xp.add(a, b)``, no wrapper in between).
    Called once by the package's ``__init__``: this module imports nothing above it."""
    global _xp
    _xp = xp
    for short, fname in _BINARY.items():
        fn = getattr(xp, fname)
        setattr(Tensor, f"__{short}__", fn)
        setattr(Tensor, f"__r{short}__", _reflected(fn))
        setattr(Tensor, f"__i{short}__", _iop(fn))
    for short, fname in _COMPARE.items():
        setattr(Tensor, f"__{short}__", getattr(xp, fname))


_xp: Any = None  # the Array API namespace (use_namespace)
