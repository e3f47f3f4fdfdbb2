"""The Array API standard's special-case tables for complex elementwise functions.

Why: for complex operands the standard (2025.12, "Special cases") fixes the results at
infinite, NaN and signed-zero parts, and the kernels agree neither with it nor with each
other (torch: ``acos(0j) = pi/2+0j``, ``log1p(inf+nanj) = nan+nanj``; both:
``expm1(inf+0j) = inf+nanj``, ``expm1(-inf+infj) = nan+nanj``).

How: the kernel computes ``f(x)`` as before; where ``x`` is special (a part infinite or
NaN, both parts zero, ``atanh(+-1 +- 0j)``, ``log1p(-1 +- 0j)``) one `select` swaps in the
table's value, itself picked by `select` among complex constants. Only core primitives, so
the same on every backend, traced and compiled; no complex arithmetic (torch's complex
``neg``/``add``/``sub`` lose the sign of zero parts): a negated real part is another
constant, a negated imaginary part a ``conj``.

- Each table (`_RULES`) is the standard's, for its canonical quadrant (b >= +0; a >= +0
  too for odd functions and cosh), mirrored by the symmetries the standard states
  (``f(conj x) = conj f(x)``, odd, even); a NaN part's sign bit counts as its sign there.
  Rows for "positive finite b" hold at b = +0 too (C99's "positive-signed"); inputs no row
  lists take C99 Annex G's value; ``log1p(+-0 +- 0j)`` is NumPy's ``+0 +- 0j``.
- asin, atan, cos, sin, tan follow the standard's ``-1j*asinh(x*1j)``, ``-1j*atanh(x*1j)``,
  ``cosh(x*1j)``, ``-1j*sinh(x*1j)``, ``-1j*tanh(x*1j)``, with exact rotations for the 1j's.
- Unspecified signs are NumPy's: ``acos(+-inf+nanj) = nan-infj``, ``acosh(+-0+nanj) =
  nan+pi/2j``, ``asinh(nan+infj) = inf+nanj``, ``atanh(nan+infj) = 0+pi/2j``,
  ``cosh(+-0+infj) = nan+0j``, ``exp(-inf+infj) = 0j``, ``sinh(+-inf+infj) = inf+nanj``,
  ``sin(inf+infj) = nan+infj``, ``sqrt(-inf+nanj) = nan+infj``, ``tanh(inf+infj) = 1+0j``;
  ``tanh(inf+yj)`` is ``1 + copysign(0, sin(2y))j`` as in C99 and NumPy.
- Where NumPy departs from the table the table wins: expm1 (``inf+0j`` -> ``inf+0j``,
  ``-inf+infj`` -> ``-1+0j``, ``nan+0j`` -> ``nan+0j``, ``-0+0j`` -> ``+0+0j`` as written),
  sign (NaN parts give ``nan+nanj``; infinite ones ``x / |x|`` by the division rule with a
  real divisor: ``sign(inf+2j) = nan+0j`` where NumPy gives ``1+0j``).

Cost: eagerly, ``|x|`` and its min and max decide that nothing is special (the kernel's
result is returned); otherwise, and always when traced, the masks of both parts, one
complex select per row and a final select (exp, expm1, cosh, sinh, tanh and their
rotations also take a real cos and sin of b for the signs of cis(b)).

AD: values only. Table values are constants, so gradients at ordinary points are the
kernel's; at a finite special input (x = 0) the kernel's value, and derivative, is kept
where it is already the table's bit for bit; where it is not (torch's ``acos(+-0+0j)``;
``expm1(-0 +- 0j)``; torch's ``log1p(-0 +- 0j)``), the fixed value has a zero derivative.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from functools import cached_property
from typing import Any, NamedTuple

from .. import lax
from ..tensor import Tensor
from ._elementwise_base import full_like_t
from ._elementwise_special import _INT_OF, _signbit

_INF, _NAN, _PI = math.inf, math.nan, math.pi
_P2, _P4, _P34 = _PI / 2, _PI / 4, 3 * _PI / 4


def _and(*masks: Any) -> Any:
    return functools.reduce(lax.logical_and, masks)


def _or(*masks: Any) -> Any:
    return functools.reduce(lax.logical_or, masks)


class _Ctx:
    """A complex input as its parts (a, b) in the base function's frame, with masks made on
    first use, and the output's constants seen through the derived function's output map
    (identity, or ``-1j * w``: base value (r, i) is output (i, -r)).

    Sign flips are never a complex negation (torch's complex ``neg`` and ``sub`` lose the
    sign of zero parts): a flipped real part picks another constant, a flipped imaginary
    part is a ``conj``; both are exact on every backend."""

    def __init__(self, x: Any, rotate_in: bool, rotate_out: bool) -> None:
        re, im = lax.real(x), lax.imag(x)
        self.x = x
        self.a, self.b = (lax.neg(im), re) if rotate_in else (re, im)  # x*1j = (-b, a)
        self._rot = rotate_out
        self._consts: dict = {}
        self.mirror_re: Any = None  # where the output's real part is mirrored (set by the rule)

    def real(self, v: float) -> Any:
        """A real constant shaped like the parts."""
        return self._const(("r", repr(v)), self.a, v)

    def _const(self, key: tuple, like: Any, v: Any) -> Any:
        if key not in self._consts:
            self._consts[key] = full_like_t(like, v)
        return self._consts[key]

    def _out(self, r: float, i: float) -> Any:
        """The base value r + i*1j as a complex constant of the output."""
        return self._const((repr(r), repr(i)), self.x, complex(i, -r) if self._rot else complex(r, i))

    def k(self, r: float, i: float, neg_re: Any = None, neg_im: Any = None,
          mirror: bool = True) -> Any:
        """The base value r + i*1j with its real / imaginary part negated where the masks
        neg_re / neg_im are set (and mirrored with the rule's symmetry unless told not)."""
        out_re, out_im = (neg_im, neg_re) if self._rot else (neg_re, neg_im)
        if mirror and self.mirror_re is not None:
            out_re = self.mirror_re if out_re is None else lax.logical_xor(out_re, self.mirror_re)
        v = self._out(r, i)
        if out_re is not None:
            v = lax.select(out_re, self._out(r, -i) if self._rot else self._out(-r, i), v)
        if out_im is not None:
            v = lax.select(out_im, lax.conj(v), v)
        return v

    @staticmethod
    def pick(m: Any, if_true: Any, if_false: Any) -> Any:
        return lax.select(m, if_true, if_false)

    nan_a = cached_property(lambda s: lax.isnan(s.a))
    nan_b = cached_property(lambda s: lax.isnan(s.b))
    inf_a = cached_property(lambda s: lax.isinf(s.a))
    inf_b = cached_property(lambda s: lax.isinf(s.b))
    fin_a = cached_property(lambda s: lax.isfinite(s.a))
    fin_b = cached_property(lambda s: lax.isfinite(s.b))
    nonfin_b = cached_property(lambda s: lax.logical_not(s.fin_b))
    zero_a = cached_property(lambda s: lax.eq(s.a, s.real(0.0)))
    zero_b = cached_property(lambda s: lax.eq(s.b, s.real(0.0)))
    neg_a = cached_property(lambda s: _signbit(s.a))  # -0 and -NaN included
    neg_b = cached_property(lambda s: _signbit(s.b))
    pinf_a = cached_property(lambda s: _and(s.inf_a, lax.logical_not(s.neg_a)))
    one_zero = cached_property(lambda s: _and(lax.eq(lax.abs(s.a), s.real(1.0)), s.zero_b))
    m1_zero = cached_property(lambda s: _and(lax.eq(s.a, s.real(-1.0)), s.zero_b))  # -1 +- 0j
    zero = cached_property(lambda s: lax.eq(s.x, full_like_t(s.x, 0)))  # both parts +-0
    finite = cached_property(lambda s: _and(s.fin_a, s.fin_b))

    @cached_property
    def cis_neg(self) -> tuple:
        """Where cos(b) < 0 and where sin(|b|) < 0 (finite b; neither elsewhere)."""
        bf = lax.select(self.fin_b, self.b, self.real(0.0))
        zero = self.real(0.0)
        return lax.lt(lax.cos(bf), zero), lax.lt(lax.sin(lax.abs(bf)), zero)

    def cis(self, r: float, i: float) -> Any:
        """(r + i*1j) * cis(|b|) in sign only, for r, i each 0 or inf."""
        cneg, sneg = self.cis_neg
        return self.k(r, i, cneg, sneg)


class _Rule(NamedTuple):
    """A function's table: rows (mask, value) for the canonical quadrant, first match wins,
    mirrored by `sym` ("conj", "odd", "even" or ""); `fixed` rows are taken as they are
    (NumPy's choice of an unspecified sign, not mirrored); `extra` adds finite special
    inputs to the mask. Inputs no row matches (and that are special) give nan + nanj."""

    sym: str
    rows: Callable[[_Ctx], list]
    fixed: Callable[[_Ctx], list] | None = None
    extra: Callable[[_Ctx], Any] | None = None


def _acos(c: _Ctx) -> list:
    return [
        (_or(_and(c.inf_a, c.nan_b), _and(c.nan_a, c.inf_b)), c.k(_NAN, -_INF)),
        (_and(c.zero_a, c.nan_b), c.k(_P2, _NAN)),
        (_and(c.inf_a, c.inf_b), c.pick(c.neg_a, c.k(_P34, -_INF), c.k(_P4, -_INF))),
        (c.inf_b, c.k(_P2, -_INF)),
        (c.inf_a, c.pick(c.neg_a, c.k(_PI, -_INF), c.k(0.0, -_INF))),
        (c.zero, c.k(_P2, -0.0)),
    ]


def _acosh(c: _Ctx) -> list:
    return [
        (_or(_and(c.inf_a, c.nan_b), _and(c.nan_a, c.inf_b)), c.k(_INF, _NAN)),
        (_and(c.inf_a, c.inf_b), c.pick(c.neg_a, c.k(_INF, _P34), c.k(_INF, _P4))),
        (c.inf_b, c.k(_INF, _P2)),
        (c.inf_a, c.pick(c.neg_a, c.k(_INF, _PI), c.k(_INF, 0.0))),
        (c.zero, c.k(0.0, _P2)),
    ]


def _acosh_fixed(c: _Ctx) -> list:
    return [(_and(c.zero_a, c.nan_b), c.k(_NAN, _P2, mirror=False))]


def _asinh(c: _Ctx) -> list:
    return [
        (_or(_and(c.inf_a, c.nan_b), _and(c.nan_a, c.inf_b)), c.k(_INF, _NAN)),
        (_and(c.inf_a, c.inf_b), c.k(_INF, _P4)),
        (c.inf_b, c.k(_INF, _P2)),
        (c.inf_a, c.k(_INF, 0.0)),
        (_and(c.nan_a, c.zero_b), c.k(_NAN, 0.0)),
        (c.zero, c.k(0.0, 0.0)),
    ]


def _atanh(c: _Ctx) -> list:
    return [
        (_and(c.nan_a, c.inf_b), c.k(0.0, _P2)),
        (_and(_or(c.inf_a, c.zero_a), c.nan_b), c.k(0.0, _NAN)),
        (_or(c.inf_a, c.inf_b), c.k(0.0, _P2)),
        (c.one_zero, c.k(_INF, 0.0)),
        (c.zero, c.k(0.0, 0.0)),
    ]


def _cosh(c: _Ctx) -> list:
    return [
        (_and(c.inf_a, c.zero_b), c.k(_INF, 0.0)),
        (_and(c.inf_a, c.nonfin_b), c.k(_INF, _NAN)),
        (c.inf_a, c.cis(_INF, _INF)),
        (c.zero, c.k(1.0, 0.0)),
    ]


def _cosh_fixed(c: _Ctx) -> list:
    return [(_and(c.zero_a, c.nonfin_b), c.k(_NAN, 0.0, mirror=False)),
            (_and(c.nan_a, c.zero_b), c.k(_NAN, 0.0, neg_im=c.neg_b, mirror=False))]


def _exp(c: _Ctx) -> list:
    return [
        (_and(c.inf_a, c.nonfin_b), c.pick(c.neg_a, c.k(0.0, 0.0), c.k(_INF, _NAN))),
        (_and(c.pinf_a, c.zero_b), c.k(_INF, 0.0)),
        (c.inf_a, c.pick(c.neg_a, c.cis(0.0, 0.0), c.cis(_INF, _INF))),
        (_and(c.nan_a, c.zero_b), c.k(_NAN, 0.0)),
        (c.zero, c.k(1.0, 0.0)),
    ]


def _expm1(c: _Ctx) -> list:
    sneg = c.cis_neg[1]  # -inf: +0 * cis(b) - 1 = -1 + (0 with the sign of sin b) j
    return [
        (_and(c.inf_a, c.nonfin_b), c.pick(c.neg_a, c.k(-1.0, 0.0), c.k(_INF, _NAN))),
        (_and(c.pinf_a, c.zero_b), c.k(_INF, 0.0)),
        (c.inf_a, c.pick(c.neg_a, c.k(-1.0, 0.0, neg_im=sneg), c.cis(_INF, _INF))),
        (_and(c.nan_a, c.zero_b), c.k(_NAN, 0.0)),
        (c.zero, c.k(0.0, 0.0)),
    ]


def _log(c: _Ctx, zero: bool = True) -> list:
    rows = [
        (_and(_or(c.inf_a, c.inf_b), _or(c.nan_a, c.nan_b)), c.k(_INF, _NAN)),
        (_and(c.inf_a, c.inf_b), c.pick(c.neg_a, c.k(_INF, _P34), c.k(_INF, _P4))),
        (c.inf_b, c.k(_INF, _P2)),
        (c.inf_a, c.pick(c.neg_a, c.k(_INF, _PI), c.k(_INF, 0.0))),
    ]
    if zero:
        rows.append((c.zero, c.pick(c.neg_a, c.k(-_INF, _PI), c.k(-_INF, 0.0))))
    return rows


def _log1p(c: _Ctx) -> list:
    return _log(c, zero=False) + [(c.m1_zero, c.k(-_INF, 0.0)), (c.zero, c.k(0.0, 0.0))]


def _sinh(c: _Ctx) -> list:
    return [
        (_and(c.zero_a, c.nonfin_b), c.k(0.0, _NAN)),
        (_and(c.inf_a, c.zero_b), c.k(_INF, 0.0)),
        (c.inf_a, c.cis(_INF, _INF)),
        (_and(c.nan_a, c.zero_b), c.k(_NAN, 0.0)),
        (c.zero, c.k(0.0, 0.0)),
    ]


def _sinh_fixed(c: _Ctx) -> list:
    return [(_and(c.inf_a, c.nonfin_b), c.k(_INF, _NAN, mirror=False))]


def _sin_fixed(c: _Ctx) -> list:
    return [(_and(c.inf_a, c.nonfin_b), c.k(-_INF, _NAN, mirror=False))]  # sin: nan + infj


def _sqrt(c: _Ctx) -> list:
    return [
        (c.inf_b, c.k(_INF, _INF)),
        (_and(c.inf_a, c.nan_b), c.pick(c.neg_a, c.k(_NAN, _INF), c.k(_INF, _NAN))),
        (c.inf_a, c.pick(c.neg_a, c.k(0.0, _INF), c.k(_INF, 0.0))),
        (c.zero, c.k(0.0, 0.0)),
    ]


def _tanh(c: _Ctx) -> list:
    cneg, sneg = c.cis_neg  # sin(2|b|) < 0 exactly where one of cos(b), sin(|b|) is
    return [
        (c.inf_a, c.k(1.0, 0.0, neg_im=lax.logical_xor(cneg, sneg))),
        (_and(c.zero_a, c.nonfin_b), c.k(0.0, _NAN)),
        (_and(c.nan_a, c.zero_b), c.k(_NAN, 0.0)),
        (c.zero, c.k(0.0, 0.0)),
    ]


def _sign(c: _Ctx) -> list:
    return [  # x / |x| with |x| = +inf: inf / inf is NaN, finite / inf a signed zero
        (_and(c.inf_a, c.fin_b), c.k(_NAN, 0.0, neg_im=c.neg_b)),
        (_and(c.fin_a, c.inf_b), c.k(0.0, _NAN, neg_re=c.neg_a)),
        (c.zero, c.k(0.0, 0.0)),
    ]


_RULES = {
    "acos": _Rule("conj", _acos), "acosh": _Rule("conj", _acosh, fixed=_acosh_fixed),
    "asinh": _Rule("odd", _asinh), "atanh": _Rule("odd", _atanh, extra=lambda c: c.one_zero),
    "cosh": _Rule("even", _cosh, fixed=_cosh_fixed), "exp": _Rule("conj", _exp),
    "expm1": _Rule("conj", _expm1), "log": _Rule("conj", _log),
    "log1p": _Rule("conj", _log1p, extra=lambda c: c.m1_zero),
    "sinh": _Rule("odd", _sinh, fixed=_sinh_fixed), "sqrt": _Rule("conj", _sqrt),
    "tanh": _Rule("odd", _tanh), "sign": _Rule("", _sign),
}
# derived functions: name -> (base, whether the output is -1j * base(x*1j) rather than
# base(x*1j), fixed rows replacing the base's: NumPy's sin picks another unspecified sign)
_DERIVED = {"asin": ("asinh", True, None), "atan": ("atanh", True, None),
            "cos": ("cosh", False, None), "sin": ("sinh", True, _sin_fixed),
            "tan": ("tanh", True, None)}
NAMES = frozenset(_RULES) | frozenset(_DERIVED)


def _mirror_masks(c: _Ctx, sym: str) -> tuple:
    """Where the rule's symmetry negates the base value's (real, imaginary) part."""
    if sym == "conj":
        return None, c.neg_b
    if sym == "odd":
        return c.neg_a, c.neg_b
    if sym == "even":
        return None, lax.logical_xor(c.neg_a, c.neg_b)
    return None, None


def _same_bits(y: Any, z: Any) -> Any:
    """Where complex y and z have the same bits in both parts (signs of zero included)."""
    itype = _INT_OF[lax.real(y).dtype.bits]

    def bits(t: Any) -> Any:
        return lax.bitcast_convert(t, new_dtype=itype)

    return _and(lax.eq(bits(lax.real(y)), bits(lax.real(z))),
                lax.eq(bits(lax.imag(y)), bits(lax.imag(z))))


def _ordinary(x: Any, unit: bool) -> bool:
    """True when x is concrete (eager) and no element can be special: every |x| finite and
    nonzero (and not 1 when `unit`, for the rows at +-1 +- 0j). A cheap superset test (|x| and
    its min and max); traced values are never known ordinary."""
    if type(x) is not Tensor:
        return False
    if x.size == 0:
        return True
    m = lax.abs(x)
    axes = tuple(range(m.ndim))
    lo, hi = float(lax.reduce_min(m, axes=axes)), float(lax.reduce_max(m, axes=axes))
    if not 0 < lo <= hi < _INF:  # NaN fails this too
        return False
    return not (unit and bool(lax.reduce_or(lax.eq(m, full_like_t(m, 1)), axes=axes)))


def complex_special(name: str, prim: Callable[[Any], Tensor], x: Any) -> Tensor:
    """prim(x) for a complex tensor x, with the standard's special-case table of `name`
    (one of `NAMES`) swapped in where x is special."""
    y = prim(x)
    base, rotate_out, fixed = _DERIVED.get(name, (name, False, None))
    rule = _RULES[base]
    if _ordinary(x, rule.extra is not None):
        return y
    fixed = fixed or rule.fixed
    c = _Ctx(x, base != name, rotate_out)
    special = _or(lax.logical_not(c.finite), c.zero)
    if rule.extra is not None:
        special = _or(special, rule.extra(c))
    neg_re, neg_im = _mirror_masks(c, rule.sym)
    # the output's imaginary part is mirrored by one conj at the end, its real part constant
    # by constant (`_Ctx.k`)
    c.mirror_re, mirror_im = (neg_im, neg_re) if rotate_out else (neg_re, neg_im)
    z = c.k(_NAN, _NAN, mirror=False)
    for m, v in reversed(rule.rows(c)):
        z = lax.select(m, v, z)
    if mirror_im is not None:
        z = lax.select(mirror_im, lax.conj(z), z)
    for m, v in fixed(c) if fixed is not None else ():
        z = lax.select(m, v, z)
    # A finite special input (zero parts, atanh(+-1 +- 0j), log1p(-1 +- 0j)) keeps the
    # kernel's value where that is already the table's, bit for bit: so the derivative there
    # (at x = 0, an ordinary point of most of these functions) stays the kernel's.
    keep = _and(c.finite, _same_bits(y, z))
    return lax.select(_and(special, lax.logical_not(keep)), z, y)


__all__ = ["NAMES", "complex_special"]
