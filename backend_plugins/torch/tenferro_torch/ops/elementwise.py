"""Elementwise kernels (semantics: docs/primitives.md).

Most primitives are the torch function of the same meaning, called directly. The rest
differ from torch at documented special points and are written out:

* ``sign(NaN)`` is NaN (torch gives 0);
* integer ``div``/``rem`` by zero give 0 and ``INT_MIN / -1`` wraps (torch raises
  ZeroDivisionError, and the hardware division traps), so those divisors are replaced first;
* integer ``pow`` with a negative exponent is 1, +-1 or 0 (torch raises);
* shifts by a count outside ``[0, bits)`` give 0, or -1 for negative signed operands;
* ``conj`` is ``conj_physical``: torch's lazy conjugate bit cannot be exported through
  DLPack or NumPy;
* complex ``add``, ``sub`` and ``neg`` work on the (re, im) pairs: torch's CPU kernels
  compute ``x + 1 * y`` (``(0+0j) + (0+infj)`` is NaN) and ``0 - x`` (``-(0j)`` is +0);
* float ``rem`` is exact where ``x / y`` overflows (torch's CPU fmod gives NaN there).

uint16/uint32/uint64 kernels are in `unsigned`.
"""

from __future__ import annotations

import torch

from .common import by_kind, on_cpu, same


def _float_sign(x):
    return torch.where(torch.isnan(x), x, torch.sign(x))


def _complex_sign(x):
    """x / |x| of x scaled by a power of two first, exactly, so |x| neither overflows nor
    underflows: torch.sgn(1e308+1e308j) is 0 (|x| is inf) where the answer is (1+1j)/sqrt(2);
    elsewhere the scaling changes no bit."""
    e = torch.frexp(torch.maximum(x.real.abs(), x.imag.abs()))[1]  # 0 for 0, inf and NaN
    return torch.sgn(torch.complex(torch.ldexp(x.real, -e), torch.ldexp(x.imag, -e)))


def _pairs(fn):
    """A complex kernel computed on the (re, im) float pairs."""

    def kernel(*xs):
        return torch.view_as_complex(fn(*(torch.view_as_real(x) for x in xs)).contiguous())

    return kernel


_HUGE = 2.0**1000


def _float_rem(x, y):
    """C fmod, exactly. On the CPU, float32 is computed in float64 (where x / y cannot
    overflow); float64 first reduces x modulo |y| * 2**2000, then |y| * 2**1000: multiples
    of y, so the remainder is unchanged, and inf where they overflow (fmod(x, inf) is x)."""
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
        return torch.fmod(x, y)
    if x.dtype is torch.float32:
        return torch.fmod(x.to(torch.float64), y.to(torch.float64)).to(torch.float32)
    big = torch.abs(y) * _HUGE
    return torch.fmod(torch.fmod(torch.fmod(x, big * _HUGE), big), y)


def _signed_div(x, y):
    special = (y == 0) | (y == -1)
    q = torch.div(x, torch.where(special, 1, y), rounding_mode="trunc")
    q = torch.where(y == -1, torch.neg(x), q)  # INT_MIN / -1 wraps to INT_MIN
    return torch.where(y == 0, 0, q)


def unsigned_div(x, y):
    zero = y == 0
    return torch.where(zero, 0, torch.div(x, torch.where(zero, 1, y), rounding_mode="trunc"))


def int_rem(x, y):
    """C fmod; a divisor of 0 or -1 gives 0, as does fmod by 1."""
    special = (y == 0) | (y == -1) if x.dtype.is_signed else (y == 0)
    return torch.fmod(x, torch.where(special, 1, y))


def _complex_log1p(x):
    """torch's complex log1p is NaN for subnormal inputs and loses digits near 0; there
    ``log1p(z) = log1p(x(2 + x) + y^2) / 2 + i atan2(y, 1 + x)`` is exact to rounding."""
    re, im = x.real, x.imag
    near = torch.complex(0.5 * torch.log1p(re * (2 + re) + im * im), torch.atan2(im, 1 + re))
    return torch.where(torch.abs(x) < 0.5, near, torch.log1p(x))


