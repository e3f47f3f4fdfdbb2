"""JVP and transpose rules of the elementwise primitives.

Rules follow `tenferro_ad.ad_util`: ``jvp(primals, tangents) -> (out, tangent_out)``
with `Zero` tangents skipped rather than materialized, and
``transpose(ct, *operands) -> tuple`` with `UndefinedPrimal` marking the linear
operands. They use only `tenferro_runtime.lax` on the values they are given, so they
trace and differentiate again.

Complex numbers follow JAX: tangents of holomorphic functions are ``f'(z) * t``; the
non-holomorphic ones are real-linear (``abs``: ``Re(conj(z) t) / |z|``, ``sign``, ``conj``,
``real``, ``imag``); transposes are unconjugated (``mul``'s is ``ct * other``), so
``real``'s maps a real ct to ``ct + 0j`` and ``imag``'s to ``-1j * ct``.

Conventions at special points:

- ``abs'(0) = 0`` (real: ``sign(x) * t``; complex: ``Re(conj(z) t) / |z|``, 0 at 0); ``sign``'s tangent is 0
  for real input and ``(t - s Re(conj(s) t)) / |z|`` for complex, 0 at 0.
- ``sqrt'(0) = inf`` (``t * 0.5 / sqrt(x)``), ``rsqrt'(0)`` likewise non-finite.
- ``maximum`` / ``minimum``: at ties each operand gets half the tangent; an operand that
  is NaN where the result is NaN gets nothing.
- ``clamp(lo, x, hi)``: the tangent of the operand that is strictly the result: x where
  ``lo < x < hi``, lo where ``x < lo < hi``, hi where ``hi < max(x, lo)`` (so hi also
  where ``lo > hi``, the result then being hi). At ties (``x == lo``, ``x == hi``,
  ``lo == hi``) the tangent is 0, as in JAX.
- ``pow(x, y)``: d/dx is ``y * x**(y-1)``, taken as 0 where ``y == 0``; d/dy is
  ``log(x) * x**y`` with ``log(x)`` replaced by 0 where ``x == 0`` (as JAX), so it is 0
  at ``x == 0`` for ``y >= 0`` (NaN for ``y < 0``, where ``x**y`` is inf).
- ``rem(x, y)``: ``t_x - t_y * trunc(x / y)``.
- ``atan2(y, x)``: ``(x * t_y - y * t_x) / (x**2 + y**2)``; NaN at the origin.
"""

from __future__ import annotations

from typing import Any

from tenferro_runtime import lax

from ..ad_util import Zero, add_tangents, is_undefined, is_zero

# The linear ones (neg, conj, real, imag, select) have no entry: their JVP is the generic
# `tenferro_ad.jvp.linear_jvp`. add and sub keep rules that leave a Zero tangent symbolic;
# mul and div are not jointly linear in their operands.
JVP: dict = {}
TRANSPOSE: dict = {}


# ---- helpers ----------------------------------------------------------------

def _const(x: Any, value: Any, dtype: Any = None) -> Any:
    """`value` as a tensor of x's shape and device (and x's dtype unless given)."""
    c = lax.full(shape=(), fill_value=value, dtype=dtype or x.dtype, device=x.device)
    if not x.shape:
        return c
    return lax.broadcast_in_dim(c, shape=tuple(x.shape), broadcast_dimensions=())


def _square(x: Any) -> Any:
    return lax.mul(x, x)


def _scale(t: Any, factor: Any) -> Any:
    """t * factor, keeping a Zero tangent symbolic."""
    return t if is_zero(t) else lax.mul(t, factor)


def _zero_like(x: Any) -> Zero:
    return Zero(x.aval)


def _is_complex(x: Any) -> bool:
    return x.dtype.kind == "c"


# ---- unary ------------------------------------------------------------------

def _unary(name: str, tangent: Any) -> None:
    """Register the JVP of a unary primitive: ``tangent(t, x, y) -> tangent_out``."""
    prim = getattr(lax, name)

    def jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        y = prim(x)
        if is_zero(t):
            return y, _zero_like(y)
        return y, tangent(t, x, y)

    jvp.__name__ = f"{name}_jvp"
    jvp.__doc__ = f"JVP of `{name}`."
    JVP[name] = jvp


