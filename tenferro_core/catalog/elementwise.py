"""Elementwise primitives: operands of one shape and dtype, no broadcasting."""

from __future__ import annotations

from ..dtypes import bool_, real_of
from ..primitive import Primitive
from ._rules import check_kinds, same_dtypes, same_shapes

NUMERIC = "iufc"
REAL = "iuf"
INEXACT = "fc"
INTEGRAL = "iu"
BITS = "biu"


def _unary(name: str, kinds: str, out: str = "same", **flags) -> Primitive:
    def rule(x):
        check_kinds(name, x, kinds)
        if out == "bool":
            return x.shape, bool_
        if out == "real":
            return x.shape, real_of(x.dtype)
        return x.shape, x.dtype

    return Primitive(name, rule, nin=1, **flags)


def _binary(name: str, kinds: str, out: str = "same", **flags) -> Primitive:
    def rule(x, y):
        shape = same_shapes(name, (x, y))
        dtype = same_dtypes(name, (x, y))
        check_kinds(name, x, kinds)
        return shape, (bool_ if out == "bool" else dtype)

    return Primitive(name, rule, nin=2, **flags)


NONDIFF = {"differentiable": False}

neg = _unary("neg", NUMERIC, linear=(0,))
abs = _unary("abs", NUMERIC, out="real")
sign = _unary("sign", NUMERIC)
conj = _unary("conj", NUMERIC, linear=(0,))
real = _unary("real", NUMERIC, out="real", linear=(0,))
imag = _unary("imag", NUMERIC, out="real", linear=(0,))
exp = _unary("exp", INEXACT)
expm1 = _unary("expm1", INEXACT)
log = _unary("log", INEXACT)
log1p = _unary("log1p", INEXACT)
sin = _unary("sin", INEXACT)
cos = _unary("cos", INEXACT)
tan = _unary("tan", INEXACT)
asin = _unary("asin", INEXACT)
acos = _unary("acos", INEXACT)
atan = _unary("atan", INEXACT)
sinh = _unary("sinh", INEXACT)
cosh = _unary("cosh", INEXACT)
tanh = _unary("tanh", INEXACT)
asinh = _unary("asinh", INEXACT)
acosh = _unary("acosh", INEXACT)
atanh = _unary("atanh", INEXACT)
sqrt = _unary("sqrt", INEXACT)
rsqrt = _unary("rsqrt", INEXACT)
logistic = _unary("logistic", INEXACT)
floor = _unary("floor", REAL, **NONDIFF)
ceil = _unary("ceil", REAL, **NONDIFF)
round = _unary("round", REAL, **NONDIFF)
trunc = _unary("trunc", REAL, **NONDIFF)
isnan = _unary("isnan", NUMERIC, out="bool", **NONDIFF)
isinf = _unary("isinf", NUMERIC, out="bool", **NONDIFF)
isfinite = _unary("isfinite", NUMERIC, out="bool", **NONDIFF)
logical_not = _unary("logical_not", "b", **NONDIFF)
bitwise_not = _unary("bitwise_not", BITS, **NONDIFF)

add = _binary("add", NUMERIC, linear=(0, 1))
sub = _binary("sub", NUMERIC, linear=(0, 1))
# bilinear, not jointly linear: `linear` lists operands the op is jointly linear in
mul = _binary("mul", NUMERIC)
div = _binary("div", NUMERIC, linear=(0,))
rem = _binary("rem", REAL)
pow = _binary("pow", NUMERIC)
maximum = _binary("maximum", "b" + REAL)
minimum = _binary("minimum", "b" + REAL)
atan2 = _binary("atan2", "f")
eq = _binary("eq", "b" + NUMERIC, out="bool", **NONDIFF)
ne = _binary("ne", "b" + NUMERIC, out="bool", **NONDIFF)
lt = _binary("lt", "b" + REAL, out="bool", **NONDIFF)
le = _binary("le", "b" + REAL, out="bool", **NONDIFF)
gt = _binary("gt", "b" + REAL, out="bool", **NONDIFF)
ge = _binary("ge", "b" + REAL, out="bool", **NONDIFF)
logical_and = _binary("logical_and", "b", **NONDIFF)
logical_or = _binary("logical_or", "b", **NONDIFF)
logical_xor = _binary("logical_xor", "b", **NONDIFF)
bitwise_and = _binary("bitwise_and", BITS, **NONDIFF)
bitwise_or = _binary("bitwise_or", BITS, **NONDIFF)
bitwise_xor = _binary("bitwise_xor", BITS, **NONDIFF)
shift_left = _binary("shift_left", INTEGRAL, **NONDIFF)
shift_right = _binary("shift_right", INTEGRAL, **NONDIFF)


def _select_rule(pred, on_true, on_false):
    check_kinds("select", pred, "b", "predicate")
    shape = same_shapes("select", (pred, on_true, on_false))
    return shape, same_dtypes("select", (on_true, on_false))


select = Primitive("select", _select_rule, nin=3, linear=(1, 2))


def _clamp_rule(lo, x, hi):
    shape = same_shapes("clamp", (lo, x, hi))
    dtype = same_dtypes("clamp", (lo, x, hi))
    check_kinds("clamp", x, "b" + REAL)
    return shape, dtype


clamp = Primitive("clamp", _clamp_rule, nin=3)

UNARY = (
    neg, abs, sign, conj, real, imag, exp, expm1, log, log1p, sin, cos, tan, asin, acos,
    atan, sinh, cosh, tanh, asinh, acosh, atanh, sqrt, rsqrt, logistic, floor, ceil, round,
    trunc, isnan, isinf, isfinite, logical_not, bitwise_not,
)
BINARY = (
    add, sub, mul, div, rem, pow, maximum, minimum, atan2, eq, ne, lt, le, gt, ge,
    logical_and, logical_or, logical_xor, bitwise_and, bitwise_or, bitwise_xor,
    shift_left, shift_right,
)
PRIMITIVES = UNARY + BINARY + (select, clamp)

__all__ = [p.name for p in PRIMITIVES]