def _complex_div(x, y):
    """Smith's algorithm, as NumPy's complex division loop: torch's own differs where the
    quotient overflows or the divisor is subnormal (1 / (1e-40+0j): NaN+NaNj in torch,
    inf+NaNj in NumPy)."""
    x, y = torch.broadcast_tensors(x, y)
    ar, ai, br, bi = x.real, x.imag, y.real, y.imag
    zero = (br == 0) & (bi == 0)
    wide = br.abs() >= bi.abs()
    rat = torch.where(wide, bi / br, br / bi)
    scl = 1.0 / torch.where(wide, br + bi * rat, bi + br * rat)
    re = torch.where(wide, (ar + ai * rat) * scl, (ar * rat + ai) * scl)
    im = torch.where(wide, (ai - ar * rat) * scl, (ai * rat - ar) * scl)
    re = torch.where(zero, ar / br.abs(), re)
    im = torch.where(zero, ai / br.abs(), im)
    return torch.complex(re, im)


def _complex_pow(x, y):
    """torch's exp(y log x), except: x ** 0 is 1 (torch gives NaN for 0 ** 0), and a real
    integer exponent with |y| < 100 multiplies out by squaring as NumPy does (torch's
    rounding of the angle turns (2742j) ** 13 into -inf+infj where the product is 0+infj)."""
    out = torch.pow(x, y)
    out = torch.where(y == 0, torch.ones((), dtype=out.dtype, device=out.device), out)
    x, y = torch.broadcast_tensors(x, y)
    yr = y.real
    whole = (y.imag == 0) & (yr == torch.round(yr)) & (yr.abs() < 100) & (yr != 0)
    n = torch.where(whole, yr.abs(), 0).to(torch.int64)
    pr, pi = x.real, x.imag  # x ** (2 ** bit)
    ar = ai = None  # the product of the powers taken so far (None: none yet)
    # NumPy (npy_cpow): x, x*x, x*(x*x) for n <= 3; else the product starts at 1+0j, so the
    # first power taken goes through (1+0j) * p, which can change the sign of a zero part
    one_first = n >= 4
    started = torch.zeros_like(whole)
    for bit in range(7):
        take = ((n >> bit) & 1) == 1
        fr = torch.where(one_first, pr - 0 * pi, pr)
        fi = torch.where(one_first, pi + 0 * pr, pi)
        if ar is None:
            ar, ai = torch.where(take, fr, 1), torch.where(take, fi, 0)
        else:  # each part rounded once, as NumPy's cmul
            nr, ni = ar * pr - ai * pi, ar * pi + ai * pr
            ar = torch.where(take, torch.where(started, nr, fr), ar)
            ai = torch.where(take, torch.where(started, ni, fi), ai)
        started = started | take
        pr, pi = pr * pr - pi * pi, pr * pi + pi * pr
    prod = torch.complex(ar, ai)
    prod = torch.where(yr < 0, _complex_div(torch.ones_like(prod), prod), prod)
    nan = torch.full((), float("nan"), dtype=ar.dtype, device=ar.device)
    nan = torch.complex(nan, nan)
    prod = torch.where((yr < 0) & (x == 0), nan, prod)  # NumPy: 0 ** -n is nan+nanj
    return torch.where(whole, prod, out)


def _signed_pow(x, y):
    neg = y < 0
    out = torch.pow(x, torch.where(neg, 0, y))
    odd = torch.remainder(y, 2) != 0
    at_neg = torch.where(x == -1, torch.where(odd, x, torch.neg(x)), torch.where(x == 1, x, 0))
    return torch.where(neg, at_neg, out)


def _shift(fn, left: bool):
    def kernel(x, y):
        bits = x.element_size() * 8
        ok = (y < bits) & (y >= 0) if x.dtype.is_signed else y < bits
        out = torch.where(ok, fn(x, torch.where(ok, y, 0)), 0)
        if left or not x.dtype.is_signed:
            return out
        return torch.where(ok, out, torch.bitwise_right_shift(x, bits - 1))  # -1 for x < 0, else 0

    return kernel


def _clamp(lo, x, hi):
    return torch.minimum(torch.maximum(x, lo), hi)


def _rounding(fn):
    return by_kind(iu=same, f=fn)


def _dense(fn):
    """`fn` on a dense operand: torch's vectorized transcendental loops and their scalar tails
    round differently (sinh(0.78125) in float32 is 1 ulp apart), so a broadcast or strided
    operand would give other bits than the same values laid out densely, and a compiler pass
    that drops a copy would change results. Dense in, the same bits whatever the layout."""
    def kernel(x):
        return fn(x if x.is_contiguous() else x.contiguous())

    kernel.__name__ = getattr(fn, "__name__", "kernel")
    return kernel


_TRANSCENDENTAL = {name: _dense(fn) for name, fn in {
    "exp": torch.exp, "expm1": torch.expm1, "log": torch.log, "sin": torch.sin, "cos": torch.cos,
    "tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan,
    "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh, "rsqrt": torch.rsqrt, "logistic": torch.sigmoid,
}.items()}


