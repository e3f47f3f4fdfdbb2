"""The dtypes onnxruntime 1.32's CPU provider has kernels for, per ONNX op (measured by
building one-node models; ops not listed take every dtype we emit). The builder computes an
op on a listed-out dtype in a wider carrier dtype and casts back, so exported models run in
onnxruntime while staying standard ONNX."""

from __future__ import annotations

_I = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_F = ("float16", "float32", "float64")

SUPPORTED: dict[str, tuple[str, ...]] = {
    "Neg": ("int8", "int16", "int32", "int64") + _F,
    "Pow": ("int32", "int64") + _F,
    "Max": ("int8", "int32", "int64", "uint8", "uint32", "uint64") + _F,
    "Min": ("int8", "int32", "int64", "uint8", "uint32", "uint64") + _F,
    "Where": ("int8", "int32", "int64", "uint8", "uint32") + _F,
    "Pad": ("bool", "int8", "int32", "int64", "uint8", "uint32", "uint64", "bfloat16") + _F,
    "ReduceSum": ("int32", "int64") + _F,
    "ReduceProd": ("int32", "int64") + _F,
    "ReduceMax": ("bool", "int8", "int32", "int64", "uint8") + _F,
    "ReduceMin": ("bool", "int8", "int32", "int64", "uint8") + _F,
    "ArgMax": ("int8", "int32", "int64", "uint8") + _F,
    "ArgMin": ("int8", "int32", "int64", "uint8") + _F,
    "CumSum": ("int32", "int64") + _F,
    "TopK": ("int8", "int16", "int32", "int64", "uint8") + _F,
    "Einsum": ("int32", "int64") + _F,
    "MatMul": ("int32", "int64", "uint32", "uint64") + _F,
    "Expand": ("bool",) + _I + _F,
    "Abs": _I + _F, "Sign": _I + _F + ("bfloat16",), "Add": _I + _F, "Sub": _I + _F, "Mul": _I + _F,
    "Div": _I + _F, "Mod": _I + _F,
    "Less": _I + _F, "LessOrEqual": _I + _F, "Greater": _I + _F, "GreaterOrEqual": _I + _F,
    "Equal": ("bool",) + _I + _F,
    "Floor": _F, "Ceil": _F, "Round": _F, "Sqrt": _F, "Exp": _F, "Log": _F, "Sin": _F, "Cos": _F,
    "Tanh": _F, "Sigmoid": _F, "Reciprocal": _F, "IsNaN": _F + ("bfloat16",), "IsInf": _F + ("bfloat16",),
    "Tan": ("float16", "float32"), "Atan": ("float16", "float32"), "Asin": ("float16", "float32"),
    "Acos": ("float16", "float32"), "Sinh": ("float16", "float32"), "Cosh": ("float16", "float32"),
    "Asinh": ("float16", "float32"), "Acosh": ("float16", "float32"), "Atanh": ("float16", "float32"),
    "Conv": ("float16", "float32"), "Det": ("float16", "float32"),
}

# ops whose result is the same bits mod 2^n computed in a wider or same-width integer type
WRAPPING = frozenset({"Where", "Pad", "Add", "Sub", "Mul", "Neg", "ReduceSum", "ReduceProd", "CumSum",
                      "Einsum", "MatMul", "Expand", "Pow", "Equal"})
# ops that only compare (order-preserving carriers suffice)
ORDER = frozenset({"Max", "Min", "ReduceMax", "ReduceMin", "ArgMax", "ArgMin", "TopK", "Less",
                   "LessOrEqual", "Greater", "GreaterOrEqual"})

# ops that broadcast their operands numpy-style
BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "LessOrEqual",
                          "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Where", "Mod", "BitwiseAnd",
                          "BitwiseOr", "BitwiseXor"})

BOOL_OUT = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "IsNaN", "IsInf",
                      "Not", "And", "Or", "Xor"})
INT64_OUT = frozenset({"ArgMax", "ArgMin", "Shape", "NonZero", "Size"})

KNOWN_GAPS: dict[str, str] = {
    "float64": "onnxruntime 1.32 has no float64 kernel for Tan, Atan, Asin, Acos, Sinh, Cosh, Asinh, "
               "Acosh, Atanh, Conv, Det (the model is standard ONNX; onnx's reference evaluator runs it)",
}


def carrier(op: str, dtype: str) -> str | None:
    """The dtype to compute `op` in when onnxruntime lacks `dtype` for it (None: none is exact)."""
    ok = SUPPORTED.get(op)
    if ok is None or dtype in ok:
        return None
    if dtype in ("float16", "bfloat16"):
        return "float32" if "float32" in ok else None
    if dtype == "bool":
        for c in ("uint8", "int32", "int64"):
            if c in ok:
                return c
        return None
    if dtype in _I:
        small = dtype in ("int8", "int16", "uint8", "uint16")
        for c in (("int32", "int64") if small else ("int64",)):
            if c in ok and (dtype != "uint64" or op in WRAPPING or op in ORDER):
                return c
    return None
