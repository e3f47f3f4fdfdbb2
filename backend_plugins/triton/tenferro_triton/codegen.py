"""Triton source for tenferro primitives, and generated source loaded as kernels.

`expression(prim, args, in_dtypes, out_dtype)` is the Triton expression of one elementwise
primitive on operand expressions (None where there is none: the group then falls back to
the torch kernels). Transcendental functions go through the name ``M``: libdevice on a GPU
(correctly rounded to a few ulp, unlike ``tl.exp``'s fast approximation) and, in Triton's
CPU interpreter, NumPy's functions (`interp_math`). 16-bit floats compute them in float32,
as NumPy and torch do. `load(source, name)` writes a generated kernel to the cache folder,
imports it and returns its jit function; ``TENFERRO_TRITON_DUMP=1`` logs every generated
source (``=<folder>`` also copies it there).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from tenferro_core import dtypes as D

from .cache import cache_dir, interpreted

log = logging.getLogger("tenferro_triton.codegen")

TL: dict[D.DType, str] = {
    D.bool_: "tl.int1", D.int8: "tl.int8", D.int16: "tl.int16", D.int32: "tl.int32",
    D.int64: "tl.int64", D.uint8: "tl.uint8", D.uint16: "tl.uint16", D.uint32: "tl.uint32",
    D.uint64: "tl.uint64", D.float16: "tl.float16", D.bfloat16: "tl.bfloat16",
    D.float32: "tl.float32", D.float64: "tl.float64",
}
"""Triton's name of each dtype a generated kernel handles (no complex dtypes)."""

_M_UNARY = {  # tenferro primitive -> libdevice / interp_math function of one float operand
    "exp": "exp", "expm1": "expm1", "log": "log", "log1p": "log1p", "sin": "sin", "cos": "cos",
    "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
    "tanh": "tanh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "floor": "floor", "ceil": "ceil", "round": "rint", "trunc": "trunc",
}
_M_BINARY = {"atan2": "atan2", "pow": "pow"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*"}
_BITS = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
         "logical_and": "&", "logical_or": "|", "logical_xor": "^"}


def _half(dtype: D.DType) -> bool:
    return dtype in (D.float16, D.bfloat16)


def _float_fn(fn: str, args: list[str], dtype: D.DType) -> str:
    """`M.fn(args)` computed in float32 for 16-bit floats (then rounded back)."""
    if _half(dtype):
        inner = ", ".join(f"{a}.to(tl.float32)" for a in args)
        return f"M.{fn}({inner}).to({TL[dtype]})"
    return f"M.{fn}({', '.join(args)})"


