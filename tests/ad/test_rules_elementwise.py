"""AD rules of the elementwise primitives, called directly on concrete tensors.

JVPs are checked against a 5-point central finite difference of the eager primitive
along random tangents (float64 and complex128; the FD works for real-linear maps).
Transposes are checked by the identity ``Re <ct, A t> == Re <A^T ct, t>`` with the
bilinear pairing ``<a, b> = sum(a * b)`` (no conjugation, JAX's convention). For maps
that are complex-linear (neg, add, sub, mul, div, select) the full complex identity
``<ct, A t> == <A^T ct, t>`` holds too and is checked; the real-linear ones (conj,
real, imag) satisfy only its real part, which is what "transpose" means for them.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad.ad_util import UndefinedPrimal, Zero, is_zero
from tenferro_ad.jvp import linear_jvp
from tenferro_ad.rules import elementwise as R
from tenferro_core.avals import Aval
from tenferro_core.catalog import elementwise as catalog
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax

# ---- value strategies ---------------------------------------------------------


def fl(lo: float, hi: float):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def cbox(re: float, im: float | None = None, ok=None):
    """Complex values with |real| <= re and |imag| <= im, optionally filtered by `ok`."""
    im = re if im is None else im
    s = st.builds(complex, fl(-re, re), fl(-im, im))
    return s.filter(ok) if ok else s


def real_dist(z: complex, lo: float, hi: float) -> float:
    """Distance of z from the real segment [lo, hi]."""
    return abs(z - min(max(z.real, lo), hi))


def imag_dist(z: complex, lo: float, hi: float) -> float:
    """Distance of z from the imaginary segment [lo*1j, hi*1j]."""
    return abs(z - 1j * min(max(z.imag, lo), hi))


INF = math.inf
GAP = 0.1  # distance kept from branch cuts, poles and kinks


def off_neg_real(z):  # log, sqrt, rsqrt, pow: cut on (-inf, 0]
    return real_dist(z, -INF, 0) >= GAP


def off_real_outside_unit(z):  # asin, acos, atanh: cuts on (-inf, -1] and [1, inf)
    return real_dist(z, -INF, -1) >= GAP and real_dist(z, 1, INF) >= GAP


def off_imag_outside_unit(z):  # atan, asinh: cuts on the imaginary axis beyond +-1j
    return imag_dist(z, -INF, -1) >= GAP and imag_dist(z, 1, INF) >= GAP


def one(s):
    return s.map(lambda v: (v,))


# name: (real elements, complex elements or None); elements are tuples of operands
UNARY = {
    "neg": (fl(-10, 10), cbox(10)),
    "abs": (fl(-10, 10).filter(lambda v: abs(v) >= GAP), cbox(10, ok=lambda z: abs(z) >= GAP)),
    "sign": (fl(-10, 10).filter(lambda v: abs(v) >= GAP), cbox(10, ok=lambda z: abs(z) >= GAP)),
    "conj": (fl(-10, 10), cbox(10)),
    "real": (fl(-10, 10), cbox(10)),
    "imag": (fl(-10, 10), cbox(10)),
    "exp": (fl(-5, 5), cbox(3)),
    "expm1": (fl(-5, 5), cbox(3)),
    "log": (fl(0.1, 10), cbox(5, ok=off_neg_real)),
    "log1p": (fl(-0.9, 10), cbox(5, ok=lambda z: real_dist(z, -INF, -1) >= GAP)),
    "sin": (fl(-10, 10), cbox(3)),
    "cos": (fl(-10, 10), cbox(3)),
    "tan": (fl(-1.3, 1.3), cbox(1.3, 2)),
    "asin": (fl(-0.9, 0.9), cbox(3, ok=off_real_outside_unit)),
    "acos": (fl(-0.9, 0.9), cbox(3, ok=off_real_outside_unit)),
    "atan": (fl(-10, 10), cbox(3, ok=off_imag_outside_unit)),
    "sinh": (fl(-5, 5), cbox(3)),
    "cosh": (fl(-5, 5), cbox(3)),
    "tanh": (fl(-5, 5), cbox(2, 1.3)),
    "asinh": (fl(-10, 10), cbox(3, ok=off_imag_outside_unit)),
    "acosh": (fl(1.1, 10), cbox(3, ok=lambda z: real_dist(z, -INF, 1) >= GAP)),
    "atanh": (fl(-0.9, 0.9), cbox(3, ok=off_real_outside_unit)),
    "sqrt": (fl(0.1, 10), cbox(5, ok=off_neg_real)),
    "rsqrt": (fl(0.1, 10), cbox(5, ok=off_neg_real)),
    "logistic": (fl(-10, 10), cbox(5, 2.5)),
}


@st.composite
def rem_operands(draw):
    """(x, y) with x / y at least 0.05 from an integer: away from rem's jumps."""
    y = draw(fl(0.5, 5)) * draw(st.sampled_from([1, -1]))
    k, f = draw(st.integers(-5, 5)), draw(fl(0.05, 0.95))
    return y * (k + f), y


