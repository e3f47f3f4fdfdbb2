"""Elementwise functions with IEEE special cases, composed from several primitives.

- ``floor_divide`` / ``remainder`` follow Python: the quotient rounds towards
  -inf and the remainder has the divisor's sign. Integer division by zero
  gives 0 for both (as NumPy). Floats follow the standard's special cases
  (``inf // 2`` is inf, ``5 // -inf`` is -0); float16 computes in float32.
- ``round`` is half-to-even; complex rounds both parts.
- ``hypot`` scales by the larger magnitude so it never overflows early;
  ``logaddexp`` is hi + log1p(exp(lo - hi)) with (hi, lo) = (x1, x2) ordered by a select,
  so that its derivatives of every order are right at ties (``logaddexp2`` likewise).
- ``copysign``, ``signbit`` and ``nextafter`` work on the bit pattern
  (``bitcast_convert``), so they see signed zeros and NaN sign bits.
- ``log2`` / ``log10`` are log(x) / log(base), snapped to the exact integer
  when x is an exact power of the base.
- ``clip`` keeps x's dtype; bounds may be tensors or Python scalars, and
  integer bounds beyond x's range are clamped to it.

Integer inputs to the floating-point functions here compute in the runtime's default float
dtype (float64 unless set; see `_elementwise`).
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import DTypeError

from .. import lax
from ..tensor import Tensor
from ._elementwise_base import dtype_of, float_operands, full_like_t, to_inexact
from ._helpers import (
    _INT_RANGE,
    broadcast_shapes,
    broadcast_to,
    check_tensor,
    elementwise_operands,
    fresh,
)

_INT_OF = {16: D.int16, 32: D.int32, 64: D.int64}
_UINT_OF = {16: D.uint16, 32: D.uint32, 64: D.uint64}


def _wide(x: Any) -> Any:
    """float16/bfloat16 computed in float32 (as NumPy's half-precision loops do)."""
    return lax.convert(x, new_dtype=D.float32) if x.dtype.kind == "f" and x.dtype.bits == 16 else x


def _back(x: Any, dtype: D.DType) -> Any:
    return x if x.dtype is dtype else lax.convert(x, new_dtype=dtype)


def _lt0(x: Any) -> Any:
    return lax.lt(x, full_like_t(x, 0))


# ---------------------------------------------------------------- floor_divide / remainder


def _int_divmod(a: Any, b: Any, want_quotient: bool) -> Any:
    zero = full_like_t(b, 0)
    by_zero = lax.eq(b, zero)
    safe_b = lax.select(by_zero, full_like_t(b, 1), b)
    r = lax.rem(a, safe_b)
    if a.dtype.kind == "i":
        fix = lax.logical_and(lax.ne(r, zero), lax.ne(_lt0(r), _lt0(safe_b)))
    else:
        fix = None
    if want_quotient:
        q = lax.div(a, safe_b)
        if fix is not None:
            q = lax.select(fix, lax.sub(q, full_like_t(q, 1)), q)
        return lax.select(by_zero, zero, q)
    if fix is not None:
        r = lax.select(fix, lax.add(r, safe_b), r)
    return lax.select(by_zero, zero, r)


def _real_operands(name: str, x1: Any, x2: Any) -> list:
    a, b = elementwise_operands(name, x1, x2)
    if a.dtype.kind not in "iuf":
        raise DTypeError(
            f"{name}: expected real (integer or floating-point) operands, got {a.dtype}; "
            + ("take real() of complex inputs first" if a.dtype.kind == "c"
               else "convert bool inputs with astype first")
        )
    return [a, b]


def floor_divide(x1: Any, x2: Any, /) -> Tensor:
    """x1 // x2, rounded towards -inf (Python semantics)."""
    a, b = _real_operands("floor_divide", x1, x2)
    if a.dtype.kind in "iu":
        return _int_divmod(a, b, True)
    dtype = a.dtype
    a, b = _wide(a), _wide(b)
    zero, one = full_like_t(a, 0), full_like_t(a, 1)
    q = lax.div(a, b)
    mod = lax.rem(a, b)
    d = lax.div(lax.sub(a, mod), b)  # an integer value up to rounding (NumPy's npy_divmod)
    fix = lax.logical_and(lax.ne(mod, zero), lax.ne(_lt0(b), _lt0(mod)))
    d = lax.select(fix, lax.sub(d, one), d)
    d_inf = lax.isinf(d)  # overflowed quotient: keep it, and keep inf - inf out of the fix-ups
    d_f = lax.select(d_inf, zero, d)
    fl = lax.floor(d_f)
    fl = lax.select(lax.gt(lax.sub(d_f, fl), full_like_t(a, 0.5)), lax.add(fl, one), fl)
    signed_zero = lax.mul(lax.select(lax.isfinite(q), q, zero), zero)  # a / b's sign
    fl = lax.select(d_inf, d, lax.select(lax.eq(d_f, zero), signed_zero, fl))
    special = lax.logical_or(lax.eq(b, zero), lax.logical_or(lax.isinf(a), lax.isinf(b)))
    return _back(lax.select(special, q, fl), dtype)


def remainder(x1: Any, x2: Any, /) -> Tensor:
    """x1 % x2 with the sign of x2 (Python semantics)."""
    a, b = _real_operands("remainder", x1, x2)
    if a.dtype.kind in "iu":
        return _int_divmod(a, b, False)
    dtype = a.dtype
    a, b = _wide(a), _wide(b)
    zero = full_like_t(a, 0)
    mod = lax.rem(a, b)
    fix = lax.logical_and(lax.ne(mod, zero), lax.ne(_lt0(b), _lt0(mod)))
    mod = lax.select(fix, lax.add(mod, b), mod)
    signed_zero = lax.select(_lt0(b), lax.neg(zero), zero)
    return _back(lax.select(lax.eq(mod, zero), signed_zero, mod), dtype)


# ---------------------------------------------------------------- round


def complex_from_parts(re: Any, im: Any) -> Any:
    """re + 1j*im exactly (signed zeros included) for any re and finite im."""
    ctype = D.complex_of(re.dtype)
    a = lax.conj(lax.convert(re, new_dtype=ctype))  # (re, -0)
    b = lax.mul(lax.conj(lax.convert(im, new_dtype=ctype)), full_like_t(a, 1j))  # (+0, im)
    return lax.add(a, lax.neg(lax.conj(b)))  # (re, -0) + (-0, im)


def _flip(z: Any) -> Any:
    """(-re, im): lets a real shift land on -0 exactly."""
    return lax.neg(lax.conj(z))


def round(x: Any, /) -> Tensor:
    """Round to the nearest integer value, halves to even; complex rounds both parts."""
    if dtype_of("round", x).kind != "c":
        return lax.round(x)
    re, im = lax.real(x), lax.imag(x)
    zero = full_like_t(re, 0)
    r_re = lax.round(re)
    im_ok = lax.isfinite(im)
    parts = complex_from_parts(r_re, lax.round(lax.select(im_ok, im, zero)))
    # Non-finite imaginary part: keep it and shift the real part by its (finite) rounding step;
    # a negative result is reached from the mirrored side so that -0.0 stays -0.0.
    re_f = lax.select(lax.isfinite(re), re, zero)
    step = lax.convert(lax.sub(lax.round(re_f), re_f), new_dtype=x.dtype)
    shifted = lax.select(_signbit(r_re), _flip(lax.sub(_flip(x), step)), lax.add(x, step))
    return lax.select(im_ok, parts, shifted)


# ---------------------------------------------------------------- hypot, logaddexp


def hypot(x1: Any, x2: Any, /) -> Tensor:
    """sqrt(x1**2 + x2**2) without undue overflow or underflow; inf wins over NaN."""
    a, b = float_operands("hypot", x1, x2, real=True)
    a, b = lax.abs(a), lax.abs(b)
    big, small = lax.maximum(a, b), lax.minimum(a, b)
    zero = full_like_t(big, 0)
    one = full_like_t(big, 1)
    inf = lax.logical_or(lax.isinf(a), lax.isinf(b))
    scale = lax.select(lax.logical_or(lax.eq(big, zero), inf), one, big)
    r = lax.div(small, scale)
    out = lax.mul(big, lax.sqrt(lax.add(one, lax.mul(r, r))))
    return lax.select(inf, full_like_t(big, math.inf), out)


def _log_add_exp(name: str, x1: Any, x2: Any, base2: bool) -> Tensor:
    """hi + log1p(exp(lo - hi)) (base 2: hi + log2(1 + 2**(lo - hi))), hi and lo x1 and x2 in
    order, picked by a select rather than by maximum/minimum/abs.

    ``a + log1p(exp(b - a))`` is log(e**a + e**b) for every a and b, a smooth function;
    the select only keeps exp from overflowing. So derivatives of every order are the
    function's own, at ties too (the second derivative at x1 == x2 is 1/4; ln(2)/4 in base
    2). max + log1p(exp(-|x1 - x2|)) has the same values, but its two terms have kinks at
    ties that cancel in value only: differentiated twice, it gave 0 there.
    """
    a, b = float_operands(name, x1, x2, real=True)
    a_first = lax.ge(a, b)  # False where either is NaN: then lo - hi is NaN, as is the result
    hi, lo = lax.select(a_first, a, b), lax.select(a_first, b, a)
    same_inf = lax.logical_and(lax.eq(a, b), lax.isinf(a))  # equal infinities: no inf - inf
    zero = full_like_t(a, 0)
    d = lax.sub(lax.select(same_inf, zero, lo), lax.select(same_inf, zero, hi))
    if not base2:
        return lax.add(hi, lax.log1p(lax.exp(d)))
    tail = lax.log1p(lax.pow(full_like_t(d, 2), d))  # 2**d exactly, as NumPy's exp2
    return lax.add(hi, lax.mul(tail, full_like_t(tail, 1 / math.log(2))))


def logaddexp(x1: Any, x2: Any, /) -> Tensor:
    """log(exp(x1) + exp(x2)) computed stably (exact derivatives of every order)."""
    return _log_add_exp("logaddexp", x1, x2, base2=False)


def logaddexp2(x1: Any, x2: Any, /) -> Tensor:
    """log2(2**x1 + 2**x2) computed stably: NumPy's, PyTorch's and JAX's logaddexp2 (an
    extra beyond the standard)."""
    return _log_add_exp("logaddexp2", x1, x2, base2=True)


# ---------------------------------------------------------------- bit-level


def _bits(name: str, x: Any, table: dict) -> Any:
    itype = table.get(x.dtype.bits)
    if itype is None:
        raise DTypeError(f"{name}: no integer type of {x.dtype.bits} bits for {x.dtype}")
    return lax.bitcast_convert(x, new_dtype=itype)


def copysign(x1: Any, x2: Any, /) -> Tensor:
    """The magnitude of x1 with the sign bit of x2 (NaN and -0 included)."""
    a, b = float_operands("copysign", x1, x2, real=True)
    ua, ub = _bits("copysign", a, _UINT_OF), _bits("copysign", b, _UINT_OF)
    sign_bit = 1 << (a.dtype.bits - 1)
    magnitude = lax.bitwise_and(ua, full_like_t(ua, sign_bit - 1))
    sign = lax.bitwise_and(ub, full_like_t(ub, sign_bit))
    return lax.bitcast_convert(lax.bitwise_or(magnitude, sign), new_dtype=a.dtype)


def signbit(x: Any, /) -> Tensor:
    """True where the sign bit is set (including -0.0 and negative NaN)."""
    kind = dtype_of("signbit", x).kind
    if kind in "iu":
        return _lt0(x)
    if kind != "f":
        raise DTypeError(
            f"signbit: expected a real floating-point or integer tensor, got {x.dtype}; "
            + ("take real() first" if kind == "c" else "convert it with astype first")
        )
    return _signbit(x)


def _signbit(x: Any) -> Any:
    return _lt0(_bits("signbit", x, _INT_OF))


def nextafter(x1: Any, x2: Any, /) -> Tensor:
    """The next representable value after x1 in the direction of x2."""
    a, b = float_operands("nextafter", x1, x2, real=True)
    ia = _bits("nextafter", a, _INT_OF)
    zero = full_like_t(a, 0)
    one = full_like_t(ia, 1)
    # Away from zero is +1 on the magnitude bits, for either sign.
    away = lax.eq(lax.gt(b, a), lax.gt(a, zero))
    stepped = lax.select(away, lax.add(ia, one), lax.sub(ia, one))
    tiny = lax.select(lax.gt(b, zero), one, full_like_t(ia, -(1 << (a.dtype.bits - 1)) + 1))
    out = lax.bitcast_convert(lax.select(lax.eq(a, zero), tiny, stepped), new_dtype=a.dtype)
    nan = lax.logical_or(lax.isnan(a), lax.isnan(b))
    out = lax.select(lax.eq(a, b), b, out)
    return lax.select(nan, full_like_t(a, math.nan), out)


# ---------------------------------------------------------------- log2, log10


_SMALLEST_NORMAL = {"float16": 2.0**-14, "bfloat16": 2.0**-126, "float32": 2.0**-126,
                    "float64": 2.0**-1022}


def _snap(y: Any, mag: Any, base: float) -> Any:
    """y = log(mag) / log(base), replaced by round(y) where mag is a normal float equal to
    base**round(y): mag's rounding is then far below half an ulp of y, so that is exact.
    Not where mag is inf (a complex |x| that overflowed: base**round(y) overflows too)."""
    r = lax.round(y)
    normal = lax.logical_and(lax.ge(mag, full_like_t(mag, _SMALLEST_NORMAL[mag.dtype.name])),
                             lax.isfinite(mag))
    exact = lax.logical_and(lax.eq(lax.pow(full_like_t(y, base), r), mag), normal)
    return lax.select(exact, r, y)


def _log_base(name: str, x: Any, base: float) -> Tensor:
    x = to_inexact(name, x)
    y = lax.log(x)
    if x.dtype.kind != "c":
        return _snap(lax.mul(y, full_like_t(y, 1 / math.log(base))), x, base)
    re, im = lax.real(y), lax.imag(y)
    c = full_like_t(re, 1 / math.log(base))
    zero = full_like_t(re, 0)
    im_ok = lax.isfinite(im)
    re_out = _snap(lax.mul(re, c), lax.abs(x), base)
    parts = complex_from_parts(re_out, lax.mul(lax.select(im_ok, im, zero), c))
    re_f = lax.select(lax.isfinite(re), re, zero)  # NaN angle: scale the real part only
    shifted = lax.add(y, lax.convert(lax.sub(lax.mul(re_f, c), re_f), new_dtype=y.dtype))
    return lax.select(im_ok, parts, shifted)


def log2(x: Any, /) -> Tensor:
    """Base-2 logarithm; exact at powers of two."""
    return _log_base("log2", x, 2.0)


def log10(x: Any, /) -> Tensor:
    """Base-10 logarithm; exact at representable powers of ten."""
    return _log_base("log10", x, 10.0)


# ---------------------------------------------------------------- clip

_KIND_RANK = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def _bound(x: Any, value: Any, what: str) -> Any:
    """A bound as a tensor of x's dtype, or None."""
    if value is None:
        return None
    dtype = x.dtype
    if isinstance(value, Tensor):
        if _KIND_RANK[value.dtype.kind] > _KIND_RANK[dtype.kind]:
            raise DTypeError(
                f"clip: {what} has dtype {value.dtype}, which {dtype} cannot hold; the result keeps "
                f"x's dtype, so convert x (or {what}) first"
            )
        if value.dtype is not dtype and dtype in _INT_RANGE:
            lo, hi = _INT_RANGE[dtype]
            wide = D.promote_types(dtype, value.dtype)
            value = lax.clamp(lax.full(shape=value.shape, fill_value=int(lo), dtype=wide,
                                       device=value.device), lax.convert(value, new_dtype=wide),
                              lax.full(shape=value.shape, fill_value=int(hi), dtype=wide,
                                       device=value.device))
        return _back(value, dtype)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, bool) and dtype.kind in "biuf":
            return lax.full(shape=(), fill_value=value, dtype=dtype, device=x.device)
        raise DTypeError(
            f"clip: {what} must be a tensor, a Python int/float or None, got {type(value).__name__}"
        )
    if isinstance(value, float) and dtype.kind in "biu":
        raise DTypeError(
            f"clip: {what}={value!r} is a float but x is {dtype}; the result keeps x's dtype, so "
            f"convert x to a floating dtype first"
        )
    if dtype in _INT_RANGE:
        lo, hi = _INT_RANGE[dtype]
        value = builtins.min(builtins.max(value, int(lo)), int(hi))
    elif dtype is D.bool_:
        raise DTypeError(f"clip: {what}={value!r} is not a bool, but x is bool")
    return lax.full(shape=(), fill_value=value, dtype=dtype, device=x.device)


def clip(x: Any, /, min: Any = None, max: Any = None) -> Tensor:
    """Clamp x to [min, max]; either bound may be None. The result keeps x's dtype."""
    check_tensor("clip", x)
    if x.dtype.kind == "c":
        raise DTypeError("clip: complex numbers have no order; clip real(x) and imag(x) separately")
    lo, hi = _bound(x, min, "min"), _bound(x, max, "max")
    parts = [t for t in (x, lo, hi) if t is not None]
    shape = broadcast_shapes(*(t.shape for t in parts))
    x = broadcast_to(x, shape)
    if lo is None and hi is None:
        return fresh(x)
    if hi is None:
        return lax.maximum(x, broadcast_to(lo, shape))
    if lo is None:
        return lax.minimum(x, broadcast_to(hi, shape))
    return lax.clamp(broadcast_to(lo, shape), x, broadcast_to(hi, shape))


__all__ = [
    "clip", "copysign", "floor_divide", "hypot", "log2", "log10", "logaddexp", "logaddexp2",
    "nextafter", "remainder", "round", "signbit",
]
