"""Lowering rules of the elementwise primitives: `rule(builder, node, inputs) -> name(s)`.

Where an ONNX op's edge cases differ from tenferro's (docs/primitives.md), the rule adds the
guards: integer division and remainder by zero give 0, max/min propagate NaN, shifts by an
out-of-range count give 0 (or -1), trunc/atan2/expm1/log1p are composed of standard ops.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_core import dtypes as D

from ._builder import Builder, np_dtype
from .errors import ExportError


def _dt(node: Any, i: int = 0) -> Any:
    return node.inputs[i].aval.dtype


def _shape(node: Any, i: int = 0) -> tuple:
    return node.inputs[i].aval.shape


def _real_only(node: Any) -> None:
    for v in node.inputs:
        if v.aval.dtype.kind == "c":
            raise ExportError(
                f"{node.prim.name} (at {node.site}): complex operands have no ONNX lowering (ONNX "
                f"Runtime has no complex kernels for it); compute on real and imaginary parts")


def simple(op_type: str, **attrs: Any) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        _real_only(node)
        return b.op(op_type, ins, **attrs)
    return rule


def by_kind(table: dict[str, Any]) -> Any:
    """A rule picked by the first operand's dtype kind ('b', 'i', 'u', 'f', 'c'; 'iu' etc.)."""
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        kind = _dt(node).kind
        for kinds, fn in table.items():
            if kind in kinds:
                return fn(b, node, ins)
        raise ExportError(f"{node.prim.name} (at {node.site}): dtype {_dt(node)} has no ONNX lowering "
                          f"(opset {b.opset})")
    return rule


def _identity(b: Builder, node: Any, ins: list[str]) -> str:
    return b.op("Identity", ins[:1])


def _zeros(b: Builder, node: Any, ins: list[str]) -> str:
    out = node.outputs[0].aval
    return b.full(0, out.dtype, out.shape)


def _ones_bool(value: bool) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        return b.full(value, D.bool_, node.outputs[0].aval.shape)
    return rule


def _in_float32(fn: Any) -> Any:
    """`fn` computed in float32 for half-precision operands (its intermediates overflow there)."""
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        dt = _dt(node)
        if dt.kind == "f" and dt.bits < 32:
            return b.cast(fn(b, node, [b.cast(ins[0], D.float32)], D.float32), dt)
        return fn(b, node, ins, dt)
    return rule


def _expm1(b: Builder, node: Any, ins: list[str], dt: Any = None) -> str:
    # Kahan: u = exp(x); u == 1 -> x; u - 1 == -1 -> -1; else (u - 1) * x / log(u)
    (x,), dt = ins, dt or _dt(node)
    u = b.op("Exp", [x])
    one = b.scalar(1, dt)
    um1 = b.op("Sub", [u, one])
    ratio = b.op("Div", [b.op("Mul", [um1, x]), b.op("Log", [u])])
    inf = b.op("IsInf", [u], detect_negative=0)
    r = b.op("Where", [inf, u, ratio])
    r = b.op("Where", [b.op("Equal", [um1, b.scalar(-1, dt)]), um1, r])
    return b.op("Where", [b.op("Equal", [u, one]), x, r])


def _log1p(b: Builder, node: Any, ins: list[str], dt: Any = None) -> str:
    # u = 1 + x; u == 1 -> x; else log(u) * x / (u - 1); u == inf -> inf
    (x,), dt = ins, dt or _dt(node)
    one = b.scalar(1, dt)
    u = b.op("Add", [x, one])
    lu = b.op("Log", [u])
    r = b.op("Div", [b.op("Mul", [lu, x]), b.op("Sub", [u, one])])
    r = b.op("Where", [b.op("IsInf", [u], detect_negative=0), u, r])
    r = b.op("Where", [b.op("Equal", [u, b.scalar(0, dt)]), lu, r])
    return b.op("Where", [b.op("Equal", [u, one]), x, r])


def _rsqrt(b: Builder, node: Any, ins: list[str]) -> str:
    return b.op("Reciprocal", [b.op("Sqrt", ins)])


def _f64_via(fn: Any, op_type: str) -> Any:
    """`op_type`, except float64 (no onnxruntime kernel) which `fn` composes of ops that have one."""
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        _real_only(node)
        return fn(b, node, ins) if _dt(node) == D.float64 else b.op(op_type, ins)
    return rule


def _tan(b: Builder, node: Any, ins: list[str]) -> str:
    return b.op("Div", [b.op("Sin", ins), b.op("Cos", ins)])


