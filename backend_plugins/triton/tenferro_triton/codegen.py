"""Triton source for tenferro primitives, and generated source loaded as kernels.

`expression(prim, args, in_dtypes, out_dtype, params)` is the Triton expression of one
elementwise primitive on operand expressions, with the NumPy kernels' semantics, or None
where there is none (the group then falls back to the torch kernels). Operands should be
names: an expression may repeat them. The result always has `out_dtype`'s Triton type.

- float16 and bfloat16 compute in float32 and round back, as NumPy and torch do (still
  correctly rounded for + - * / and sqrt); bfloat16 converts through ``H.to_bf16`` and
  ``H.from_bf16``, since the interpreter's own bfloat16 casts are wrong.
- Transcendental functions go through the name ``M``: libdevice on a GPU (a few ulp, unlike
  ``tl.exp``'s fast approximation) and NumPy in Triton's CPU interpreter (`interp_math`).
  float32 division and square root are ``tl.div_rn`` and ``tl.sqrt_rn`` (``/`` is
  ``div.full.f32`` on NVIDIA: 2 ulp, and wrong for huge divisors; ``tl.sqrt`` approximates).
- Helpers that need a loop or several statements are jit functions reached through the
  name ``H`` (`HELPERS`: integer pow, logistic, the bfloat16 conversions).

`load(source, name)` writes generated source to the cache folder, imports it with ``M`` and
``H`` defined and returns its jit function; ``TENFERRO_TRITON_DUMP=1`` logs every loaded
source (``=<folder>`` also writes it there). `constant` and `cast` are the literal and
conversion helpers the generators share, `strided_offset` the address of an operand read
through a broadcast and strides.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

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

HALF = (D.float16, D.bfloat16)
_F32 = "tl.float32"

_M_UNARY = {  # tenferro primitive -> libdevice / interp_math function of one float operand
    "exp": "exp", "expm1": "expm1", "log": "log", "log1p": "log1p", "sin": "sin", "cos": "cos",
    "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
    "tanh": "tanh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "floor": "floor", "ceil": "ceil", "round": "rint", "trunc": "trunc",
}
_M_BINARY = {"rem": "fmod", "pow": "pow", "atan2": "atan2"}
_ROUNDING = ("floor", "ceil", "round", "trunc")
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*"}
_BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_LOGICAL = {"logical_and": "&", "logical_or": "|", "logical_xor": "^"}

HELPERS = '''"""Helpers of generated tenferro kernels (the name H there)."""
import triton
import triton.language as tl


@triton.jit
def ipow(x, y, BITS: tl.constexpr, SIGNED: tl.constexpr):
    """x ** y on integers, wrapping (square and multiply over the BITS low bits of y >= 0);
    y < 0 (signed): 1 at x = 1, +-1 at x = -1 by the parity of y, else 0."""
    e = y
    if SIGNED:
        e = tl.where(y < 0, 0, y)
    r = x * 0 + 1
    b = x
    for _ in tl.static_range(BITS):
        r = tl.where((e & 1) != 0, r * b, r)
        b = b * b
        e = e >> 1
    if SIGNED:
        at_neg = tl.where(x == 1, 1, tl.where(x == -1, 1 - 2 * (y & 1), 0 * x))
        r = tl.where(y < 0, at_neg, r)
    return r


@triton.jit
def to_bf16(x):
    """float32 -> bfloat16 to nearest even: Triton's cast on a GPU; in the interpreter, whose
    cast truncates and garbles subnormals, by rounding the bits as integers."""
    if INTERPRETER:
        b = x.to(tl.uint32, bitcast=True)
        r = tl.where(x != x, b | 0x400000, b + (0x7FFF + ((b >> 16) & 1)))
        y = (r >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        y = x.to(tl.bfloat16)
    return y


@triton.jit
def from_bf16(x):
    """bfloat16 -> float32 (exact): Triton's cast on a GPU, the bits shifted in the
    interpreter (whose cast garbles subnormals)."""
    if INTERPRETER:
        y = (x.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)
    else:
        y = x.to(tl.float32)
    return y


@triton.jit
def logistic(x):
    """1 / (1 + exp(-x)), as e / (1 + e) with e = exp(-|x|) for x < 0: no overflow, and no
    early 0 where exp(-x) overflows (down to float32's subnormals, which libdevice's float32
    exp flushes to 0 on a GPU)."""
    e = M.exp(-tl.abs(x))
    num = tl.where(x >= 0, 1.0, e)
    if x.dtype == tl.float32:
        return tl.div_rn(num, 1.0 + e)
    return num / (1.0 + e)
'''


def cast(x: str, src: D.DType, dst: D.DType) -> str:
    """`x` (of dtype `src`) converted to `dst` as `convert` does: to bool is ``!= 0`` (NaN is
    True); bfloat16 goes through float32 with the helpers ``H.to_bf16`` / ``H.from_bf16``
    (the interpreter's own bfloat16 casts are wrong)."""
    if src is dst:
        return x
    if src is D.bfloat16:
        x, src = f"H.from_bf16({x})", D.float32
        if dst is D.float32:
            return x
    if dst is D.bool_:
        return f"({x} != 0)"
    if dst is D.bfloat16:
        return f"H.to_bf16({x if src is D.float32 else f'{x}.to({_F32})'})"
    return f"{x}.to({TL[dst]})"


def constant(value: Any, dtype: D.DType, shape: str) -> str | None:
    """``tl.full(shape, value, dtype)`` with `value` (a NumPy scalar or Python number,
    converted to `dtype` as `convert` does) written exactly, or None where no literal
    reproduces its bits (a NaN with a payload)."""
    if dtype not in TL:
        return None
    npd = dtype.numpy
    v = np.asarray(value)
    if v.dtype.kind == "c":
        v = v.real
    with np.errstate(all="ignore"):
        v = v.astype(npd, casting="unsafe")
    if dtype.kind == "b":
        lit = "1" if bool(v) else "0"
    elif dtype.kind in "iu":
        lit = str(int(v))
    else:
        f = float(v)
        if math.isnan(f):
            lit = "float('nan')"
        elif math.isinf(f):
            lit = "float('inf')" if f > 0 else "float('-inf')"
        else:
            lit = repr(f)  # shortest repr: reads back as this very double, so exact
        back = np.asarray(float("nan") if math.isnan(f) else f).astype(npd)
        if back.tobytes() != v.tobytes():  # a NaN with a payload has no literal
            return None
    T = _F32 if dtype is D.bfloat16 else TL[dtype]
    full = f"tl.full({shape}, {lit}, {T})"
    if dtype.kind == "f" and lit == "-0.0":  # tl.full fills zeros, +0, for any value == 0
        full = f"(tl.full({shape}, 0.0, {T}) * -1.0)"
    return f"H.to_bf16({full})" if dtype is D.bfloat16 else full


def strided_offset(index: Sequence[str], strides: Sequence[int]) -> str:
    """The element offset ``sum(index[d] * strides[d])`` of an operand (strides in elements,
    0 where the operand is broadcast along that axis), or "0". `index` holds the per-axis
    index names of the kernel's iteration space (elementwise.py computes them from the
    linear index); rows.py may use it for its row and column offsets."""
    terms = [i if s == 1 else f"{i} * {s}" for i, s in zip(index, strides) if s != 0]
    return " + ".join(terms) if terms else "0"


def expression(prim: str, args: list[str], in_dtypes: list[D.DType], out_dtype: D.DType,
               params: dict | None = None) -> str | None:
    """The Triton expression of elementwise primitive `prim` on operand expressions `args`
    (same semantics as the NumPy kernels, result of `out_dtype`), or None where no
    generated code exists for it."""
    if out_dtype not in TL or any(d not in TL for d in in_dtypes):
        return None
    params = params or {}
    a = args
    if prim == "convert":
        return cast(a[0], in_dtypes[0], out_dtype)
    if prim == "bitcast_convert":
        return f"{a[0]}.to({TL[out_dtype]}, bitcast=True)"
    if prim == "select":  # select(pred, on_true, on_false): moves bits, no arithmetic
        return f"tl.where({a[0]}, {a[1]}, {a[2]})"
    dt = in_dtypes[0] if in_dtypes else out_dtype
    if dt in HALF:
        wide = [cast(x, dt, D.float32) for x in a]
        out = D.float32 if out_dtype is dt else out_dtype
        inner = _expression(prim, wide, D.float32, out)
        if inner is None or out is not D.float32:
            return inner
        return cast(inner, D.float32, dt)
    return _expression(prim, a, dt, out_dtype)


def _expression(prim: str, a: list[str], dt: D.DType, out: D.DType) -> str | None:
    """`expression` for operands of `dt` (bool, integers, float32 or float64)."""
    kind, T = dt.kind, TL[dt]
    if prim in _M_UNARY:
        if kind == "f" and prim == "sqrt" and T == _F32:  # tl.sqrt is sqrt.approx.f32
            return f"tl.sqrt_rn({a[0]})"
        if kind == "f":
            return f"M.{_M_UNARY[prim]}({a[0]})"
        return a[0] if prim in _ROUNDING and kind in "iu" else None
    if prim in _COMPARE:
        return f"({a[0]} {_COMPARE[prim]} {a[1]})"
    if prim in _ARITH:
        return f"({a[0]} {_ARITH[prim]} {a[1]})" if kind in "iuf" else None
    if prim in _BITWISE:
        return f"({a[0]} {_BITWISE[prim]} {a[1]})" if kind in "biu" else None
    if prim in _LOGICAL:
        return f"({a[0]} {_LOGICAL[prim]} {a[1]})" if kind == "b" else None
    if kind == "b":
        return _bool_expression(prim, a)
    if kind == "f":
        return _float_expression(prim, a, T)
    return _int_expression(prim, a, dt, T)


def _bool_expression(prim: str, a: list[str]) -> str | None:
    if prim in ("logical_not", "bitwise_not"):
        return f"({a[0]} == 0)"
    if prim == "maximum":
        return f"({a[0]} | {a[1]})"
    if prim == "minimum":
        return f"({a[0]} & {a[1]})"
    if prim == "clamp":  # clamp(lo, x, hi) = min(max(x, lo), hi)
        return f"(({a[1]} | {a[0]}) & {a[2]})"
    return None


_NAN = ", propagate_nan=tl.PropagateNan.ALL"


def _float_expression(prim: str, a: list[str], T: str) -> str | None:
    x = a[0]
    simple = {
        # Triton's unary minus is 0 - x, which gives +0 for +0: a product flips the sign bit
        "neg": f"({x} * -1.0)", "abs": f"tl.abs({x})", "conj": x, "real": x,
        "imag": f"tl.zeros_like({x})", "logistic": f"H.logistic({x})",
        "isnan": f"({x} != {x})", "isinf": f"(tl.abs({x}) == float('inf'))",
        "isfinite": f"(tl.abs({x}) < float('inf'))",
        # -1, 1, +0 for +-0 (as NumPy) and NaN for NaN
        "sign": f"tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, {x} + 0.0))",
    }
    if prim in simple:
        return simple[prim]
    if prim == "div":
        return f"tl.div_rn({x}, {a[1]})" if T == _F32 else f"({x} / {a[1]})"
    if prim in _M_BINARY:  # rem is C fmod (exact in libdevice; LLVM's frem is not, on NVIDIA)
        return f"M.{_M_BINARY[prim]}({x}, {a[1]})"
    if prim in ("maximum", "minimum"):  # NaN in either operand gives NaN
        return f"tl.{prim}({x}, {a[1]}{_NAN})"
    if prim == "clamp":
        return f"tl.minimum(tl.maximum({a[1]}, {x}{_NAN}), {a[2]}{_NAN})"
    return None


def _int_expression(prim: str, a: list[str], dt: D.DType, T: str) -> str | None:
    x = a[0]
    signed, bits = dt.kind == "i", dt.bits
    if prim in ("neg", "abs", "sign", "conj", "real", "imag", "isnan", "isinf", "isfinite",
                "bitwise_not"):
        return {
            "neg": f"(-{x})", "abs": f"tl.abs({x})" if signed else x, "conj": x, "real": x,
            "imag": f"tl.zeros_like({x})", "isnan": f"({x} != {x})", "isinf": f"({x} != {x})",
            "isfinite": f"({x} == {x})", "bitwise_not": f"(~{x})",
            "sign": f"tl.where({x} > 0, 1, tl.where({x} < 0, -1, {x}))" if signed
            else f"({x} != 0).to({T})",
        }[prim]
    if prim in ("maximum", "minimum"):
        return f"tl.{prim}({x}, {a[1]})"
    if prim == "clamp":
        return f"tl.minimum(tl.maximum({a[1]}, {x}), {a[2]})"
    if prim == "pow":
        return f"H.ipow({x}, {a[1]}, {bits - 1 if signed else bits}, {signed})"
    y = a[1] if len(a) > 1 else ""
    if signed:  # divisors 0 and -1 replaced: x / 0 is 0, INT_MIN / -1 wraps (both trap or are UB)
        safe = f"tl.where(({y} == 0) | ({y} == -1), 1, {y})"
        ok = f"(({y} >= 0) & ({y} < {bits}))"
    else:
        safe = f"tl.where({y} == 0, 1, {y})"
        ok = f"({y} < {bits})"
    if prim == "div":  # C division truncates toward zero, in Triton as in C
        if signed:
            return f"tl.where({y} == 0, 0, tl.where({y} == -1, -{x}, {x} // {safe}))"
        return f"tl.where({y} == 0, 0, {x} // {safe})"
    if prim == "rem":  # C fmod, the sign of the dividend; x rem 0 = x rem -1 = x rem 1 = 0
        return f"({x} % {safe})"
    if prim == "shift_left":  # counts outside [0, bits) give 0
        return f"tl.where({ok}, {x} << tl.where({ok}, {y}, 0), 0)"
    if prim == "shift_right":  # arithmetic for signed: a count outside gives x >> (bits - 1)
        if signed:
            return f"({x} >> tl.where({ok}, {y}, {bits - 1}))"
        return f"tl.where({ok}, {x} >> tl.where({ok}, {y}, 0), 0)"
    return None


def math_module() -> Any:
    """What the generated name ``M`` refers to: NumPy-backed functions in the interpreter,
    else libdevice."""
    if interpreted():
        from . import interp_math

        return interp_math
    from triton.language.extra import libdevice

    return libdevice


_LOCK = threading.RLock()
_LOADED: dict[str, Any] = {}


def helpers() -> Any:
    """The module of `HELPERS` (the generated name ``H``), loaded once."""
    return _module(HELPERS, "helpers")


def load(source: str, name: str) -> Any:
    """The jit function `name` defined by generated `source` (written under `cache_dir()`
    by content hash, so Triton can read its source; loaded once per process). The source
    may use ``tl``, ``triton``, ``M`` (`math_module`) and ``H`` (`HELPERS`)."""
    return getattr(_module(source, name), name)


def _module(source: str, name: str) -> Any:
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    key = f"{name}_{digest}"
    module = _LOADED.get(key)
    if module is not None:
        return module
    with _LOCK:
        module = _LOADED.get(key)
        if module is not None:
            return module
        h = None if source is HELPERS else helpers()
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
        if h is None:
            import triton.language as tl

            module.INTERPRETER = tl.constexpr(interpreted())
        else:
            module.H = h
        spec.loader.exec_module(module)
        _LOADED[key] = module
        return module


def _dump(source: str, key: str) -> None:
    flag = os.environ.get("TENFERRO_TRITON_DUMP", "")
    if flag in ("", "0"):
        return
    log.warning("generated Triton kernel %s:\n%s", key, source)
    if flag != "1":
        folder = Path(flag)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{key}.py").write_text(source)


__all__ = ["HELPERS", "TL", "cast", "constant", "expression", "helpers", "load", "math_module",
           "strided_offset"]