def _safe_inverse_abs(x, y):
    """(x == 0, 1/|x| with 1 where x == 0): |x| = y for abs, computed here for sign."""
    r = lax.abs(x) if y.dtype.kind == "c" else y
    at_zero = lax.eq(r, _const(r, 0))
    return at_zero, lax.div(_const(r, 1), lax.select(at_zero, _const(r, 1), r))


def _abs_tangent(t, x, y):
    """Complex: Re(conj(z) t) / |z|, written without `sign` so it differentiates again."""
    if _is_complex(x):
        at_zero, inv = _safe_inverse_abs(x, y)
        d = lax.mul(lax.real(lax.mul(lax.conj(x), t)), inv)
        return lax.select(at_zero, _const(d, 0), d)
    return lax.mul(lax.sign(x), t)


def _sign_tangent(t, x, y):
    """Real: 0. Complex: d(z/|z|) = (t - s Re(conj(s) t)) / |z| with s = sign(z); 0 at z = 0."""
    if not _is_complex(x):
        return _zero_like(y)
    at_zero, inv = _safe_inverse_abs(x, y)
    d = lax.sub(t, lax.mul(y, lax.convert(lax.real(lax.mul(lax.conj(y), t)), new_dtype=y.dtype)))
    d = lax.mul(d, lax.convert(inv, new_dtype=y.dtype))
    return lax.select(at_zero, _const(d, 0), d)


def _sqrt_1m_x2(x):
    return lax.rsqrt(lax.sub(_const(x, 1), _square(x)))


_unary("abs", _abs_tangent)
_unary("sign", _sign_tangent)
_unary("exp", lambda t, x, y: lax.mul(t, y))
_unary("expm1", lambda t, x, y: lax.mul(t, lax.add(y, _const(y, 1))))
_unary("log", lambda t, x, y: lax.div(t, x))
_unary("log1p", lambda t, x, y: lax.div(t, lax.add(x, _const(x, 1))))
_unary("sin", lambda t, x, y: lax.mul(t, lax.cos(x)))
_unary("cos", lambda t, x, y: lax.neg(lax.mul(t, lax.sin(x))))
_unary("tan", lambda t, x, y: lax.mul(t, lax.add(_const(y, 1), _square(y))))
_unary("asin", lambda t, x, y: lax.mul(t, _sqrt_1m_x2(x)))
_unary("acos", lambda t, x, y: lax.neg(lax.mul(t, _sqrt_1m_x2(x))))
_unary("atan", lambda t, x, y: lax.div(t, lax.add(_const(x, 1), _square(x))))
_unary("sinh", lambda t, x, y: lax.mul(t, lax.cosh(x)))
_unary("cosh", lambda t, x, y: lax.mul(t, lax.sinh(x)))
_unary("tanh", lambda t, x, y: lax.mul(t, lax.sub(_const(y, 1), _square(y))))
_unary("asinh", lambda t, x, y: lax.mul(t, lax.rsqrt(lax.add(_square(x), _const(x, 1)))))
# 1/(sqrt(x-1) sqrt(x+1)), not 1/sqrt(x*x-1): the latter has the wrong sign for complex
# x with negative real part (the principal acosh is sqrt(x-1) sqrt(x+1)-based).
_unary("acosh", lambda t, x, y: lax.mul(
    t, lax.mul(lax.rsqrt(lax.sub(x, _const(x, 1))), lax.rsqrt(lax.add(x, _const(x, 1))))))
_unary("atanh", lambda t, x, y: lax.div(t, lax.sub(_const(x, 1), _square(x))))
_unary("sqrt", lambda t, x, y: lax.mul(t, lax.div(_const(y, 0.5), y)))
_unary("rsqrt", lambda t, x, y: lax.mul(t, lax.mul(_const(x, -0.5), lax.div(y, x))))
_unary("logistic", lambda t, x, y: lax.mul(t, lax.mul(y, lax.sub(_const(y, 1), y))))


# ---- binary -----------------------------------------------------------------

def _add_jvp(primals, tangents):
    """JVP of `add`."""
    x, y = primals
    return lax.add(x, y), add_tangents(*tangents)