def _sinh(b: Builder, node: Any, ins: list[str]) -> str:
    # (expm1(x) - expm1(-x)) / 2: accurate near 0
    (x,), dt = ins, _dt(node)
    e1 = _expm1(b, node, [x])
    e2 = _expm1(b, node, [b.op("Neg", [x])])
    return b.op("Mul", [b.op("Sub", [e1, e2]), b.scalar(0.5, dt)])


def _cosh(b: Builder, node: Any, ins: list[str]) -> str:
    (x,), dt = ins, _dt(node)
    return b.op("Mul", [b.op("Add", [b.op("Exp", [x]), b.op("Exp", [b.op("Neg", [x])])]), b.scalar(0.5, dt)])


def _trunc(b: Builder, node: Any, ins: list[str]) -> str:
    x = ins[0]
    neg = b.op("Less", [x, b.scalar(0, _dt(node))])
    return b.op("Where", [neg, b.op("Ceil", [x]), b.op("Floor", [x])])


def _isfinite(b: Builder, node: Any, ins: list[str]) -> str:
    bad = b.op("Or", [b.op("IsNaN", ins), b.op("IsInf", ins)])
    return b.op("Not", [bad])


def _maxmin(op_type: str, bool_op: str) -> Any:
    # onnxruntime's Max/Min propagate NaN (as tenferro's maximum/minimum do); max(x, 0) is a Relu
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        if _dt(node).kind == "b":
            return b.op(bool_op, ins)
        _real_only(node)
        if op_type == "Max" and _dt(node).kind == "f":
            for i in (0, 1):
                if b.scalar_value(ins[i]) == 0:
                    return b.op("Relu", [ins[1 - i]])
        return b.op(op_type, ins)
    return rule


def _int_safe_divisor(b: Builder, node: Any, y: str) -> tuple[str, str]:
    dt = _dt(node)
    zero = b.op("Equal", [y, b.scalar(0, dt)])
    return zero, b.op("Where", [zero, b.scalar(1, dt), y])


