"""Second-order derivatives through the machinery (float64), against finite differences.

For a scalar function F of a flat vector z, the reference Hessian is the central finite
difference of the machinery's own first derivative, ``(grad F(z + h e_i) - grad F(z - h
e_i)) / 2h`` (the first derivative itself is checked against a finite difference of F).
Every way of taking a second derivative must agree with it:

- forward-over-reverse ``hessian`` (= ``jacfwd(jacrev)``), reverse-over-forward
  ``jacrev(jacfwd)``, reverse-over-reverse ``jacrev(grad)``, forward-over-forward
  ``jacfwd(jacfwd)``;
- Hessian-vector products by ``grad(v . grad F)``, ``jvp(grad F)``, ``linearize(grad F)``
  and a tape nested in a tape; ``v . H v`` by a jvp of a jvp.

The elementwise primitives are bound directly (``lax``), on inputs drawn by hypothesis
from each function's domain, kept away from poles, branch points and kinks. The
structural cases use inputs without ties where ties are non-differentiable.

Some functions reshape and slice with `lax.reshape` / `lax.slice`, others through the
namespace; the tape and the traced transforms handle both spellings.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_ad.testing import tape_second_derivative
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax

H = 1e-5  # finite-difference step (central differences: error ~ H**2 * f''')
# an example runs ten second-order transforms and a finite-difference Hessian (60-300 ms on
# CI's cores): a third of the profile's examples (ci: 10)
EXAMPLES = max(5, settings().max_examples // 3)


def fl(lo: float, hi: float):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def away_from_zero(lo: float, hi: float, gap: float = 0.1):
    """Floats in [-hi, -lo] u [lo, hi] style: |v| in [gap, hi] with either sign."""
    return st.tuples(fl(max(lo, gap), hi), st.booleans()).map(lambda p: -p[0] if p[1] else p[0])


DIR = away_from_zero(0.5, 1.0, gap=0.5)  # direction entries: never 0, so no HVP check is vacuous


def vec(elem, n_max: int = 3):
    return st.lists(elem, min_size=1, max_size=n_max).map(lambda v: np.array(v, dtype=np.float64))


def _t(a) -> xp.Tensor:
    return xp.asarray(np.asarray(a, dtype=np.float64))


def _np(x) -> np.ndarray:
    return np.asarray(x.numpy(), dtype=np.float64)


def _rs(z, shape):
    return lax.reshape(z, new_sizes=tuple(shape))


def _sl(z, start: int, stop: int):
    return lax.slice(z, start_indices=(start,), limit_indices=(stop,))


def _tol(ref: np.ndarray) -> dict:
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    return {"rtol": 1e-6, "atol": 1e-6 * scale}


def fd_grad(F: Callable, z: np.ndarray) -> np.ndarray:
    g = np.zeros_like(z)
    for i in range(z.size):
        e = np.zeros_like(z)
        e[i] = H
        g[i] = (float(F(_t(z + e))) - float(F(_t(z - e)))) / (2 * H)
    return g


def fd_hessian(F: Callable, z: np.ndarray) -> np.ndarray:
    """Columns: central differences of the machinery's gradient."""
    gF = ad.grad(F)
    cols = []
    for i in range(z.size):
        e = np.zeros_like(z)
        e[i] = H
        cols.append((_np(gF(_t(z + e))) - _np(gF(_t(z - e)))) / (2 * H))
    return np.stack(cols, axis=1)