def _sub_jvp(primals, tangents):
    """JVP of `sub`."""
    x, y = primals
    tx, ty = tangents
    out = lax.sub(x, y)
    if is_zero(ty):
        return out, tx
    if is_zero(tx):
        return out, lax.neg(ty)
    return out, lax.sub(tx, ty)


def _mul_jvp(primals, tangents):
    """JVP of `mul`: ``tx * y + x * ty``."""
    x, y = primals
    tx, ty = tangents
    return lax.mul(x, y), add_tangents(_scale(tx, y), _scale(ty, x))


def _div_jvp(primals, tangents):
    """JVP of `div`: ``tx / y - ty * out / y``."""
    x, y = primals
    tx, ty = tangents
    out = lax.div(x, y)
    a = tx if is_zero(tx) else lax.div(tx, y)
    b = ty if is_zero(ty) else lax.neg(lax.mul(ty, lax.div(out, y)))
    return out, add_tangents(a, b)


def _rem_jvp(primals, tangents):
    """JVP of `rem`: ``tx - ty * trunc(x / y)``."""
    x, y = primals
    tx, ty = tangents
    out = lax.rem(x, y)
    b = ty if is_zero(ty) else lax.neg(lax.mul(ty, lax.trunc(lax.div(x, y))))
    return out, add_tangents(tx, b)


def _pow_jvp(primals, tangents):
    """JVP of `pow`, guarded where x == 0 (d/dy) and where x == y == 0 (d/dx)."""
    x, y = primals
    tx, ty = tangents
    out = lax.pow(x, y)
    a = tx
    if not is_zero(tx):
        # y * x**(y-1) with x**(y-1) taken at x = 1 where x == y == 0: the value there is
        # 0 (times y), and the expression stays differentiable in y (a select on y == 0
        # would drop the mixed second derivative).
        one = _const(y, 1)
        both_zero = lax.logical_and(lax.eq(x, _const(x, 0)), lax.eq(y, _const(y, 0)))
        safe_base = lax.select(both_zero, _const(x, 1), x)
        a = lax.mul(tx, lax.mul(y, lax.pow(safe_base, lax.sub(y, one))))
    b = ty
    if not is_zero(ty):
        safe_x = lax.select(lax.eq(x, _const(x, 0)), _const(x, 1), x)
        b = lax.mul(ty, lax.mul(lax.log(safe_x), out))
    return out, add_tangents(a, b)


def _balanced_eq(a, out, b):
    """1 where a is the result, halved where b is too; 0 elsewhere."""
    one, zero = _const(out, 1), _const(out, 0)
    num = lax.select(lax.eq(a, out), one, zero)
    den = lax.select(lax.eq(b, out), _const(out, 2), one)
    return lax.div(num, den)


def _minmax(name: str) -> None:
    prim = getattr(lax, name)

    def jvp(primals, tangents):
        x, y = primals
        tx, ty = tangents
        out = prim(x, y)
        a = tx if is_zero(tx) else lax.mul(tx, _balanced_eq(x, out, y))
        b = ty if is_zero(ty) else lax.mul(ty, _balanced_eq(y, out, x))
        return out, add_tangents(a, b)

    jvp.__name__ = f"{name}_jvp"
    jvp.__doc__ = f"JVP of `{name}`: ties split the tangent evenly."
    JVP[name] = jvp


def _atan2_jvp(primals, tangents):
    """JVP of `atan2(y, x)`: ``(x * ty - y * tx) / (x**2 + y**2)``."""
    y, x = primals
    ty, tx = tangents
    out = lax.atan2(y, x)
    den = lax.add(_square(x), _square(y))
    a = ty if is_zero(ty) else lax.mul(ty, lax.div(x, den))
    b = tx if is_zero(tx) else lax.neg(lax.mul(tx, lax.div(y, den)))
    return out, add_tangents(a, b)


def _masked(mask, t, zero):
    return t if is_zero(t) else lax.select(mask, t, zero)