def _div(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    dt = _dt(node)
    if dt.kind in "fc":
        return b.op("Div", ins)
    x, y = ins
    zero, y1 = _int_safe_divisor(b, node, y)
    if dt.kind == "i":  # INT_MIN / -1 = INT_MIN (neg wraps); avoid the trap
        m1 = b.op("Equal", [y, b.scalar(-1, dt)])
        y1 = b.op("Where", [m1, b.scalar(1, dt), y1])
        q = b.op("Div", [x, y1])
        q = b.op("Where", [m1, b.op("Neg", [x]), q])
    else:
        q = b.op("Div", [x, y1])
    return b.op("Where", [zero, b.scalar(0, dt), q])


def _rem(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    dt = _dt(node)
    if dt.kind == "f":
        return b.op("Mod", ins, fmod=1)
    x, y = ins
    zero, y1 = _int_safe_divisor(b, node, y)
    if dt.kind == "i":
        m1 = b.op("Equal", [y, b.scalar(-1, dt)])
        zero = b.op("Or", [zero, m1])
        y1 = b.op("Where", [m1, b.scalar(1, dt), y1])
    r = b.op("Mod", [x, y1], fmod=1)
    return b.op("Where", [zero, b.scalar(0, dt), r])


def _pow(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    dt = _dt(node)
    if dt.kind == "f":
        return b.op("Pow", ins)
    x, y = ins
    if dt.kind == "u":
        return _int_pow(b, x, y, dt)
    # negative exponents: 1 for x = 1, +-1 for x = -1 (by parity), 0 otherwise
    zero, one = b.scalar(0, dt), b.scalar(1, dt)
    neg = b.op("Less", [y, zero])
    p = _int_pow(b, x, b.op("Where", [neg, zero, y]), dt)
    odd = b.op("Equal", [b.op("Mod", [y, b.scalar(2, dt)], fmod=1), b.scalar(-1, dt)])
    at_m1 = b.op("Where", [odd, b.scalar(-1, dt), one])
    negv = b.op("Where", [b.op("Equal", [x, one]), one,
                          b.op("Where", [b.op("Equal", [x, b.scalar(-1, dt)]), at_m1, zero])])
    return b.op("Where", [neg, negv, p])


def _int_pow(b: Builder, x: str, y: str, dt: Any) -> str:
    """x ** y for y >= 0 by repeated squaring, wrapping as tenferro's integers do
    (onnxruntime's integer Pow rounds through double)."""
    two, one = b.scalar(2, dt), b.scalar(1, dt)
    result, base = None, x
    for k in range(dt.bits - (dt.kind == "i")):
        bit = b.op("Equal", [b.op("Mod", [y, two], fmod=1), one])
        factor = b.op("Where", [bit, base, b.op("Expand", [one, b.op("Shape", [x])])])
        result = factor if result is None else b.op("Mul", [result, factor])
        y = b.op("Div", [y, two])
        if k + 1 < dt.bits - (dt.kind == "i"):
            base = b.op("Mul", [base, base])
    return result


def _atan2(b: Builder, node: Any, ins: list[str]) -> str:
    y, x = ins
    dt = _dt(node)
    zero = b.scalar(0, dt)
    pi = b.scalar(math.pi, dt)
    a = b.op("Atan", [b.op("Div", [y, x])])
    # both infinite: atan(nan); use +-pi/4 (x > 0) or +-3pi/4 (x < 0)
    both_inf = b.op("And", [b.op("IsInf", [y]), b.op("IsInf", [x])])
    q = b.op("Mul", [b.op("Sign", [y]), b.scalar(math.pi / 4, dt)])
    a = b.op("Where", [both_inf, q, a])
    # both zero: 0 (x >= 0) keeps y's sign; y = x = 0 gives 0 before the quadrant fix
    zz = b.op("And", [b.op("Equal", [y, zero]), b.op("Equal", [x, zero])])
    a = b.op("Where", [zz, b.op("Mul", [y, b.scalar(1, dt)]), a])
    # x < 0 (or x = -0 by its sign bit): move to the left half plane by +-pi, by y's sign bit
    x_neg = b.op("Less", [b.op("Div", [b.scalar(1, dt), x]), zero])
    x_neg = b.op("Or", [b.op("Less", [x, zero]), b.op("And", [b.op("Equal", [x, zero]), x_neg])])
    y_nonneg = b.op("Not", [b.op("Or", [b.op("Less", [y, zero]), b.op("And", [
        b.op("Equal", [y, zero]), b.op("Less", [b.op("Div", [b.scalar(1, dt), y]), zero])])])])
    shifted = b.op("Where", [y_nonneg, b.op("Add", [a, pi]), b.op("Sub", [a, pi])])
    both_inf_left = b.op("Where", [y_nonneg, b.op("Add", [a, b.scalar(math.pi / 2, dt)]),
                                   b.op("Sub", [a, b.scalar(math.pi / 2, dt)])])
    left = b.op("Where", [both_inf, both_inf_left, shifted])
    return b.op("Where", [x_neg, left, a])


def _cmp(op_type: str, negate: bool = False) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        _real_only(node)
        if _dt(node).kind == "b" and op_type != "Equal":
            ins = [b.cast(x, D.uint8) for x in ins]
        out = b.op(op_type, ins)
        return b.op("Not", [out]) if negate else out
    return rule


def _bitwise(op_type: str, bool_op: str) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        return b.op(bool_op if _dt(node).kind == "b" else op_type, ins)
    return rule


_UNSIGNED = {8: D.uint8, 16: D.uint16, 32: D.uint32, 64: D.uint64}


def _shift(left: bool) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> str:
        x, n = ins
        dt = _dt(node)
        bits = dt.bits
        ut = _UNSIGNED[bits]
        zero = b.scalar(0, dt)
        bad = b.op("Or", [b.op("Less", [n, zero]), b.op("GreaterOrEqual", [n, b.scalar(bits, dt)])])
        nn = b.cast(b.op("Where", [bad, zero, n]), ut)
        direction = "LEFT" if left else "RIGHT"
        if dt.kind == "u":
            out = b.op("BitShift", [x, nn], direction=direction)
            fill: str = b.scalar(0, dt)
        elif left:
            out = b.cast(b.op("BitShift", [b.cast(x, ut), nn], direction=direction), dt)
            fill = b.scalar(0, dt)
        else:  # arithmetic: x >= 0 ? x >> n : ~(~x >> n)
            negx = b.op("Less", [x, zero])
            src = b.op("Where", [negx, b.op("BitwiseNot", [x]), x])
            sh = b.cast(b.op("BitShift", [b.cast(src, ut), nn], direction=direction), dt)
            out = b.op("Where", [negx, b.op("BitwiseNot", [sh]), sh])
            fill = b.op("Where", [negx, b.scalar(-1, dt), zero])
        return b.op("Where", [bad, fill, out])
    return rule


def _select(b: Builder, node: Any, ins: list[str]) -> str:
    # select(x <= 0, 0, x) (a ReLU as tenferro-nn writes it) is Relu
    c, a, x = ins
    prod = b.root.producers.get(c)
    if (prod is not None and prod[0] == "LessOrEqual" and b.scalar_value(a) == 0 and _dt(node, 1).kind == "f"
            and len(prod[1]) == 2 and b.root.expanded.get(prod[1][0], prod[1][0]) == x
            and b.scalar_value(prod[1][1]) == 0):
        return b.op("Relu", [x])
    return b.op("Where", ins)


def _clamp(b: Builder, node: Any, ins: list[str]) -> str:
    lo, x, hi = ins
    dt = _dt(node, 1)
    if dt.kind == "b":
        return b.op("And", [b.op("Or", [x, lo]), hi])
    _real_only(node)
    return b.op("Min", [b.op("Max", [x, lo]), hi])


def _convert(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    src, dst = _dt(node), node.params["new_dtype"]
    if dst.kind == "c":
        raise ExportError(f"convert (at {node.site}): conversion to {dst} has no ONNX lowering; "
                          f"ONNX Runtime has no complex tensors to compute with")
    if src.kind == "f" and dst.kind in "iu":  # truncate toward zero first (Cast may round)
        return b.cast(_trunc(b, node, ins), dst)
    return b.cast(ins[0], dst)


def _bitcast(b: Builder, node: Any, ins: list[str]) -> str:
    src, dst = _dt(node), node.params["new_dtype"]
    if src.kind == "c" or dst.kind == "c":
        _real_only(node)
    b.need(26, "BitCast")
    return b.op("BitCast", ins, to=_onnx(dst))


def _onnx(dt: Any) -> int:
    from ._builder import onnx_dtype

    return onnx_dtype(dt)


def _sign(b: Builder, node: Any, ins: list[str]) -> str:
    _real_only(node)
    if _dt(node).kind == "u":
        return b.cast(b.op("Greater", [ins[0], b.scalar(0, _dt(node))]), _dt(node))
    out = b.op("Sign", ins)
    if _dt(node).kind == "f":  # NaN stays NaN
        out = b.op("Where", [b.op("IsNaN", ins), ins[0], out])
    return out


def _int_identity(op: Any) -> Any:
    return by_kind({"iu": _identity, "f": op})


RULES: dict[str, Any] = {
    "neg": simple("Neg"), "abs": by_kind({"iuf": simple("Abs")}), "sign": _sign,
    "conj": by_kind({"iuf": _identity}), "real": by_kind({"iuf": _identity}),
    "imag": by_kind({"iuf": _zeros}),
    "exp": simple("Exp"), "expm1": by_kind({"f": _in_float32(_expm1)}), "log": simple("Log"),
    "log1p": by_kind({"f": _in_float32(_log1p)}),
    "sin": simple("Sin"), "cos": simple("Cos"), "tan": _f64_via(_tan, "Tan"), "asin": simple("Asin"),
    "acos": simple("Acos"), "atan": simple("Atan"), "sinh": _f64_via(_sinh, "Sinh"),
    "cosh": _f64_via(_cosh, "Cosh"),
    "tanh": simple("Tanh"), "asinh": simple("Asinh"), "acosh": simple("Acosh"), "atanh": simple("Atanh"),
    "sqrt": simple("Sqrt"), "rsqrt": by_kind({"f": _rsqrt}), "logistic": simple("Sigmoid"),
    "floor": _int_identity(simple("Floor")), "ceil": _int_identity(simple("Ceil")),
    "round": _int_identity(simple("Round")), "trunc": _int_identity(_trunc),
    "isnan": by_kind({"iu": _ones_bool(False), "f": simple("IsNaN")}),
    "isinf": by_kind({"iu": _ones_bool(False), "f": simple("IsInf")}),
    "isfinite": by_kind({"iu": _ones_bool(True), "f": _isfinite}),
    "logical_not": simple("Not"), "bitwise_not": by_kind({"b": simple("Not"), "iu": simple("BitwiseNot")}),
    "add": simple("Add"), "sub": simple("Sub"), "mul": simple("Mul"), "div": _div, "rem": _rem,
    "pow": _pow, "maximum": _maxmin("Max", "Or"), "minimum": _maxmin("Min", "And"),
    "atan2": by_kind({"f": _atan2}),
    "eq": _cmp("Equal"), "ne": _cmp("Equal", negate=True), "lt": _cmp("Less"), "le": _cmp("LessOrEqual"),
    "gt": _cmp("Greater"), "ge": _cmp("GreaterOrEqual"),
    "logical_and": simple("And"), "logical_or": simple("Or"), "logical_xor": simple("Xor"),
    "bitwise_and": _bitwise("BitwiseAnd", "And"), "bitwise_or": _bitwise("BitwiseOr", "Or"),
    "bitwise_xor": _bitwise("BitwiseXor", "Xor"),
    "shift_left": _shift(True), "shift_right": _shift(False),
    "select": _select, "clamp": _clamp, "convert": _convert, "bitcast_convert": _bitcast,
}

__all__ = ["RULES", "by_kind", "np", "np_dtype", "simple"]