_SAME_WIDTH_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def select_bits(pred, on_true, on_false):
    """`select` on the CPU without branches. torch.where branches per element there: 2-5 ns
    an element when the predicate is random (a ReLU mask), ten times a memory-bound pass.
    Selecting the bits instead, ``b ^ ((a ^ b) * pred)`` on same-width integer views, is three
    vectorized passes and exact for every value (NaN payloads and signed zeros included)."""
    ints = _SAME_WIDTH_INT[on_true.element_size()]
    b = on_false.view(ints)
    r = torch.bitwise_xor(on_true.view(ints), b)
    r.mul_(pred)
    r.bitwise_xor_(b)
    return r.view(on_true.dtype)


def select_kernel(avals: tuple):
    """The `select` kernel for one signature: `select_bits` on the CPU for elements of 1 to 8
    bytes, torch.where elsewhere (CUDA's is branch-free already)."""
    on_true = avals[1]
    return select_bits if on_cpu(on_true) and on_true.dtype.itemsize in _SAME_WIDTH_INT else torch.where


BYTE_MASKS = 1 << 13
"""Results from this many elements up: torch's CPU comparisons writing bool are scalar loops
(``x <= 0`` on 128x512 float32: ~50 us on two threads); written into int8 (0 or 1, which
a bool view reads as False or True) they are vectorized: ~18 us. Below it, the int8 tensor
and the `out=` call cost more (~4 us) than they save."""

_COMPARISONS = {"eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
                "ge": torch.ge}


def _mask(fn, shape: tuple, device: torch.device):
    def kernel(*args):
        out = torch.empty(shape, dtype=torch.int8, device=device)
        return fn(*args, out=out).view(torch.bool)

    return kernel


def _isnan(x, out):
    return torch.ne(x, x, out=out)


def _isinf(x, out):
    return torch.eq(torch.abs(x), float("inf"), out=out)


def _isfinite(x, out):  # x - x is 0 exactly for finite x, NaN for inf and NaN
    return torch.eq(torch.sub(x, x), 0, out=out)


_PREDICATES = {"isnan": _isnan, "isinf": _isinf, "isfinite": _isfinite}


def mask_kernel(name: str, in_avals: tuple, out_avals: tuple):
    """A comparison (or isnan/isinf/isfinite of floats) on the CPU writing `BYTE_MASKS` or
    more results, as a vectorized loop into int8 viewed as bool; None elsewhere (the same
    values: each result is exactly 0 or 1)."""
    out = out_avals[0] if len(out_avals) == 1 else None
    if out is None or not on_cpu(out) or not in_avals or out.size < BYTE_MASKS:
        return None
    if name in _COMPARISONS and in_avals[0].dtype.kind in "iuf":
        fn = _COMPARISONS[name]
    elif name in _PREDICATES and in_avals[0].dtype.kind == "f":
        fn = _PREDICATES[name]
    else:
        return None
    return _mask(fn, tuple(out.shape), torch.device("cpu"))


KERNELS = {
    "neg": by_kind(iuf=torch.neg, c=_pairs(torch.neg)), "abs": torch.abs,
    "sign": by_kind(iu=torch.sign, f=_float_sign, c=_complex_sign),
    "conj": by_kind(iuf=same, c=torch.conj_physical),
    "real": by_kind(iuf=same, c=torch.real),
    "imag": by_kind(iuf=torch.zeros_like, c=torch.imag),
    **_TRANSCENDENTAL, "log1p": by_kind(f=_dense(torch.log1p), c=_complex_log1p),
    "sqrt": torch.sqrt,
    "floor": _rounding(torch.floor), "ceil": _rounding(torch.ceil), "round": _rounding(torch.round),
    "trunc": _rounding(torch.trunc),
    "isnan": torch.isnan, "isinf": torch.isinf, "isfinite": torch.isfinite,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
    "add": by_kind(iuf=torch.add, c=_pairs(torch.add)),
    "sub": by_kind(iuf=torch.sub, c=_pairs(torch.sub)), "mul": torch.mul,
    "div": by_kind(f=torch.div, c=_complex_div, i=_signed_div, u=unsigned_div),
    "rem": by_kind(f=_float_rem, iu=int_rem),
    "pow": by_kind(f=torch.pow, c=_complex_pow, u=torch.pow, i=_signed_pow),
    "maximum": torch.maximum, "minimum": torch.minimum, "atan2": torch.atan2,
    "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "shift_left": _shift(torch.bitwise_left_shift, True),
    "shift_right": _shift(torch.bitwise_right_shift, False),
    "select": torch.where, "clamp": _clamp,
}