def expression(prim: str, args: list[str], in_dtypes: list[D.DType], out_dtype: D.DType,
               params: dict | None = None) -> str | None:
    """The Triton expression of elementwise primitive `prim` on operand expressions `args`
    (same semantics as the NumPy kernels), or None where no generated code exists for it."""
    if out_dtype not in TL or any(d not in TL for d in in_dtypes):
        return None
    params = params or {}
    dt = in_dtypes[0] if in_dtypes else out_dtype
    kind = dt.kind
    a = args
    if prim in _M_UNARY:
        if kind in "iub":
            return a[0] if prim in ("floor", "ceil", "round", "trunc") else None
        return _float_fn(_M_UNARY[prim], a, dt)
    if prim in _M_BINARY and kind == "f":
        return _float_fn(_M_BINARY[prim], a, dt)
    if prim in _ARITH and kind != "b":
        return f"({a[0]} {_ARITH[prim]} {a[1]})"
    if prim in _COMPARE:
        return f"({a[0]} {_COMPARE[prim]} {a[1]})"
    if prim in _BITS and (kind in "iub" if prim.startswith("bitwise") else kind == "b"):
        return f"({a[0]} {_BITS[prim]} {a[1]})"
    if prim == "neg" and kind != "b":
        return f"(-{a[0]})"
    if prim == "abs" and kind in "if":
        return f"tl.abs({a[0]})"
    if prim == "abs" and kind == "u":
        return a[0]
    if prim == "sign" and kind in "if":
        one, zero = ("1.0", "0.0") if kind == "f" else ("1", "0")
        return (f"tl.where({a[0]} > {zero}, {one}, tl.where({a[0]} < {zero}, -{one}, {a[0]}))"
                f".to({TL[dt]})")
    if prim == "div" and kind == "f":
        return f"({a[0]} / {a[1]})"
    if prim == "div" and kind in "iu":  # C division (toward zero); x / 0 is 0, as in the NumPy kernel
        return f"tl.where({a[1]} == 0, 0, {a[0]} // tl.where({a[1]} == 0, 1, {a[1]})).to({TL[dt]})"
    if prim == "rem" and kind in "iuf":  # fmod: the sign of the dividend
        if kind == "f":
            return _float_fn("fmod", a, dt)
        return f"tl.where({a[1]} == 0, 0, {a[0]} % tl.where({a[1]} == 0, 1, {a[1]})).to({TL[dt]})"
    if prim in ("maximum", "minimum") and kind != "b":
        fn = "tl.maximum" if prim == "maximum" else "tl.minimum"
        nan = ", propagate_nan=tl.PropagateNan.ALL" if kind == "f" else ""
        return f"{fn}({a[0]}, {a[1]}{nan})"
    if prim == "logistic" and kind == "f":
        x = f"{a[0]}.to(tl.float32)" if _half(dt) else a[0]
        out = f"(1.0 / (1.0 + M.exp(-{x})))"
        return f"{out}.to({TL[dt]})" if _half(dt) else out
    if prim in ("isnan", "isinf", "isfinite"):
        x = a[0]
        if prim == "isnan" or (prim == "isinf" and kind != "f"):  # false for non-floats
            return f"({x} != {x})"
        if prim == "isinf":
            return f"(tl.abs({x}) == float('inf'))"
        return f"(tl.abs({x}) < float('inf'))" if kind == "f" else f"({x} == {x})"
    if prim == "logical_not" and kind == "b":
        return f"({a[0]} == 0)"
    if prim == "bitwise_not" and kind in "iub":
        return f"(~{a[0]})" if kind != "b" else f"({a[0]} == 0)"
    if prim == "select":  # select(pred, on_true, on_false)
        return f"tl.where({a[0]}, {a[1]}, {a[2]})"
    if prim == "clamp":  # clamp(lo, x, hi)
        return f"tl.minimum(tl.maximum({a[1]}, {a[0]}), {a[2]})"
    if prim == "convert":
        if out_dtype == D.bool_:
            return f"({a[0]} != 0)"
        return f"{a[0]}.to({TL[out_dtype]})"
    return None


def math_module() -> Any:
    """What the generated name ``M`` refers to: NumPy-backed functions in the interpreter,
    else libdevice."""
    if interpreted():
        from . import interp_math

        return interp_math
    from triton.language.extra import libdevice

    return libdevice


_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}


def load(source: str, name: str) -> Any:
    """The jit function `name` defined by generated `source` (written under `cache_dir()`
    by content hash, so Triton can read its source; loaded once per process)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    key = f"{name}_{digest}"
    fn = _LOADED.get(key)
    if fn is not None:
        return fn
    with _LOCK:
        fn = _LOADED.get(key)
        if fn is not None:
            return fn
        _dump(source, key)
        path = cache_dir() / "kernels" / f"{key}.py"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(f"tenferro_triton_generated.{key}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # Triton's jit looks its globals up through the module
        module.M = math_module()
        spec.loader.exec_module(module)
        fn = _LOADED[key] = getattr(module, name)
        return fn


def _dump(source: str, key: str) -> None:
    flag = os.environ.get("TENFERRO_TRITON_DUMP", "")
    if flag in ("", "0"):
        return
    log.warning("generated Triton kernel %s:\n%s", key, source)
    if flag != "1":
        folder = Path(flag)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{key}.py").write_text(source)


__all__ = ["TL", "expression", "load", "math_module"]