def check_second_order(F: Callable, z: np.ndarray, v: np.ndarray, *, full: bool = True,
                       fd_first: bool = True) -> None:
    """All second-order transforms of scalar F at z (1-d) agree with FD of its gradient."""
    zt, vt = _t(z), _t(v)
    gF = ad.grad(F)
    g = _np(gF(zt))
    if fd_first:
        ref_g = fd_grad(F, z)
        np.testing.assert_allclose(g, ref_g, err_msg="grad vs FD of F", **_tol(ref_g))
    Hfd = fd_hessian(F, z)
    Hv = Hfd @ v
    tol = _tol(Hfd)

    # Hessian-vector products
    np.testing.assert_allclose(_np(ad.grad(lambda y: xp.sum(gF(y) * vt))(zt)), Hv,
                               err_msg="grad(v . grad F)", **tol)
    np.testing.assert_allclose(_np(ad.jvp(gF, (zt,), (vt,))[1]), Hv, err_msg="jvp(grad F)", **tol)
    np.testing.assert_allclose(_np(ad.linearize(gF, zt)[1](vt)), Hv, err_msg="linearize(grad F)",
                               **tol)
    vhv = ad.jvp(lambda y: ad.jvp(F, (y,), (vt,))[1], (zt,), (vt,))[1]
    assert float(vhv) == pytest.approx(float(v @ Hv), rel=1e-6, abs=tol["atol"]), "jvp of jvp"
    with ad.GradientTape() as outer:
        outer.watch(zt)
        with ad.GradientTape() as inner:
            inner.watch(zt)
            y = F(zt)
        gz = inner.gradient(y, zt)
        s = xp.sum(gz * vt)
    np.testing.assert_allclose(_np(gz), g, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(g).max()),
                               err_msg="tape gradient vs grad")
    np.testing.assert_allclose(_np(outer.gradient(s, zt)), Hv, err_msg="tape in tape", **tol)
    if not full:
        return
    # Full Hessians, four compositions
    for name, hess in (("hessian", ad.hessian(F)), ("jacrev(jacfwd)", ad.jacrev(ad.jacfwd(F))),
                       ("jacrev(grad)", ad.jacrev(gF)), ("jacfwd(jacfwd)", ad.jacfwd(ad.jacfwd(F)))):
        h = _np(hess(zt))
        assert h.shape == (z.size, z.size), name
        np.testing.assert_allclose(h, Hfd, err_msg=name, **tol)


# ---- elementwise unary ---------------------------------------------------------------

GAP = 0.1
UNARY = {
    "exp": fl(-5, 5),
    "expm1": fl(-5, 5),
    "log": fl(GAP, 10),
    "log1p": fl(-1 + GAP, 10),
    "sin": fl(-10, 10),
    "cos": fl(-10, 10),
    "tan": fl(-1.4, 1.4),
    "asin": fl(-0.9, 0.9),
    "acos": fl(-0.9, 0.9),
    "atan": fl(-10, 10),
    "sinh": fl(-5, 5),
    "cosh": fl(-5, 5),
    "tanh": fl(-5, 5),
    "asinh": fl(-10, 10),
    "acosh": fl(1 + GAP, 10),
    "atanh": fl(-0.9, 0.9),
    "sqrt": fl(GAP, 10),
    "rsqrt": fl(GAP, 10),
    "logistic": fl(-10, 10),
    "abs": away_from_zero(GAP, 10),
    "neg": fl(-10, 10),
}

# analytic second derivatives: a second, independent reference
D2 = {
    "exp": np.exp,
    "expm1": np.exp,
    "log": lambda x: -1 / x**2,
    "log1p": lambda x: -1 / (1 + x) ** 2,
    "sin": lambda x: -np.sin(x),
    "cos": lambda x: -np.cos(x),
    "tan": lambda x: 2 * np.tan(x) / np.cos(x) ** 2,
    "asin": lambda x: x / (1 - x * x) ** 1.5,
    "acos": lambda x: -x / (1 - x * x) ** 1.5,
    "atan": lambda x: -2 * x / (1 + x * x) ** 2,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": lambda x: -2 * np.tanh(x) / np.cosh(x) ** 2,
    "asinh": lambda x: -x / (x * x + 1) ** 1.5,
    "acosh": lambda x: -x / (x * x - 1) ** 1.5,
    "atanh": lambda x: 2 * x / (1 - x * x) ** 2,
    "sqrt": lambda x: -0.25 * x**-1.5,
    "rsqrt": lambda x: 0.75 * x**-2.5,
    "logistic": lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s) * (1 - 2 * s),
    "abs": np.zeros_like,
    "neg": np.zeros_like,
}


