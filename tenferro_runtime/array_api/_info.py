"""The Array API inspection namespace (`__array_namespace_info__`)."""

from __future__ import annotations

from typing import Any

from tenferro_core import dtypes as D

from ..runtime import default_runtime
from ._helpers import resolve_device

_KINDS = ("bool", "signed integer", "unsigned integer", "integral", "real floating",
          "complex floating", "numeric")


# The dtypes of the standard; float16 and bfloat16 stay reachable as namespace attributes but
# are not listed by `dtypes()` (a consumer iterating it expects standard dtypes only).
_STANDARD = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                       "float32", "float64", "complex64", "complex128"))


class Info:
    """What this namespace supports, per device."""

    def capabilities(self) -> dict[str, Any]:
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self):
        return default_runtime().default_device()

    def devices(self) -> tuple:
        rt = default_runtime()
        return tuple(rt.device(n) for n in rt.device_names())

    def default_dtypes(self, *, device: Any = None) -> dict[str, D.DType]:
        f = resolve_device(device).runtime.default_float_dtype
        return {"real floating": f, "complex floating": D.complex_of(f),
                "integral": D.DEFAULT_INT, "indexing": D.DEFAULT_INDEX}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, D.DType]:
        dev = resolve_device(device)
        out = {}
        for d in D.ALL_DTYPES:
            if d.name in _STANDARD and d in dev.dtypes and (kind is None or D.isdtype(d, kind)):
                out[d.name] = d
        return out


def __array_namespace_info__() -> Info:
    return Info()