@st.composite
def atan2_operands(draw):
    """(y, x) away from the origin and from the jump on the negative x axis."""
    r, th = draw(fl(0.1, 10)), draw(fl(-3.0, 3.0))
    return r * math.sin(th), r * math.cos(th)


def apart(*strategies, gap=0.01):
    """Tuples whose entries differ pairwise by at least `gap` (no ties)."""
    return st.tuples(*strategies).filter(
        lambda v: all(abs(a - b) >= gap for a, b in itertools.combinations(v, 2)))


NONZERO = fl(-10, 10).filter(lambda v: abs(v) >= 0.5)
CNONZERO = cbox(10, ok=lambda z: abs(z) >= 0.5)

# name: (real elements, complex elements or None)
NARY = {
    "add": (st.tuples(fl(-10, 10), fl(-10, 10)), st.tuples(cbox(10), cbox(10))),
    "sub": (st.tuples(fl(-10, 10), fl(-10, 10)), st.tuples(cbox(10), cbox(10))),
    "mul": (st.tuples(fl(-10, 10), fl(-10, 10)), st.tuples(cbox(10), cbox(10))),
    "div": (st.tuples(fl(-10, 10), NONZERO), st.tuples(cbox(10), CNONZERO)),
    "rem": (rem_operands(), None),
    "pow": (st.tuples(fl(0.1, 5), fl(-3, 3)),
            st.tuples(cbox(3, ok=lambda z: off_neg_real(z) and abs(z) >= 0.2), cbox(2))),
    "maximum": (apart(fl(-10, 10), fl(-10, 10)), None),
    "minimum": (apart(fl(-10, 10), fl(-10, 10)), None),
    "atan2": (atan2_operands(), None),
    "select": (st.tuples(st.booleans(), fl(-10, 10), fl(-10, 10)),
               st.tuples(st.booleans(), cbox(10), cbox(10))),
    "clamp": (apart(fl(-10, 10), fl(-10, 10), fl(-10, 10)), None),
}
SPECS = {**{k: (one(r), None if c is None else one(c)) for k, (r, c) in UNARY.items()}, **NARY}
CASES = [(name, kind) for name, (r, c) in SPECS.items() for kind, s in (("f", r), ("c", c))
         if s is not None]


def diff_operands(name: str) -> tuple[int, ...]:
    """Operand positions that carry tangents (select's predicate is bool)."""
    n = 3 if name in ("select", "clamp") else 2 if name in NARY else 1
    return tuple(range(1, n)) if name == "select" else tuple(range(n))


# ---- tensors ------------------------------------------------------------------

SHAPES = st.lists(st.sampled_from([1, 2, 3, 0]), max_size=3).map(tuple)


def tangent_elements(kind: str):
    return fl(-1, 1) if kind == "f" else st.builds(complex, fl(-1, 1), fl(-1, 1))


def T(a) -> object:
    return xp.asarray(np.asarray(a))


def N(t) -> np.ndarray:
    """Host array of a tensor; zeros for a Zero."""
    if is_zero(t):
        return np.zeros(t.aval.shape, t.aval.dtype.numpy)
    return t.numpy()


@dataclass
class Case:
    name: str
    primals: list  # host arrays
    tangents: dict  # operand position -> host array