def _clamp_jvp(primals, tangents):
    """JVP of `clamp(lo, x, hi)`: the tangent of the operand strictly equal to the result."""
    lo, x, hi = primals
    tlo, tx, thi = tangents
    out = lax.clamp(lo, x, hi)
    zero = _const(out, 0)
    x_wins = lax.logical_and(lax.lt(lo, x), lax.lt(x, hi))
    lo_wins = lax.logical_and(lax.lt(x, lo), lax.lt(lo, hi))
    hi_wins = lax.lt(hi, lax.maximum(x, lo))
    t = add_tangents(_masked(lo_wins, tlo, zero), _masked(x_wins, tx, zero))
    return out, add_tangents(t, _masked(hi_wins, thi, zero))


JVP.update(add=_add_jvp, sub=_sub_jvp, mul=_mul_jvp, div=_div_jvp, rem=_rem_jvp,
           pow=_pow_jvp, atan2=_atan2_jvp, clamp=_clamp_jvp)
_minmax("maximum")
_minmax("minimum")


# ---- transposes -------------------------------------------------------------

def _neg_transpose(ct, x):
    """Transpose of `neg`."""
    return (Zero(x.aval) if is_zero(ct) else lax.neg(ct),)


def _conj_transpose(ct, x):
    """Transpose of `conj` (real-linear): ``conj(ct)``."""
    return (Zero(x.aval) if is_zero(ct) else lax.conj(ct),)


def _real_transpose(ct, x):
    """Transpose of `real`: ``ct + 0j`` for a complex operand."""
    if is_zero(ct):
        return (Zero(x.aval),)
    return (lax.convert(ct, new_dtype=x.aval.dtype) if x.aval.dtype.kind == "c" else ct,)


def _imag_transpose(ct, x):
    """Transpose of `imag`: ``-1j * ct`` for a complex operand; 0 for a real one."""
    if is_zero(ct) or x.aval.dtype.kind != "c":
        return (Zero(x.aval),)
    dt = x.aval.dtype
    return (lax.mul(lax.convert(ct, new_dtype=dt), _const(ct, -1j, dtype=dt)),)


def _add_transpose(ct, x, y):
    """Transpose of `add`: ct to each undefined operand."""
    return tuple((ct if not is_zero(ct) else Zero(v.aval)) if is_undefined(v) else None
                 for v in (x, y))


def _sub_transpose(ct, x, y):
    """Transpose of `sub`: ct and -ct."""
    cx = cy = None
    if is_undefined(x):
        cx = Zero(x.aval) if is_zero(ct) else ct
    if is_undefined(y):
        cy = Zero(y.aval) if is_zero(ct) else lax.neg(ct)
    return cx, cy


def _mul_transpose(ct, x, y):
    """Transpose of `mul` in its one undefined operand: ``ct * other`` (unconjugated)."""
    if is_undefined(x):
        return (Zero(x.aval) if is_zero(ct) else lax.mul(ct, y)), None
    return None, (Zero(y.aval) if is_zero(ct) else lax.mul(x, ct))


def _div_transpose(ct, x, y):
    """Transpose of `div` in the numerator: ``ct / y``."""
    if is_undefined(y):
        raise ValueError("div is linear in its numerator only; the denominator must be known")
    return (Zero(x.aval) if is_zero(ct) else lax.div(ct, y)), None


def _select_transpose(ct, pred, a, b):
    """Transpose of `select`: ct where the branch was taken, 0 elsewhere."""
    if is_undefined(pred):
        raise ValueError("select is not linear in its predicate")
    ca = cb = None
    if is_zero(ct):
        ca = Zero(a.aval) if is_undefined(a) else None
        cb = Zero(b.aval) if is_undefined(b) else None
        return None, ca, cb
    zero = _const(ct, 0)
    if is_undefined(a):
        ca = lax.select(pred, ct, zero)
    if is_undefined(b):
        cb = lax.select(pred, zero, ct)
    return None, ca, cb


TRANSPOSE.update(neg=_neg_transpose, conj=_conj_transpose, real=_real_transpose,
                 imag=_imag_transpose, add=_add_transpose, sub=_sub_transpose,
                 mul=_mul_transpose, div=_div_transpose, select=_select_transpose)

__all__ = ["JVP", "TRANSPOSE"]
