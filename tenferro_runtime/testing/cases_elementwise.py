"""Conformance cases for the elementwise primitives (including select and clamp).

Transcendental functions get domains where the result is finite and
well-conditioned for every float width (NaN/inf inputs still included for
real floats); complex inputs stay in moderate boxes away from overflow.
"""

from __future__ import annotations

from collections.abc import Callable

from tenferro_core import dtypes as D
from tenferro_core.dtypes import DType

from .cases import Case, Ctx, Spec, av, same_probe, spec_table
from .strategies import DEFAULT, Domain, arrays, shapes

DomainFn = Callable[[DType], tuple[Domain, ...]]

HALVES = tuple(k / 2 for k in range(-9, 10))
SHIFT_COUNTS = tuple(range(-2, 67))


def _elementwise(name: str, nin: int, domains: DomainFn | None = None,
                 mult: Callable[[DType], float] | None = None) -> Spec:
    def draw(draw, dtype: DType, ctx: Ctx) -> Case:
        shape = draw(shapes())
        doms = domains(dtype) if domains else (DEFAULT,) * nin
        args = tuple(draw(arrays(dtype, shape, dom)) for dom in doms)
        return Case(args, mult=mult(dtype) if mult else 1.0)

    return Spec(name, same_probe(nin), draw)


def _transcendental(name: str, lo: float, hi: float, clo: float, chi: float, **cflags) -> Spec:
    """Real inputs in [lo, hi] (plus NaN/inf/+-0), complex parts in [clo, chi]."""

    def domains(d: DType) -> tuple[Domain, ...]:
        if d.kind == "c":
            return (Domain(clo, chi, **cflags),)
        return (Domain(lo, hi),)

    return _elementwise(name, 1, domains, mult=lambda d: 16.0 if d.kind == "c" else 2.0)


def _by_kind(**per_kind: tuple[Domain, ...]) -> DomainFn:
    """Domains chosen by dtype kind ('b', 'i', 'u', 'f', 'c'; 'default' otherwise)."""

    def domains(d: DType) -> tuple[Domain, ...]:
        return per_kind.get(d.kind, per_kind["default"])

    return domains


TRANSCENDENTAL = (
    _transcendental("exp", -10, 10, -5, 5),
    _transcendental("expm1", -10, 10, -5, 5),
    _transcendental("log", -10, 100, -10, 10, nonzero=True),
    _transcendental("log1p", -10, 100, -0.5, 10),
    _transcendental("sin", -100, 100, -3, 3),
    _transcendental("cos", -100, 100, -3, 3),
    _transcendental("tan", -100, 100, -1.4, 1.4),
    _transcendental("asin", -1.5, 1.5, -3, 3),
    _transcendental("acos", -1.5, 1.5, -3, 3),
    _transcendental("atan", -100, 100, -0.8, 0.8),
    _transcendental("sinh", -10, 10, -5, 5),
    _transcendental("cosh", -10, 10, -5, 5),
    _transcendental("tanh", -20, 20, -1.4, 1.4),
    _transcendental("asinh", -100, 100, -0.8, 0.8),
    _transcendental("acosh", 0, 100, -3, 3),
    _transcendental("atanh", -1.5, 1.5, -0.8, 0.8),
    _transcendental("sqrt", -10, 100, -10, 10),
    _transcendental("rsqrt", -10, 100, -10, 10, nonzero=True),
    _transcendental("logistic", -50, 50, -3, 3),
)

ROUNDING = tuple(
    _elementwise(n, 1, lambda d: (Domain(extra=HALVES),)) for n in ("floor", "ceil", "round", "trunc")
)

SIMPLE_UNARY = tuple(
    _elementwise(n, 1) for n in ("neg", "abs", "sign", "conj", "real", "imag", "logical_not", "bitwise_not")
)

CLASSIFY = tuple(
    _elementwise(n, 1, lambda d: (Domain(complex_specials=True),)) for n in ("isnan", "isinf", "isfinite")
)

_SMALL = Domain(-3, 3, extra=(-1.0, 0.5, 1.0))
COMPARE = tuple(_elementwise(n, 2, lambda d: (_SMALL, _SMALL)) for n in ("eq", "ne", "lt", "le", "gt", "ge"))

ARITHMETIC = (
    _elementwise("add", 2), _elementwise("sub", 2), _elementwise("mul", 2, mult=lambda d: 2.0),
    _elementwise("div", 2, _by_kind(c=(DEFAULT, Domain(nonzero=True)), default=(DEFAULT, DEFAULT)),
                 mult=lambda d: 4.0 if d.kind == "c" else 1.0),
    _elementwise("rem", 2),
    _elementwise("pow", 2, _by_kind(
        i=(DEFAULT, Domain(-3, 130)), u=(DEFAULT, Domain(0, 130)),
        f=(Domain(-10, 10), Domain(-5, 5, extra=(0.5, 2.0, 3.0))),
        c=(Domain(-3, 3, nonzero=True), Domain(-2, 2)),
        default=(DEFAULT, DEFAULT)), mult=lambda d: 16.0 if d.kind == "c" else 4.0),
    _elementwise("maximum", 2), _elementwise("minimum", 2), _elementwise("atan2", 2, mult=lambda d: 2.0),
)

BITS = tuple(
    _elementwise(n, 2) for n in ("logical_and", "logical_or", "logical_xor",
                                 "bitwise_and", "bitwise_or", "bitwise_xor")
)
SHIFTS = tuple(
    _elementwise(n, 2, lambda d: (DEFAULT, Domain(extra=SHIFT_COUNTS))) for n in ("shift_left", "shift_right")
)


def _select_probe(dtype: DType, ctx: Ctx):
    return (av((2,), D.bool_), av((2,), dtype), av((2,), dtype)), {}


def _select_draw(draw, dtype: DType, ctx: Ctx) -> Case:
    shape = draw(shapes())
    pred = draw(arrays(D.bool_, shape))
    return Case((pred, draw(arrays(dtype, shape)), draw(arrays(dtype, shape))))


ELEMENTWISE_SPECS: dict[str, Spec] = spec_table(
    *TRANSCENDENTAL, *ROUNDING, *SIMPLE_UNARY, *CLASSIFY, *COMPARE, *ARITHMETIC, *BITS, *SHIFTS,
    Spec("select", _select_probe, _select_draw),
    _elementwise("clamp", 3),
)