@st.composite
def cases(draw, name: str, kind: str):
    real, cplx = SPECS[name]
    shape = draw(SHAPES)
    n = math.prod(shape)
    rows = draw(st.lists(real if kind == "f" else cplx, min_size=n, max_size=n))
    nin = 3 if name in ("select", "clamp") else 2 if name in NARY else 1
    cols = list(zip(*rows)) if rows else [()] * nin
    dtype = np.float64 if kind == "f" else np.complex128
    primals = [np.array(c, dtype=bool if (name == "select" and i == 0) else dtype).reshape(shape)
               for i, c in enumerate(cols)]
    tangents = {i: np.array(draw(st.lists(tangent_elements(kind), min_size=n, max_size=n)),
                            dtype=dtype).reshape(shape)
                for i in diff_operands(name)}
    return Case(name, primals, tangents)


def eager(name: str, *arrays) -> np.ndarray:
    return getattr(lax, name)(*map(T, arrays)).numpy()


def finite_difference(case: Case, h: float = 1e-4) -> np.ndarray:
    """5-point central difference of the primitive along the case's tangents."""
    def at(s):
        args = [p + s * case.tangents[i] if i in case.tangents else p
                for i, p in enumerate(case.primals)]
        return eager(case.name, *args)

    return (at(-2 * h) - 8 * at(-h) + 8 * at(h) - at(2 * h)) / (12 * h)


def jvp_rule(name: str):
    """The registered rule, or the generic one of a primitive declared linear."""
    return R.JVP.get(name) or functools.partial(linear_jvp, getattr(catalog, name))


def run_jvp(name: str, primals, tangents):
    """The rule on tensors; tangents given as host arrays or Zero (None: a bool Zero)."""
    ps = [T(p) for p in primals]
    ts = [t if isinstance(t, Zero) else Zero(ps[i].aval) if t is None else T(t)
          for i, t in enumerate(tangents)]
    return jvp_rule(name)(tuple(ps), tuple(ts))


def full_tangents(case: Case) -> list:
    return [case.tangents.get(i) for i in range(len(case.primals))]


# ---- tables -------------------------------------------------------------------


def test_tables_cover_the_catalog():
    diff = {p.name for p in catalog.PRIMITIVES if p.differentiable}
    linear = {p.name for p in catalog.PRIMITIVES if p.linear}
    assert set(R.JVP) | linear == diff
    assert set(R.JVP) & linear == {"add", "sub", "div"}  # Zero shortcuts; div: its denominator
    assert set(R.TRANSPOSE) == linear | {"mul"}  # mul is bilinear, not jointly linear
    assert set(SPECS) == diff  # every rule is tested below


# ---- JVP vs finite differences ------------------------------------------------


