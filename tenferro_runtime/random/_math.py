"""log, exp, sqrt, the normal CDF and its inverse for the samplers, from +, -, *, /, rounding and
bit operations only.

Those are single, correctly rounded IEEE operations on every backend, so the samples built on
these functions are the same bits everywhere, where the backends' own log/exp/sqrt kernels
differ in the last place (torch's vectorized CPU sqrt is not correctly rounded). Working
dtypes: float32 and float64. Derivatives come out right through AD: exponents and powers of two
are integer paths (no tangent) and the mantissa is the input times an exact power of two, so
d log(x) = dx / x and d exp(x) = exp(x) dx to rounding.
"""

from __future__ import annotations

import math

import numpy as np

from tenferro_core import dtypes as D

from .. import array_api as xp
from .. import lax
from ..tensor import Tensor

# float dtype: (int dtype of its bits, mantissa bits, exponent bias)
_LAYOUT = {D.float32: (D.int32, 23, 127), D.float64: (D.int64, 52, 1023)}
# ln 2 = hi + lo with hi short enough that k * hi is exact (fdlibm's split for float64)
_LN2 = {D.float32: (0.693145751953125, 1.428606765330187045e-06),
        D.float64: (6.93147180369123816490e-01, 1.90821492927058770002e-10)}
# atanh series: log(m) = 2s (1 + z/3 + z^2/5 + ...), z = s^2 <= 0.0295: terms to 2^-p precision
_ATANH = {D.float32: tuple(1.0 / k for k in range(11, 1, -2)),
          D.float64: tuple(1.0 / k for k in range(21, 1, -2))}
# exp(r) on |r| <= ln2/2: Taylor to r^7 (float32) / r^13 (float64), highest degree first
_EXP = {D.float32: tuple(1.0 / math.factorial(k) for k in range(7, -1, -1)),
        D.float64: tuple(1.0 / math.factorial(k) for k in range(13, -1, -1))}
_EXP_RANGE = {D.float32: (-104.0, 88.72), D.float64: (-746.0, 709.78)}
_TINY = {D.float32: 2.0**-126, D.float64: 2.0**-1022}

# Wichura's AS241 (PPND16), highest degree first: the inverse normal CDF to ~1e-16.
_A = (2.5090809287301226727e3, 3.3430575583588128105e4, 6.7265770927008700853e4,
      4.5921953931549871457e4, 1.3731693765509461125e4, 1.9715909503065514427e3,
      1.3314166789178437745e2, 3.3871328727963666080e0)
_B = (5.2264952788528545610e3, 2.8729085735721942674e4, 3.9307895800092710610e4,
      2.1213794301586595867e4, 5.3941960214247511077e3, 6.8718700749205790830e2,
      4.2313330701600911252e1, 1.0)
_C = (7.74545014278341407640e-4, 2.27238449892691845833e-2, 2.41780725177450611770e-1,
      1.27045825245236838258e0, 3.64784832476320460504e0, 5.76949722146069140550e0,
      4.63033784615654529590e0, 1.42343711074968357734e0)
_D = (1.05075007164441684324e-9, 5.47593808499534494600e-4, 1.51986665636164571966e-2,
      1.48103976427480074590e-1, 6.89767334985100004550e-1, 1.67638483018380384940e0,
      2.05319162663775882187e0, 1.0)
_E = (2.01033439929228813265e-7, 2.71155556874348757815e-5, 1.24266094738807843860e-3,
      2.65321895265761230930e-2, 2.96560571828504891230e-1, 1.78482653991729133580e0,
      5.46378491116411436990e0, 6.65790464350110377720e0)
_F = (2.04426310338993978564e-15, 1.42151175831644588870e-7, 1.84631831751005468180e-5,
      7.86869131145613259100e-4, 1.48753612908506148525e-2, 1.36929880922735805310e-1,
      5.99832206555887937690e-1, 1.0)
# Cephes ndtr.c: erf(x) = x T(x^2) / U(x^2) on |x| < 1; erfc(x) = exp(-x^2) P/Q (x < 8), R/S.
_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
      7.00332514112805075473e3, 5.55923013010394962768e4)
_U = (1.0, 3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
      2.26290000613890934246e4, 4.92673942608635921086e4)
_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
      4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
      9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_Q = (1.0, 1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
      9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
      1.65666309194161350182e3, 5.57535340817727675546e2)
_R = (5.64189583547755073984e-1, 1.27536670759978104416e0, 5.01905042251180477414e0,
      6.16021097993053585195e0, 7.40974269950448939160e0, 2.97886665372100240670e0)
_S = (1.0, 2.26052863220117276590e0, 9.39603524938001434673e0, 1.20489539808096656605e1,
      1.70814450747565897222e1, 9.60896809063285878198e0, 3.36907645100081516050e0)
