"""Abstract values: what is known of an array without its data."""

from __future__ import annotations

import functools
import math
import threading
import weakref
from typing import Any

from .dtypes import DType


class Aval:
    """Shape, dtype and device of an array (device is None inside bare shape rules).

    Avals are interned: equal (shape, dtype, device) give the same object for as long as
    one is alive, so equality and hashing are identity, which the eager dispatch cache and
    every signature cache hash on each call. A device is compared by identity too (devices
    of two runtimes with one name are different devices).
    """

    __slots__ = ("shape", "dtype", "device", "__weakref__")

    shape: tuple[int, ...]
    dtype: DType
    device: Any

    def __new__(cls, shape: tuple[int, ...], dtype: DType, device: Any = None) -> Aval:
        if type(shape) is not tuple:
            shape = tuple(shape)
        key = (shape, dtype, id(device))  # the aval keeps its device alive: the id stays unique
        ref = _INTERNED.get(key)
        hit = ref() if ref is not None else None
        if hit is not None:
            return hit
        with _LOCK:
            ref = _INTERNED.get(key)
            hit = ref() if ref is not None else None
            if hit is None:
                hit = object.__new__(cls)
                _set(hit, "shape", shape)
                _set(hit, "dtype", dtype)
                _set(hit, "device", device)
                _INTERNED[key] = weakref.ref(hit, functools.partial(_forget, key))
        return hit

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def str_short(self) -> str:
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]"

    def __reduce__(self):
        return (Aval, (self.shape, self.dtype, self.device))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Aval is immutable (and shared); make another with Aval(shape, dtype, device)")

    def __repr__(self) -> str:
        dev = f" on {self.device}" if self.device is not None else ""
        return f"Aval({self.str_short()}{dev})"


_set = object.__setattr__
# (shape, dtype, id(device)) -> weak reference to the one live Aval (a plain dict: lookups
# are C calls); an entry goes when its Aval dies
_INTERNED: dict[tuple, weakref.ref] = {}
_LOCK = threading.RLock()  # a dying Aval's callback may run inside the locked region (GC)


def _forget(key: tuple, ref: weakref.ref) -> None:
    with _LOCK:
        if _INTERNED.get(key) is ref:  # not a newer Aval interned under the same key
            del _INTERNED[key]