@pytest.mark.parametrize("name", list(UNARY))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_unary_second_order(name, data):
    z = data.draw(vec(UNARY[name]), label="z")
    v = np.array(data.draw(st.lists(DIR, min_size=z.size, max_size=z.size), label="v"))
    f = getattr(lax, name)

    def F(y):
        return xp.sum(f(y))

    d2 = _np(ad.grad(lambda y: xp.sum(ad.grad(F)(y)))(_t(z)))
    np.testing.assert_allclose(d2, D2[name](z), rtol=1e-9, atol=1e-12, err_msg="grad(grad) vs analytic")
    check_second_order(F, z, v, full=z.size <= 2)


# ---- elementwise binary: (x, y) packed into one vector --------------------------------


def _pairs(elem_x, elem_y, ok=None):
    s = st.lists(st.tuples(elem_x, elem_y), min_size=1, max_size=2)
    if ok is not None:
        s = s.filter(lambda ps: all(ok(a, b) for a, b in ps))
    return s.map(lambda ps: np.array([a for a, _ in ps] + [b for _, b in ps], dtype=np.float64))


BINARY = {
    "mul": (lax.mul, _pairs(fl(-10, 10), fl(-10, 10))),
    "div": (lax.div, _pairs(fl(-10, 10), away_from_zero(0.3, 10))),
    # y == 0 exactly: see test_pow_mixed_second_derivative_at_zero_exponent
    "pow": (lax.pow, _pairs(fl(GAP, 5), fl(-3, 3).filter(lambda y: y != 0))),
    # atan2(y, x): away from the origin and from the branch cut on the negative x axis
    "atan2": (lax.atan2, _pairs(fl(-5, 5), fl(-5, 5), ok=lambda y, x: math.hypot(x, y) >= 0.3
                                and not (x < 0 and abs(y) < GAP))),
    "add": (lax.add, _pairs(fl(-10, 10), fl(-10, 10))),
    "sub": (lax.sub, _pairs(fl(-10, 10), fl(-10, 10))),
    "maximum": (lax.maximum, _pairs(fl(-10, 10), fl(-10, 10), ok=lambda a, b: abs(a - b) >= GAP)),
    "minimum": (lax.minimum, _pairs(fl(-10, 10), fl(-10, 10), ok=lambda a, b: abs(a - b) >= GAP)),
}


@pytest.mark.parametrize("name", list(BINARY))
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_binary_second_order(name, data):
    op, strat = BINARY[name]
    z = data.draw(strat, label="z (x then y)")
    n = z.size // 2
    v = np.array(data.draw(st.lists(DIR, min_size=z.size, max_size=z.size), label="v"))

    def F(w):
        a, b = _sl(w, 0, n), _sl(w, n, 2 * n)
        # cubed so that the linear/bilinear ones have a nonzero Hessian with cross terms
        r = op(a, b)
        return xp.sum(r * r * r) if name in ("add", "sub", "maximum", "minimum") else xp.sum(r)

    check_second_order(F, z, v)


# ---- structural primitives and reductions ---------------------------------------------


@st.composite
def distinct(draw, n: int, gap: float = 0.05):
    """n values in shuffled order with pairwise distance >= gap (no ties under FD steps)."""
    steps = draw(st.lists(fl(gap, 1.0), min_size=n, max_size=n))
    base = draw(fl(-2, 2))
    vals = base + np.cumsum(steps)
    perm = draw(st.permutations(range(n)))
    return vals[list(perm)]


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable  # fn(z, w) with z the flat input, w fixed weights of the same size
    inputs: Callable  # draw -> z
    full: bool = True


def _w(n: int) -> xp.Tensor:
    return _t(np.linspace(-1.0, 1.5, n))


def prod_fn(z):
    return xp.prod(z) + xp.sum(xp.prod(_rs(z, (2, 3)), axis=1) * _t([0.7, -1.3]))


def dot_fn(z):
    a = _rs(_sl(z, 0, 8), (2, 2, 2))  # batched: dot_general with batch and contracting dims
    b = _rs(_sl(z, 8, 12), (2, 2, 1))
    return xp.sum(xp.tanh(a @ b) * _t([[[0.5], [-1.0]], [[2.0], [1.0]]]))


