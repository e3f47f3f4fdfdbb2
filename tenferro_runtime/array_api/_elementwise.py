"""Array API elementwise functions, composed from core primitives.

Binary functions promote (Python scalars included, on either side) and
broadcast through `_helpers.elementwise_operands`, then call one primitive;
Tensor-Tensor operands of one dtype and shape skip straight to the kernel.

dtype rules where the standard leaves them to the implementation:

- Floating-point functions (``divide``, ``sqrt``, ``exp``, ``sin``, ``atan2``,
  ``hypot``, ``logaddexp``, ``reciprocal``, ...) accept integer tensors and
  compute in the runtime's default floating dtype (`Runtime.default_float_dtype`,
  float64 unless set), as NumPy and PyTorch do: ``divide(int_arr, int_arr)`` is
  float64. Bool inputs raise DTypeError.
- Arithmetic on bool (``add``, ``negative``, ``abs``, ...) raises DTypeError;
  a bool tensor with a Python int scalar promotes to int64.
- ``logical_*`` accept numeric tensors and use their truth value (x != 0).
- Comparisons with a Python int outside an integer tensor's range give the
  mathematically right constant (``uint8_arr > -1`` is all True), as NumPy 2.
- Ordering (``less``, ``maximum``, ``clip``, ...) is undefined for complex and
  raises DTypeError; ``equal``/``not_equal`` accept complex.

The special-value functions (floor_divide, remainder, round, hypot, logaddexp,
nextafter, copysign, signbit, log2, log10, clip) live in `_elementwise_special`; complex
inputs of the transcendental functions and ``sign`` get the standard's special-case
tables from `_complex_special`.
"""

from __future__ import annotations

import operator
from typing import Any

from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError

from .. import lax
from ..dispatch import bind
from ..fast_paths import fast_binary, fast_unary
from ..tensor import Tensor
from ._elementwise_base import dtype_of, float_operands, full_like_t, to_inexact
from ._helpers import _INT_RANGE, constant, elementwise_operands, fresh

# ---------------------------------------------------------------- helpers


def _truth(x: Any) -> Any:
    return x if x.dtype is D.bool_ else lax.ne(x, full_like_t(x, 0))


def _named(fn: Any, name: str, doc: str) -> Any:
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


# ---------------------------------------------------------------- arithmetic


def add(x1: Any, x2: Any, /) -> Tensor:
    """x1 + x2."""
    return bind(catalog.add, elementwise_operands("add", x1, x2))


def subtract(x1: Any, x2: Any, /) -> Tensor:
    """x1 - x2."""
    return bind(catalog.sub, elementwise_operands("subtract", x1, x2))


def multiply(x1: Any, x2: Any, /) -> Tensor:
    """x1 * x2."""
    return bind(catalog.mul, elementwise_operands("multiply", x1, x2))


def divide(x1: Any, x2: Any, /) -> Tensor:
    """True division x1 / x2; integer operands give float64."""
    return lax.div(*float_operands("divide", x1, x2))


# the eager interpreter's fast path in front: one aval, no promotion, no broadcasting
add = fast_binary(catalog.add, add, constant=constant)
subtract = fast_binary(catalog.sub, subtract, constant=constant)
multiply = fast_binary(catalog.mul, multiply, constant=constant)
divide = fast_binary(catalog.div, divide, kinds="fc", constant=constant)


def pow(x1: Any, x2: Any, /) -> Tensor:
    """x1 ** x2 (integer powers with negative exponents follow C truncation). The square of a
    real tensor by the Python int 2 is x1 * x1 (NumPy and torch compute pow(x, 2) so: the
    same values), whose derivative needs no pow (as JAX's integer_pow)."""
    if type(x2) is int and x2 == 2 and isinstance(x1, Tensor) and x1.dtype.kind in "iuf":
        return lax.mul(x1, x1)
    return lax.pow(*elementwise_operands("pow", x1, x2))


def maximum(x1: Any, x2: Any, /) -> Tensor:
    """Elementwise maximum; NaN propagates."""
    return lax.maximum(*elementwise_operands("maximum", x1, x2))


def minimum(x1: Any, x2: Any, /) -> Tensor:
    """Elementwise minimum; NaN propagates."""
    return lax.minimum(*elementwise_operands("minimum", x1, x2))


def negative(x: Any, /) -> Tensor:
    """-x (unsigned integers wrap around)."""
    return lax.neg(x)


negative = fast_unary(catalog.neg, negative, "iufc")


