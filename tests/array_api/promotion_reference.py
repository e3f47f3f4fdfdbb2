"""Reference dtype lists and promotion rules for the namespace tests, written from the
Array API tables (independent of tenferro_core.dtypes, which they check)."""

from __future__ import annotations

import numpy as np

SIGNED = ["int8", "int16", "int32", "int64"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
INTS = SIGNED + UNSIGNED
FLOATS = ["float16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
ALL = ["bool"] + INTS + FLOATS + COMPLEX
KIND = {"bool": 0, **{d: 1 for d in INTS}, **{d: 2 for d in FLOATS + ["bfloat16"]},
        **{d: 3 for d in COMPLEX}}

# The standard's table for mixed signed/unsigned and float/complex pairs; elsewhere the larger
# dtype of a kind, and across bool/int/float/complex the higher kind's operand (tenferro's rule).
_TABLE = {("int8", "uint8"): "int16", ("int8", "uint16"): "int32", ("int8", "uint32"): "int64",
          ("int16", "uint8"): "int16", ("int16", "uint16"): "int32", ("int16", "uint32"): "int64",
          ("int32", "uint8"): "int32", ("int32", "uint16"): "int32", ("int32", "uint32"): "int64",
          ("int64", "uint8"): "int64", ("int64", "uint16"): "int64", ("int64", "uint32"): "int64",
          ("float16", "complex64"): "complex64", ("float32", "complex64"): "complex64",
          ("float64", "complex64"): "complex128", ("float16", "complex128"): "complex128",
          ("float32", "complex128"): "complex128", ("float64", "complex128"): "complex128",
          # bfloat16 (an extra, not in the standard): float16 and bfloat16 meet in float32
          ("float16", "bfloat16"): "float32", ("bfloat16", "complex64"): "complex64",
          ("bfloat16", "complex128"): "complex128"}


def promoted(a: str, b: str) -> str | None:
    """The promotion of two dtypes; None where no dtype holds both (uint64 with signed)."""
    if a == b:
        return a
    if (a, b) in _TABLE or (b, a) in _TABLE:
        return _TABLE.get((a, b)) or _TABLE[(b, a)]
    if "uint64" in (a, b) and {a, b} & set(SIGNED):
        return None
    if KIND[a] != KIND[b]:
        return a if KIND[a] > KIND[b] else b
    return a if _size(a) >= _size(b) else b


def _size(d: str) -> int:
    return 2 if d == "bfloat16" else np.dtype(d).itemsize