def max_fn(z):
    m = _rs(z, (2, 3))
    return xp.sum(xp.exp(xp.max(m, axis=1)) * _t([1.0, -2.0])) + xp.sin(xp.min(z))


def cumsum_fn(z):
    m = _rs(z, (2, 3))
    fwd = xp.sum(xp.sin(xp.cumulative_sum(m, axis=1)) * _rs(_w(6), (2, 3)))
    rev = xp.sum(xp.cos(lax.cumsum(m, axis=0, reverse=True)) * _rs(_w(6), (2, 3)))
    return fwd + rev


def sort_fn(z):
    m = _rs(z, (2, 3))
    up = xp.sort(m, axis=1)
    down = lax.sort(z, dimension=0, descending=True)
    return xp.sum(up * up * up * _rs(_w(6), (2, 3))) + xp.sum(xp.sin(down) * _w(6)[::-1])


GATHER_IDX = np.array([4, 0, 4, 2, 5, 5, 1])


def gather_fn(z):
    g = xp.take(z, xp.asarray(GATHER_IDX), axis=0)
    m = _rs(z, (2, 3))
    ga = xp.take_along_axis(m, xp.asarray([[2, 2, 0], [1, 0, 1]]), axis=1)
    return xp.sum(g * g * g * _w(7)) + xp.sum(xp.exp(ga) * _rs(_w(6), (2, 3)))


def softmax_fn(z):  # a composite: max-shifted softmax, entropy
    m = _rs(z, (2, 3))
    e = xp.exp(m - xp.max(m, axis=1, keepdims=True))
    p = e / xp.sum(e, axis=1, keepdims=True)
    return -xp.sum(p * xp.log(p))


def layout_fn(z):  # pad (interior too), concatenate, reverse, transpose, broadcast_in_dim
    m = _rs(z, (2, 3))
    zero = xp.asarray(0.0)
    padded = lax.pad(m, zero, padding_config=((1, 0, 0), (0, 2, 1)))  # (3, 7)
    rev = lax.reverse(m, dimensions=(0, 1))
    tr = lax.transpose(m, permutation=(1, 0))  # (3, 2)
    cat = lax.concatenate(_rs(padded, (21,)), _rs(rev, (6,)), _rs(tr, (6,)), dimension=0)
    bc = lax.broadcast_in_dim(_rs(m * m, (2, 3)), shape=(2, 2, 3), broadcast_dimensions=(0, 2))
    return xp.sum(xp.sin(cat) * _w(33)) + xp.sum(xp.exp(bc) * _rs(_w(12), (2, 2, 3)))


SCATTER_IDX = np.array([[0], [2], [0], [1]])


def scatter_fn(z):
    upd = _rs(_sl(z, 0, 4), (4,))
    base = _sl(z, 4, 7)
    out = lax.scatter_add(base * base, xp.asarray(SCATTER_IDX), upd * upd * upd, axes=(0,))
    start = xp.asarray(1)
    win = lax.dynamic_slice(_rs(z, (7,)), start, slice_sizes=(3,))
    upd_out = lax.dynamic_update_slice(xp.sin(base), win * win, xp.asarray(0))
    return xp.sum(xp.tanh(out) * _t([1.0, -0.5, 2.0])) + xp.sum(upd_out * _t([0.3, 1.0, -1.0]))


def conv_fn(z):
    lhs = _rs(_sl(z, 0, 18), (1, 2, 3, 3))
    rhs = _rs(_sl(z, 18, 26), (2, 1, 2, 2))
    y = lax.conv_general(lhs, rhs, window_strides=(1, 1), padding=((1, 0), (0, 1)),
                         feature_group_count=2)  # (1, 2, 3, 3)
    return xp.sum(xp.tanh(y) * _rs(_w(18), (1, 2, 3, 3)))


def piecewise_fn(z):  # clamp and select, away from their kinks
    c = xp.clip(z, min=-1.0, max=1.0)
    s = xp.where(z > 0, xp.sin(z), z * z * z)
    return xp.sum(c * c * c * _w(6)) + xp.sum(s * _w(6)[::-1])