def positive(x: Any, /) -> Tensor:
    """+x: a new tensor with x's values."""
    if dtype_of("positive", x) is D.bool_:
        raise DTypeError("positive: expected a numeric tensor, got bool; convert it with astype first")
    return fresh(x)


def abs(x: Any, /) -> Tensor:
    """|x|; complex input gives the real magnitude."""
    return lax.abs(x)


def sign(x: Any, /) -> Tensor:
    """-1, 0 or 1 for real x; z / |z| (0 at 0) for complex z."""
    if dtype_of("sign", x).kind == "c":
        return complex_special("sign", lax.sign, x)
    return lax.sign(x)


def square(x: Any, /) -> Tensor:
    """x * x."""
    return lax.mul(x, x)


def reciprocal(x: Any, /) -> Tensor:
    """1 / x; integer input gives float64."""
    x = to_inexact("reciprocal", x)
    return lax.div(full_like_t(x, 1), x)


def conj(x: Any, /) -> Tensor:
    """Complex conjugate (real input unchanged)."""
    return lax.conj(x)


def real(x: Any, /) -> Tensor:
    """Real part (real input unchanged)."""
    return lax.real(x)


def imag(x: Any, /) -> Tensor:
    """Imaginary part (zeros for real input)."""
    return lax.imag(x)


def ceil(x: Any, /) -> Tensor:
    """Smallest integer value >= x (integer input unchanged)."""
    return lax.ceil(x)


def floor(x: Any, /) -> Tensor:
    """Largest integer value <= x (integer input unchanged)."""
    return lax.floor(x)


def trunc(x: Any, /) -> Tensor:
    """Integer value nearest to x towards zero (integer input unchanged)."""
    return lax.trunc(x)


def isfinite(x: Any, /) -> Tensor:
    """True where x is finite (both parts, for complex)."""
    return lax.isfinite(x)


def isinf(x: Any, /) -> Tensor:
    """True where x (either part, for complex) is infinite."""
    return lax.isinf(x)


def isnan(x: Any, /) -> Tensor:
    """True where x (either part, for complex) is NaN."""
    return lax.isnan(x)


# ---------------------------------------------------------------- floating-point unary


def _float_unary(name: str, prim: Any, doc: str) -> Any:
    def fn(x: Any, /) -> Tensor:
        x = to_inexact(name, x)
        if x.dtype.kind == "c":  # the standard's special-case table (`_complex_special`)
            return complex_special(name, prim, x)
        return prim(x)

    return fast_unary(prim.__self__, _named(fn, name, doc), "f")


acos = _float_unary("acos", lax.acos, "Inverse cosine (principal value).")
acosh = _float_unary("acosh", lax.acosh, "Inverse hyperbolic cosine.")
asin = _float_unary("asin", lax.asin, "Inverse sine (principal value).")
asinh = _float_unary("asinh", lax.asinh, "Inverse hyperbolic sine.")
atan = _float_unary("atan", lax.atan, "Inverse tangent (principal value).")
atanh = _float_unary("atanh", lax.atanh, "Inverse hyperbolic tangent.")
cos = _float_unary("cos", lax.cos, "Cosine.")
cosh = _float_unary("cosh", lax.cosh, "Hyperbolic cosine.")
exp = _float_unary("exp", lax.exp, "Exponential e**x.")
expm1 = _float_unary("expm1", lax.expm1, "exp(x) - 1, accurate for small x.")
log = _float_unary("log", lax.log, "Natural logarithm (principal branch for complex).")
log1p = _float_unary("log1p", lax.log1p, "log(1 + x), accurate for small x.")
sin = _float_unary("sin", lax.sin, "Sine.")
sinh = _float_unary("sinh", lax.sinh, "Hyperbolic sine.")
sqrt = _float_unary("sqrt", lax.sqrt, "Square root (principal branch for complex).")
tan = _float_unary("tan", lax.tan, "Tangent.")
tanh = _float_unary("tanh", lax.tanh, "Hyperbolic tangent.")


def atan2(x1: Any, x2: Any, /) -> Tensor:
    """Angle of the point (x2, x1) in radians, in [-pi, pi]."""
    return lax.atan2(*float_operands("atan2", x1, x2, real=True))


# ---------------------------------------------------------------- comparisons