# the same tables, by name, for the error function of tenferro_nn.functional (one copy)
ERF_COEFFICIENTS = {"T": _T, "U": _U, "P": _P, "Q": _Q, "R": _R, "S": _S}
_ERFC_MAX = {D.float32: 9.3, D.float64: 26.6}  # erfc is 0 (or subnormal) beyond


def _c(value: float, dtype: D.DType) -> float:
    """`value` rounded to `dtype` on the host, so every backend gets the same constant."""
    return float(np.asarray(value, dtype=dtype.numpy))


def _horner(x: Tensor, coefs: tuple[float, ...]) -> Tensor:
    """The polynomial with coefficients `coefs` (highest degree first) at x."""
    dt = x.dtype
    p = x * _c(coefs[0], dt) + _c(coefs[1], dt)
    for c in coefs[2:]:
        p = p * x + _c(c, dt)
    return p


def _pow2(k: Tensor, dtype: D.DType) -> Tensor:
    """2^k as `dtype` for integer k in the normal exponent range."""
    _, mbits, bias = _LAYOUT[dtype]
    return lax.bitcast_convert((k + bias) << mbits, new_dtype=dtype)


def log(x: Tensor) -> Tensor:
    """Natural log of positive, normal, finite x (float32/float64), within a few ulp."""
    dt = x.dtype
    idt, mbits, bias = _LAYOUT[dt]
    e = (lax.bitcast_convert(x, new_dtype=idt) >> mbits) - bias
    m = x * _pow2(-e, dt)  # in [1, 2), exactly
    big = m > _c(math.sqrt(2.0), dt)
    m = xp.where(big, m * 0.5, m)  # in [sqrt(1/2), sqrt(2))
    ef = xp.astype(e + xp.astype(big, idt), dt)
    f = m - 1.0
    s = f / (f + 2.0)
    z = s * s
    two_s = s * 2.0
    hi, lo = _LN2[dt]
    return ef * _c(hi, dt) + (two_s + two_s * (z * _horner(z, _ATANH[dt])) + ef * _c(lo, dt))


def exp(x: Tensor) -> Tensor:
    """exp(x) for float32/float64 x, within a few ulp; 0 below the subnormal range."""
    dt = x.dtype
    idt = _LAYOUT[dt][0]
    x = xp.clip(x, *_EXP_RANGE[dt])
    hi, lo = _LN2[dt]
    k = xp.round(x * _c(1.0 / math.log(2.0), dt))
    r = (x - k * _c(hi, dt)) - k * _c(lo, dt)
    ki = xp.astype(k, idt)
    k1 = ki >> 1  # two factors keep each power of two normal down to the subnormals
    return (_horner(r, _EXP[dt]) * _pow2(k1, dt)) * _pow2(ki - k1, dt)


def sqrt(y: Tensor) -> Tensor:
    """sqrt of positive, normal, finite y (float32/float64), within an ulp: halved exponent bits,
    then Newton steps (each squares the relative error, 6% at the start)."""
    idt, mbits, bias = _LAYOUT[y.dtype]
    s = lax.bitcast_convert((lax.bitcast_convert(y, new_dtype=idt) >> 1) + (bias << (mbits - 1)),
                            new_dtype=y.dtype)
    for _ in range(4):
        s = (s + y / s) * 0.5
    return s


def ndtri(p: Tensor) -> Tensor:
    """The inverse of the standard normal CDF at p in (0, 1) (AS241)."""
    dt = p.dtype
    q = p - 0.5
    r = _c(0.180625, dt) - q * q
    central = q * _horner(r, _A) / _horner(r, _B)
    t = sqrt(-log(xp.maximum(xp.minimum(p, 1.0 - p), _TINY[dt])))
    t1, t5 = t - _c(1.6, dt), t - 5.0
    tail = xp.where(t <= 5.0, _horner(t1, _C) / _horner(t1, _D), _horner(t5, _E) / _horner(t5, _F))
    return xp.where(xp.abs(q) <= _c(0.425, dt), central, xp.where(q < 0.0, -tail, tail))


def ndtr(x: Tensor) -> Tensor:
    """The standard normal CDF (Cephes ndtr: erf near 0, erfc in the tails)."""
    dt = x.dtype
    w = x * _c(math.sqrt(0.5), dt)
    z = xp.abs(w)
    ws = xp.clip(w, -1.0, 1.0)  # each branch sees only its own domain: no inf or NaN in either
    ws2 = ws * ws
    central = 0.5 + 0.5 * (ws * _horner(ws2, _T) / _horner(ws2, _U))
    b = xp.clip(z, 1.0, _ERFC_MAX[dt])
    ratio = xp.where(b < 8.0, _horner(b, _P) / _horner(b, _Q), _horner(b, _R) / _horner(b, _S))
    half = 0.5 * (exp(-(b * b)) * ratio)
    return xp.where(z < 1.0, central, xp.where(w > 0.0, 1.0 - half, half))


TINY = _TINY