def _flat(n, lo=-2.0, hi=2.0):
    return lambda draw: np.array(draw(st.lists(fl(lo, hi), min_size=n, max_size=n)))


STRUCTURAL = [
    Case("reduce_prod", prod_fn, _flat(6)),
    Case("dot_general", dot_fn, _flat(12), full=False),
    Case("reduce_max_min", max_fn, lambda draw: draw(distinct(6))),
    Case("cumsum", cumsum_fn, _flat(6)),
    Case("sort", sort_fn, lambda draw: draw(distinct(6))),
    Case("gather", gather_fn, _flat(6)),
    Case("softmax_entropy", softmax_fn, lambda draw: draw(distinct(6))),
    Case("pad_concat_reverse_transpose_broadcast", layout_fn, _flat(6)),
    Case("scatter_add_dynamic_slices", scatter_fn, _flat(7)),
    Case("conv_general", conv_fn, _flat(26, -1.0, 1.0), full=False),
    Case("clamp_select", piecewise_fn, lambda draw: np.array(draw(st.lists(
        fl(-2, 2).filter(lambda v: min(abs(v), abs(abs(v) - 1)) >= GAP), min_size=6, max_size=6)))),
]


@pytest.mark.parametrize("case", STRUCTURAL, ids=[c.name for c in STRUCTURAL])
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_structural_second_order(case, data):
    z = case.inputs(data.draw)
    v = np.array(data.draw(st.lists(DIR, min_size=z.size, max_size=z.size), label="v"))
    check_second_order(case.fn, z, v, full=case.full)


def test_dot_general_full_hessian():
    """The full Hessian of a bilinear-through-tanh form, once (12 x 12 is slow to repeat)."""
    z = np.random.default_rng(3).standard_normal(12)
    Hfd = fd_hessian(dot_fn, z)
    np.testing.assert_allclose(_np(ad.hessian(dot_fn)(_t(z))), Hfd, **_tol(Hfd))


def test_reduce_prod_hessian_with_zeros_is_exact():
    """d2 prod / dx_i dx_j = prod of the others: exact (no division) with zero entries."""
    x = np.array([0.0, 2.0, 0.0, 3.0])
    h = _np(ad.hessian(lambda y: xp.prod(y))(_t(x)))
    expected = np.zeros((4, 4))
    expected[0, 2] = expected[2, 0] = 6.0
    np.testing.assert_array_equal(h, expected)
    x1 = np.array([0.0, 2.0, 5.0])
    h1 = _np(ad.hessian(lambda y: xp.prod(y))(_t(x1)))
    np.testing.assert_array_equal(h1, [[0, 5, 2], [5, 0, 0], [2, 0, 0]])


# ---- tapes nested in tapes ------------------------------------------------------------


@settings(max_examples=20)
@given(z=vec(fl(-2, 2), n_max=4))
def test_tape_in_tape_equals_grad_of_grad(z):
    def F(y):
        return xp.sum(xp.sin(y) * xp.exp(y) * y) + xp.prod(xp.cos(y))

    zt = _t(z)
    with ad.GradientTape(persistent=True) as outer:
        outer.watch(zt)
        with ad.GradientTape() as inner:
            inner.watch(zt)
            y = F(zt)
        g = inner.gradient(y, zt)
        s = xp.sum(g)
    eye = np.eye(z.size)
    hess_tape = np.stack([_np(outer.gradient(g, zt, output_gradients=_t(eye[i])))
                          for i in range(z.size)])
    hess = _np(ad.jacrev(ad.grad(F))(zt))
    np.testing.assert_allclose(hess_tape, hess, rtol=1e-12, atol=1e-12)
    gg = _np(ad.grad(lambda w: xp.sum(ad.grad(F)(w)))(zt))
    np.testing.assert_allclose(_np(outer.gradient(s, zt)), gg, rtol=1e-12, atol=1e-12)