_PYOPS = {"equal": operator.eq, "not_equal": operator.ne, "less": operator.lt,
          "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge}


def _out_of_range(name: str, x1: Any, x2: Any) -> Any:
    """Constant result of comparing an integer tensor with a Python int beyond its range."""
    for t, s, flip in ((x1, x2, False), (x2, x1, True)):
        if (isinstance(t, Tensor) and t.dtype in _INT_RANGE and isinstance(s, int)
                and not isinstance(s, bool)):
            lo, hi = _INT_RANGE[t.dtype]
            if not lo <= s <= hi:
                above = 1 if s > hi else -1  # every element of t lies strictly on the other side
                value = _PYOPS[name](above, 0) if flip else _PYOPS[name](0, above)
                return full_like_t(t, value, D.bool_)
    return None


def _comparison(name: str, prim: Any, doc: str) -> Any:
    def fn(x1: Any, x2: Any, /) -> Tensor:
        try:
            ops = elementwise_operands(name, x1, x2)
        except DTypeError:
            out = _out_of_range(name, x1, x2)
            if out is None:
                raise
            return out
        return prim(*ops)

    return _named(fn, name, doc)


equal = _comparison("equal", lax.eq, "x1 == x2.")
not_equal = _comparison("not_equal", lax.ne, "x1 != x2.")
less = _comparison("less", lax.lt, "x1 < x2 (real operands).")
less_equal = _comparison("less_equal", lax.le, "x1 <= x2 (real operands).")
greater = _comparison("greater", lax.gt, "x1 > x2 (real operands).")
greater_equal = _comparison("greater_equal", lax.ge, "x1 >= x2 (real operands).")


# ---------------------------------------------------------------- logical and bitwise


def _logical(name: str, prim: Any, doc: str) -> Any:
    def fn(x1: Any, x2: Any, /) -> Tensor:
        a, b = elementwise_operands(name, x1, x2)
        if a.dtype is not D.bool_:
            a, b = _truth(a), _truth(b)
        return prim(a, b)

    return _named(fn, name, doc)


logical_and = _logical("logical_and", lax.logical_and, "Logical AND of the truth values.")
logical_or = _logical("logical_or", lax.logical_or, "Logical OR of the truth values.")
logical_xor = _logical("logical_xor", lax.logical_xor, "Logical XOR of the truth values.")


def logical_not(x: Any, /) -> Tensor:
    """Logical NOT of the truth value of x."""
    if dtype_of("logical_not", x) is D.bool_:
        return lax.logical_not(x)
    return lax.eq(x, full_like_t(x, 0))


def _bitwise(name: str, prim: Any, doc: str) -> Any:
    def fn(x1: Any, x2: Any, /) -> Tensor:
        return prim(*elementwise_operands(name, x1, x2))

    return _named(fn, name, doc)


bitwise_and = _bitwise("bitwise_and", lax.bitwise_and, "Bitwise AND (integer or bool).")
bitwise_or = _bitwise("bitwise_or", lax.bitwise_or, "Bitwise OR (integer or bool).")
bitwise_xor = _bitwise("bitwise_xor", lax.bitwise_xor, "Bitwise XOR (integer or bool).")
bitwise_left_shift = _bitwise(
    "bitwise_left_shift", lax.shift_left,
    "x1 << x2 for integers; shifts of the bit width or more give 0.")
bitwise_right_shift = _bitwise(
    "bitwise_right_shift", lax.shift_right,
    "Arithmetic x1 >> x2 for integers; shifts of the bit width or more give 0 or -1.")


def bitwise_invert(x: Any, /) -> Tensor:
    """Bitwise NOT (logical NOT for bool)."""
    return lax.bitwise_not(x)


from ._complex_special import complex_special  # noqa: E402  (builds on the helpers above)
from ._elementwise_special import (  # noqa: E402  (builds on the helpers above)
    clip,
    copysign,
    floor_divide,
    hypot,
    log2,
    log10,
    logaddexp,
    logaddexp2,
    nextafter,
    remainder,
    round,
    signbit,
)

__all__ = [
    "abs", "acos", "acosh", "add", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_and",
    "bitwise_left_shift", "bitwise_invert", "bitwise_or", "bitwise_right_shift", "bitwise_xor",
    "ceil", "clip", "conj", "copysign", "cos", "cosh", "divide", "equal", "exp", "expm1", "floor",
    "floor_divide", "greater", "greater_equal", "hypot", "imag", "isfinite", "isinf", "isnan",
    "less", "less_equal", "log", "log1p", "log2", "log10", "logaddexp", "logaddexp2", "logical_and",
    "logical_not", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "negative",
    "nextafter", "not_equal", "positive", "pow", "real", "reciprocal", "remainder", "round",
    "sign", "signbit", "sin", "sinh", "square", "sqrt", "subtract", "tan", "tanh", "trunc",
]