@pytest.mark.parametrize("name,kind", CASES, ids=[f"{n}-{k}" for n, k in CASES])
@settings(max_examples=50)
@given(data=st.data())
def test_jvp_matches_finite_differences(name, kind, data):
    case = data.draw(cases(name, kind))
    out, tout = run_jvp(name, case.primals, full_tangents(case))
    expected = eager(name, *case.primals)
    np.testing.assert_array_equal(out.numpy(), expected)
    tout = N(tout)
    assert tout.shape == expected.shape and tout.dtype == expected.dtype
    np.testing.assert_allclose(tout, finite_difference(case), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name,kind", CASES, ids=[f"{n}-{k}" for n, k in CASES])
@settings(max_examples=3)
@given(data=st.data())
def test_jvp_rules_trace(name, kind, data):
    """Rules only bind lax primitives on their operands: traced, they compute the same."""
    from tenferro_runtime.graph import eval_graph, trace

    case = data.draw(cases(name, kind))
    ops = diff_operands(name)
    ps = [T(p) for p in case.primals]
    ts = [T(case.tangents[i]) for i in ops]

    def rule(*args):
        primals, given = args[:len(ps)], dict(zip(ops, args[len(ps):]))
        tangents = [given.get(i, Zero(p.aval)) for i, p in enumerate(primals)]
        return [o for o in jvp_rule(name)(tuple(primals), tuple(tangents)) if not is_zero(o)]

    graph = trace(rule, *ps, *ts)
    assert graph.nodes
    for got, want in zip(eval_graph(graph, *ps, *ts), rule(*ps, *ts), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


# ---- symbolic zeros -----------------------------------------------------------


@pytest.mark.parametrize("name,kind", CASES, ids=[f"{n}-{k}" for n, k in CASES])
@settings(max_examples=10)
@given(data=st.data())
def test_jvp_with_zero_tangents(name, kind, data):
    """Some tangents Zero: same result as materialized zeros (a Zero out counts as 0)."""
    case = data.draw(cases(name, kind))
    ops = diff_operands(name)
    subsets = [s for r in range(1, len(ops) + 1) for s in itertools.combinations(ops, r)]
    for zeros in subsets:
        sym = [None if i not in case.tangents else Zero(T(case.tangents[i]).aval)
               if i in zeros else case.tangents[i] for i in range(len(case.primals))]
        dense = [None if i not in case.tangents else 0 * case.tangents[i] if i in zeros
                 else case.tangents[i] for i in range(len(case.primals))]
        out, tout = run_jvp(name, case.primals, sym)
        _, tdense = run_jvp(name, case.primals, dense)
        np.testing.assert_array_equal(out.numpy(), eager(name, *case.primals))
        if len(zeros) == len(ops):  # all Zero: the rule may stay symbolic
            assert is_zero(tout) or not np.any(N(tout))
        if is_zero(tout):
            assert tout.aval.shape == out.shape and tout.aval.dtype is out.dtype
        np.testing.assert_array_equal(N(tout), N(tdense))


def test_zero_tangents_stay_symbolic():
    x, y = T(np.array([1.0, 2.0])), T(np.array([3.0, -4.0]))
    t = T(np.array([0.5, 0.25]))
    z = Zero(x.aval)
    assert R.JVP["add"]((x, y), (z, t))[1] is t
    assert R.JVP["add"]((x, y), (t, z))[1] is t
    assert R.JVP["sub"]((x, y), (t, z))[1] is t
    np.testing.assert_array_equal(R.JVP["sub"]((x, y), (z, t))[1].numpy(), [-0.5, -0.25])
    np.testing.assert_array_equal(R.JVP["mul"]((x, y), (z, t))[1].numpy(), [0.5, 0.5])
    pred = T(np.array([True, False]))
    assert is_zero(jvp_rule("select")((pred, x, y), (Zero(pred.aval), z, z))[1])
    for name in UNARY:
        out, tout = jvp_rule(name)((x,), (z,))
        assert is_zero(tout) and tout.aval == out.aval
    assert not np.any(N(jvp_rule("imag")((x,), (t,))[1]))  # imag of a real operand is constant


# ---- special points -----------------------------------------------------------


def test_abs_at_zero():
    _, t = run_jvp("abs", [np.array([0.0, -2.0, 3.0])], [np.ones(3)])
    np.testing.assert_array_equal(t.numpy(), [0.0, -1.0, 1.0])
    z = np.array([0j, -2j, 3 + 4j])  # real(conj(z) t) / |z|, 0 at 0
    _, t = run_jvp("abs", [z], [np.array([1 + 1j, 1 + 1j, 1 + 2j])])
    np.testing.assert_allclose(t.numpy(), [0.0, -1.0, 0.6 + 1.6], rtol=1e-15)


def test_sign_tangent_zero_for_real_and_at_zero():
    _, t = run_jvp("sign", [np.array([0.0, -2.0, 3.0])], [np.ones(3)])
    assert is_zero(t) or not np.any(t.numpy())
    z = np.array([0j, 3 + 4j])  # d(z/|z|) = (t - s Re(conj(s) t)) / |z|
    _, t = run_jvp("sign", [z], [np.array([1 + 1j, 1j])])
    s = (3 + 4j) / 5
    np.testing.assert_allclose(t.numpy(), [0, (1j - s * (np.conj(s) * 1j).real) / 5], rtol=1e-14)


def test_complex_abs_and_sign_second_order():
    """abs's complex tangent once went through sign, whose derivative was taken as 0."""
    from tenferro_ad.testing import check_grads
    from tenferro_runtime import array_api as xp

    z = xp.asarray(np.array([3 + 4j, 1 - 2j, -0.5 + 0.1j]))
    check_grads(lambda x: (xp.abs(x), xp.sign(x) * x), (z,), order=2)


def test_sqrt_at_zero_is_inf():
    _, t = run_jvp("sqrt", [np.array([0.0, 4.0])], [np.array([1.0, 1.0])])
    np.testing.assert_array_equal(t.numpy(), [np.inf, 0.25])


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_minmax_ties_split_evenly(name):
    x = np.array([1.0, 2.0, np.nan])
    y = np.array([1.0, 0.0, 0.0])
    tx, ty = np.array([1.0, 1.0, 1.0]), np.array([3.0, 5.0, 7.0])
    _, t = run_jvp(name, [x, y], [tx, ty])
    np.testing.assert_array_equal(t.numpy(), [2.0, 1.0 if name == "maximum" else 5.0, 0.0])


def test_clamp_ties_and_crossed_bounds():
    lo = np.array([0.0, 0.0, 0.0, 2.0, 2.0, 1.0])
    x = np.array([0.0, 1.0, -1.0, 0.0, 3.0, 1.0])
    hi = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    # x == lo, x == hi: 0; x < lo < hi: lo's; lo > hi: hi's (the result is hi); all equal: 0
    _, t = run_jvp("clamp", [lo, x, hi], [np.full(6, 1.0), np.full(6, 10.0), np.full(6, 100.0)])
    np.testing.assert_array_equal(t.numpy(), [0.0, 0.0, 1.0, 100.0, 100.0, 0.0])
    _, t = run_jvp("clamp", [lo, np.array([0.5] * 6), np.full(6, 3.0)],
                   [Zero(Aval((6,), T(lo).dtype)), np.full(6, 10.0), Zero(Aval((6,), T(lo).dtype))])
    np.testing.assert_array_equal(t.numpy(), [10.0, 10.0, 10.0, 0.0, 0.0, 0.0])


def test_pow_at_zero_base():
    x = np.array([0.0, 0.0, 0.0, 2.0])
    y = np.array([2.0, 0.0, 3.0, 0.0])
    _, t = run_jvp("pow", [x, y], [np.ones(4), np.zeros(4)])
    np.testing.assert_array_equal(t.numpy(), [0.0, 0.0, 0.0, 0.0])  # d/dx: y x^(y-1); 0 at y=0
    _, t = run_jvp("pow", [x, y], [Zero(T(x).aval), np.ones(4)])
    np.testing.assert_array_equal(t.numpy(), [0.0, 0.0, 0.0, math.log(2.0)])  # d/dy: 0 at x=0
    _, t = run_jvp("pow", [x.astype(complex), y.astype(complex)],
                   [np.ones(4, complex), np.ones(4, complex)])
    np.testing.assert_allclose(t.numpy(), [0, 0, 0, math.log(2.0)], rtol=1e-15)


def test_rem_tangent_of_divisor():
    _, t = run_jvp("rem", [np.array([7.5, -7.5]), np.array([2.0, 2.0])],
                   [np.array([1.0, 1.0]), np.array([1.0, 1.0])])
    np.testing.assert_array_equal(t.numpy(), [1.0 - 3.0, 1.0 + 3.0])


# ---- transposes ---------------------------------------------------------------

COMPLEX_LINEAR = {"neg", "add", "sub", "mul", "div", "select"}
# (primitive, operands undefined together)
TRANSPOSES = [
    ("neg", (0,)), ("conj", (0,)), ("real", (0,)), ("imag", (0,)),
    ("add", (0,)), ("add", (1,)), ("add", (0, 1)),
    ("sub", (0,)), ("sub", (1,)), ("sub", (0, 1)),
    ("mul", (0,)), ("mul", (1,)), ("div", (0,)),
    ("select", (1,)), ("select", (2,)), ("select", (1, 2)),
]
# operands each primitive is jointly linear in (mul and div: one at a time)
JOINT = {"add": (0, 1), "sub": (0, 1), "select": (1, 2)}
JOINT.update(dict.fromkeys(["neg", "conj", "real", "imag", "mul", "div"], ()))
T_CASES = [(n, u, k) for n, u in TRANSPOSES for k in "fc"]


def pairing(a, b) -> complex:
    """Bilinear (unconjugated) pairing ``sum(a * b)``; None counts as 0."""
    return 0j if a is None or b is None else complex(np.sum(a * b))


@pytest.mark.parametrize("name,undef,kind", T_CASES,
                         ids=[f"{n}-{'_'.join(map(str, u))}-{k}" for n, u, k in T_CASES])
@settings(max_examples=40)
@given(data=st.data())
def test_transpose_identity(name, undef, kind, data):
    """Re <ct, A t> == Re <A^T ct, t> (complex-linear maps: the full complex identity)."""
    case = data.draw(cases(name, kind))
    ts = {i: case.tangents[i] for i in undef}  # the linear map's inputs
    # A t: the primitive with t in the undefined operands; other operands it is linear in
    # (add's, sub's, select's branches) are constants of an affine map, so 0 in A
    args = [ts[i] if i in undef else np.zeros_like(p) if i in JOINT[name] else p
            for i, p in enumerate(case.primals)]
    at = eager(name, *args)
    ct = np.array(data.draw(st.lists(tangent_elements(at.dtype.kind), min_size=at.size,
                                     max_size=at.size)), dtype=at.dtype).reshape(at.shape)
    operands = [UndefinedPrimal(T(p).aval) if i in undef else T(p)
                for i, p in enumerate(case.primals)]
    cts = R.TRANSPOSE[name](T(ct), *operands)
    assert len(cts) == len(operands)
    for i, c in enumerate(cts):
        if i not in undef:
            assert c is None
        else:
            assert N(c).shape == case.primals[i].shape
            assert N(c).dtype == case.primals[i].dtype
    lhs = pairing(ct, at)
    rhs = sum(pairing(N(cts[i]), ts[i]) for i in undef)
    scale = 1 + np.sum(np.abs(ct)) * max(1, np.max(np.abs(at), initial=0))
    assert abs(lhs.real - rhs.real) <= 1e-12 * scale
    if name in COMPLEX_LINEAR:
        assert abs(lhs - rhs) <= 1e-12 * scale
    # a Zero cotangent gives Zero cotangents of the right avals
    zcts = R.TRANSPOSE[name](Zero(T(ct).aval), *operands)
    for i, c in enumerate(zcts):
        if i in undef:
            assert is_zero(c) and c.aval == operands[i].aval
        else:
            assert c is None


@pytest.mark.parametrize("name,undef,kind", T_CASES,
                         ids=[f"{n}-{'_'.join(map(str, u))}-{k}" for n, u, k in T_CASES])
@settings(max_examples=3)
@given(data=st.data())
def test_transpose_rules_trace(name, undef, kind, data):
    """Transpose rules trace too, with the cotangent and the known operands abstract."""
    from tenferro_runtime.graph import eval_graph, trace

    case = data.draw(cases(name, kind))
    known = [i for i in range(len(case.primals)) if i not in undef]
    ps = [T(p) for p in case.primals]
    ct = T(eager(name, *case.primals))

    def rule(ct, *args):
        operands = [UndefinedPrimal(p.aval) for p in ps]
        for i, a in zip(known, args, strict=True):
            operands[i] = a
        return [c for c in R.TRANSPOSE[name](ct, *operands) if c is not None and not is_zero(c)]

    args = [ps[i] for i in known]
    graph = trace(rule, ct, *args)
    for got, want in zip(eval_graph(graph, ct, *args), rule(ct, *args), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_real_and_imag_transposes_build_complex():
    z = UndefinedPrimal(Aval((2,), T(np.zeros(2, complex)).dtype))
    ct = T(np.array([1.5, -2.0]))
    (c,) = R.TRANSPOSE["real"](ct, z)
    np.testing.assert_array_equal(c.numpy(), [1.5 + 0j, -2.0 + 0j])
    (c,) = R.TRANSPOSE["imag"](ct, z)
    np.testing.assert_array_equal(c.numpy(), [-1.5j, 2.0j])
    r = UndefinedPrimal(ct.aval)  # on a real operand: real is the identity, imag is 0
    assert R.TRANSPOSE["real"](ct, r)[0] is ct
    assert is_zero(R.TRANSPOSE["imag"](ct, r)[0])