def test_three_nested_tapes_give_the_third_derivative():
    x = _t([0.3, -1.2])
    with ad.GradientTape() as t3:
        t3.watch(x)
        with ad.GradientTape() as t2:
            t2.watch(x)
            with ad.GradientTape() as t1:
                t1.watch(x)
                y = xp.sum(xp.sin(x) * x)
            g1 = t1.gradient(y, x)
            s1 = xp.sum(g1)  # computed inside t2 (and t3), so both record it
        g2 = t2.gradient(s1, x)
        s2 = xp.sum(g2)
    g3 = t3.gradient(s2, x)
    xn = x.numpy()
    # f = x sin x: f'' = 2 cos x - x sin x, f''' = -3 sin x - x cos x
    np.testing.assert_allclose(g2.numpy(), 2 * np.cos(xn) - xn * np.sin(xn), rtol=1e-12)
    np.testing.assert_allclose(g3.numpy(), -3 * np.sin(xn) - xn * np.cos(xn), rtol=1e-12)
    third = ad.grad(lambda w: xp.sum(ad.grad(lambda u: xp.sum(ad.grad(
        lambda s: xp.sum(xp.sin(s) * s))(u)))(w)))(x)
    np.testing.assert_allclose(third.numpy(), g3.numpy(), rtol=1e-12)


def _tanh_cubic(y):
    return xp.sum(xp.tanh(y) * y * y)


def test_grad_inside_tape():
    x = _t([0.4, -0.7, 1.1])
    expected = _np(ad.grad(lambda w: xp.sum(ad.grad(_tanh_cubic)(w)))(x))
    with ad.GradientTape() as tape:
        tape.watch(x)
        s = xp.sum(ad.grad(_tanh_cubic)(x))
    np.testing.assert_allclose(_np(tape.gradient(s, x)), expected, rtol=1e-12)


def test_tape_inside_grad():
    x = _t([0.4, -0.7, 1.1])
    expected = _np(ad.grad(lambda w: xp.sum(ad.grad(_tanh_cubic)(w)))(x))

    def tape_grad_sum(w):
        with ad.GradientTape() as tape:
            tape.watch(w)
            y = _tanh_cubic(w)
        return xp.sum(tape.gradient(y, w))

    np.testing.assert_allclose(_np(ad.grad(tape_grad_sum)(x)), expected, rtol=1e-12)


@pytest.mark.parametrize("x", [2.0, 0.5])
def test_pow_mixed_second_derivative_at_zero_exponent(x):
    def F(w):
        return xp.sum(lax.pow(_sl(w, 0, 1), _sl(w, 1, 2)))

    h = _np(ad.hessian(F)(_t([x, 0.0])))
    expected = np.array([[0.0, 1 / x], [1 / x, np.log(x) ** 2]])
    np.testing.assert_allclose(h, expected, rtol=1e-12, atol=1e-15)


# ---- logaddexp, logaddexp2: derivatives at ties ---------------------------------------------

LOG_ADD_EXP = {"logaddexp": 1.0, "logaddexp2": math.log(2)}  # d2/dx1^2 at x1 == x2: this / 4


@pytest.mark.parametrize("name", list(LOG_ADD_EXP))
@pytest.mark.parametrize("pair", [(0.5, 0.5), (-3.0, -3.0), (40.0, 40.0), (0.3, -1.2), (2.0, 2.0 + 1e-9)])
def test_log_add_exp_second_derivative_at_and_near_ties(name, pair):
    """At x1 == x2 the Hessian of logaddexp is [[1/4, -1/4], [-1/4, 1/4]] (logaddexp2: ln(2)
    times that), as torch's autograd gives (and JAX's custom JVP): the gradient and every
    second-order transform match torch, and finite differences of the gradient."""
    torch = pytest.importorskip("torch")
    tf = getattr(torch, name)

    def F(w):
        return xp.sum(getattr(xp, name)(_sl(w, 0, 1), _sl(w, 1, 2)))

    z = np.array(pair)
    zt = torch.tensor(z, dtype=torch.float64)
    want_g = torch.func.grad(lambda t: tf(t[0], t[1]))(zt).numpy()
    want_h = torch.autograd.functional.hessian(lambda t: tf(t[0], t[1]), zt).numpy()
    if pair[0] == pair[1]:  # the reference itself
        k = LOG_ADD_EXP[name] / 4
        np.testing.assert_allclose(want_g, [0.5, 0.5], rtol=1e-15)
        np.testing.assert_allclose(want_h, [[k, -k], [-k, k]], rtol=1e-12)
    np.testing.assert_allclose(_np(ad.grad(F)(_t(z))), want_g, rtol=1e-13)
    for hess in (ad.hessian(F), ad.jacrev(ad.jacfwd(F)), ad.jacrev(ad.grad(F)), ad.jacfwd(ad.jacfwd(F))):
        np.testing.assert_allclose(_np(hess(_t(z))), want_h, rtol=1e-10, atol=1e-15)
    check_second_order(F, z, np.array([0.7, -0.6]))


@pytest.mark.parametrize("name", list(LOG_ADD_EXP))
def test_log_add_exp_derivatives_at_special_values_stay_quiet(name):
    """Equal infinities and a NaN: values as NumPy's, gradients finite or NaN, no warning."""
    f = getattr(xp, name)
    a = _t([np.inf, -np.inf, 1.0, np.nan, -np.inf])
    b = _t([np.inf, -np.inf, -np.inf, 1.0, 2.0])
    with np.errstate(invalid="ignore"):
        want = getattr(np, name)(_np(a), _np(b))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = f(a, b)
        ga, gb = ad.grad(lambda u, v: xp.sum(f(u, v)), argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(_np(got), want)
    np.testing.assert_array_equal(_np(ga)[2:], [1.0, np.nan, 0.0])
    np.testing.assert_array_equal(_np(gb)[2:], [0.0, np.nan, 1.0])


# ---- custom rules and degenerate functions ----------------------------------------------


@ad.custom_jvp
def _xsin_jvp(x):
    return xp.sin(x) * x


@_xsin_jvp.defjvp
def _xsin_jvp_rule(primals, tangents):
    (x,), (t,) = primals, tangents
    return _xsin_jvp(x), t * (xp.cos(x) * x + xp.sin(x))


@ad.custom_vjp
def _xsin_vjp(x):
    return xp.sin(x) * x


_xsin_vjp.defvjp(lambda x: (_xsin_vjp(x), x), lambda x, ct: (ct * (xp.cos(x) * x + xp.sin(x)),))


@pytest.mark.parametrize("fn", [_xsin_jvp, _xsin_vjp], ids=["custom_jvp", "custom_vjp"])
def test_custom_rules_differentiate_twice(fn):
    """The rules are written with the namespace, so they are differentiated again."""
    xn = np.array([0.3, -1.2, 2.0])
    x = _t(xn)
    ref = 2 * np.cos(xn) - xn * np.sin(xn)  # (x sin x)''

    def F(y):
        return xp.sum(fn(y))

    np.testing.assert_allclose(_np(ad.grad(lambda w: xp.sum(ad.grad(F)(w)))(x)), ref, rtol=1e-12)
    np.testing.assert_allclose(_np(ad.jacrev(ad.jacrev(F))(x)), np.diag(ref), rtol=1e-12, atol=1e-15)
    if fn is _xsin_jvp:  # custom_vjp is reverse mode only (forward over it is a MissingRuleError)
        np.testing.assert_allclose(_np(ad.hessian(F)(x)), np.diag(ref), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(_np(tape_second_derivative(F, x)), ref, rtol=1e-12)


@pytest.mark.parametrize("name,F,expected", [
    ("linear", lambda v: xp.sum(v * _t([1.0, 2.0, 3.0])), np.zeros((3, 3))),
    ("constant", lambda v: xp.sum(_t([1.0, 2.0, 3.0])), np.zeros((3, 3))),
    ("through an integer cast", lambda v: xp.sum(xp.astype(v, xp.int64) * 1.0 + v * v), 2 * np.eye(3)),
])
def test_degenerate_hessians(name, F, expected):
    x = _t([0.3, -1.2, 2.0])
    for hess in (ad.hessian(F), ad.jacrev(ad.jacfwd(F)), ad.jacfwd(ad.jacfwd(F)), ad.jacrev(ad.grad(F))):
        h = hess(x)
        assert h.shape == (3, 3) and h.dtype == xp.float64
        np.testing.assert_array_equal(_np(h), expected)
