"""Complex differentiation follows JAX's convention (see `tenferro_ad.ad_util`).

- A JVP is the real-linear map of the function: for holomorphic f it is ``f'(z) * t``;
  in general it is the directional derivative ``d/de f(z + e t)`` at 0.
- A VJP is its transpose for the unconjugated pairing: ``vjp(ct)`` is the u with
  ``Re sum(ct * jvp(t)) == Re sum(u * t)`` for all t; for holomorphic f that is
  ``ct * f'(z)``, for ``conj`` it is ``conj(ct)``.
- ``grad(f)(z)`` of a real-valued f is ``df/dx - i df/dy`` (z = x + iy): the conjugate of
  PyTorch's ``z.grad``. For ``|z|**2`` it is ``2 conj(z)``; JAX 0.10 gives the same
  (``jax.grad(lambda z: jnp.abs(z)**2)(3+4j) == 6-8j``), checked once by hand, not here.

The references are the math (analytic derivatives and central finite differences along
the real and imaginary directions) and, for real-valued losses, torch's ``z.grad``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_ad as ad
from tenferro_core.errors import ShapeError
from tenferro_runtime import array_api as xp

H = 1e-6
TOL = {"rtol": 1e-7, "atol": 1e-8}


def fl(lo: float, hi: float):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def cplx(r: float = 2.0, ok: Callable | None = None):
    s = st.builds(complex, fl(-r, r), fl(-r, r))
    return s.filter(ok) if ok else s


def carr(elem, n: int) -> st.SearchStrategy:
    return st.lists(elem, min_size=n, max_size=n).map(lambda v: np.array(v, dtype=np.complex128))


def _c(a) -> xp.Tensor:
    return xp.asarray(np.asarray(a, dtype=np.complex128))


def _f(a) -> xp.Tensor:
    return xp.asarray(np.asarray(a, dtype=np.float64))


def _np(x) -> np.ndarray:
    return np.asarray(x.numpy())


def fd_directional(f: Callable, zs: list[np.ndarray], ts: list[np.ndarray]) -> np.ndarray:
    """d/de f(z + e t) at e = 0, by a central difference (complex z, complex t)."""
    plus = f(*[_c(z + H * t) for z, t in zip(zs, ts)])
    minus = f(*[_c(z - H * t) for z, t in zip(zs, ts)])
    return (_np(plus) - _np(minus)) / (2 * H)


def fd_wirtinger_grad(f: Callable, z: np.ndarray) -> np.ndarray:
    """df/dx - i df/dy per element, for a real-valued f of a complex array."""
    g = np.zeros_like(z)
    for i in range(z.size):
        e = np.zeros_like(z)
        e[i] = 1.0
        dx = fd_directional(f, [z], [e])
        dy = fd_directional(f, [z], [1j * e])
        g[i] = dx - 1j * dy
    return g


# ---- holomorphic functions: jvp = f'(z) t, vjp = ct f'(z) ----------------------------


@dataclass(frozen=True)
class Holo:
    name: str
    fn: Callable  # of n complex tensors
    derivs: Callable  # numpy: partial derivatives, one per argument
    domain: st.SearchStrategy = cplx()
    nargs: int = 1


def _away_from_cut(z: complex) -> bool:  # log: principal branch cut on (-inf, 0]
    return abs(z) > 0.2 and not (z.real < 0 and abs(z.imag) < 0.2)


HOLO = [
    Holo("z*z", lambda z: z * z, lambda z: (2 * z,)),
    Holo("z**2", lambda z: z**2, lambda z: (2 * z,)),
    Holo("z**3 (pow)", lambda z: xp.pow(z, _c(3.0)), lambda z: (3 * z**2,),
         cplx(ok=lambda z: abs(z) > 0.2)),
    Holo("exp", xp.exp, lambda z: (np.exp(z),)),
    Holo("sin", xp.sin, lambda z: (np.cos(z),)),
    Holo("cos", xp.cos, lambda z: (-np.sin(z),)),
    Holo("tanh", xp.tanh, lambda z: (1 / np.cosh(z) ** 2,), cplx(1.0)),
    Holo("log", xp.log, lambda z: (1 / z,), cplx(ok=_away_from_cut)),
    Holo("1/z", lambda z: 1.0 / z, lambda z: (-1 / z**2,), cplx(ok=lambda z: abs(z) > 0.3)),
    Holo("z*w", lambda z, w: z * w, lambda z, w: (w, z), nargs=2),
    Holo("exp(z)*sin(w)+z/w", lambda z, w: xp.exp(z) * xp.sin(w) + z / w,
         lambda z, w: (np.exp(z) * np.sin(w) + 1 / w, np.exp(z) * np.cos(w) - z / w**2),
         cplx(ok=lambda z: abs(z) > 0.3), nargs=2),
]


@pytest.mark.parametrize("case", HOLO, ids=[c.name for c in HOLO])
@settings(max_examples=20)
@given(data=st.data())
def test_holomorphic_jvp_and_vjp(case, data):
    n = data.draw(st.integers(1, 3), label="size")
    zs = [data.draw(carr(case.domain, n), label=f"z{i}") for i in range(case.nargs)]
    ts = [data.draw(carr(cplx(1.0), n), label=f"t{i}") for i in range(case.nargs)]
    ct = data.draw(carr(cplx(1.0), n), label="ct")
    d = case.derivs(*zs)
    out, tangent = ad.jvp(case.fn, tuple(_c(z) for z in zs), tuple(_c(t) for t in ts))
    assert tangent.dtype == xp.complex128
    expected = sum(di * ti for di, ti in zip(d, ts))
    np.testing.assert_allclose(_np(tangent), expected, rtol=1e-12, atol=1e-12, err_msg="jvp = f'(z) t")
    # the difference quotient's rounding error scales with |f(z)| / H, not with the tangent
    fd_tol = {**TOL, "atol": TOL["atol"] * max(1.0, float(np.max(np.abs(_np(out)), initial=0.0)))}
    np.testing.assert_allclose(_np(tangent), fd_directional(case.fn, zs, ts), err_msg="jvp vs FD",
                               **fd_tol)

    out2, vjp_fn = ad.vjp(case.fn, *[_c(z) for z in zs])
    np.testing.assert_allclose(_np(out2), _np(out))
    cts = vjp_fn(_c(ct))
    for i, (di, ci) in enumerate(zip(d, cts)):
        assert ci.dtype == xp.complex128
        np.testing.assert_allclose(_np(ci), ct * di, rtol=1e-12, atol=1e-12,
                                   err_msg=f"vjp = ct f'(z), argument {i}")


# ---- the pairing identity, holomorphic or not -----------------------------------------


@dataclass(frozen=True)
class Fn:
    name: str
    fn: Callable  # complex tensor -> complex or real tensor
    real_out: bool
    domain: st.SearchStrategy = cplx()


NONHOLO = [
    Fn("conj", xp.conj, False),
    Fn("real", xp.real, True),
    Fn("imag", xp.imag, True),
    Fn("abs", xp.abs, True, cplx(ok=lambda z: abs(z) > 0.2)),
    Fn("abs**2", lambda z: xp.abs(z) ** 2, True),
    Fn("z*conj(z)", lambda z: z * xp.conj(z), False),
    Fn("exp(conj z)*z", lambda z: xp.exp(xp.conj(z)) * z, False),
    Fn("real(z)*imag(z)+abs(z)", lambda z: xp.real(z) * xp.imag(z) + xp.abs(z), True,
       cplx(ok=lambda z: abs(z) > 0.2)),
    Fn("sin (holomorphic)", xp.sin, False),
]


@pytest.mark.parametrize("case", NONHOLO, ids=[c.name for c in NONHOLO])
@settings(max_examples=20)
@given(data=st.data())
def test_jvp_is_the_directional_derivative_and_vjp_its_transpose(case, data):
    n = data.draw(st.integers(1, 3), label="size")
    z = data.draw(carr(case.domain, n), label="z")
    t = data.draw(carr(cplx(1.0), n), label="t")
    _, tangent = ad.jvp(case.fn, (_c(z),), (_c(t),))
    assert tangent.dtype == (xp.float64 if case.real_out else xp.complex128)
    np.testing.assert_allclose(_np(tangent), fd_directional(case.fn, [z], [t]), err_msg="jvp vs FD",
                               **TOL)
    if case.real_out:
        ct_np = np.array(data.draw(st.lists(fl(-1, 1), min_size=n, max_size=n), label="ct"))
        ct = _f(ct_np)
    else:
        ct_np = data.draw(carr(cplx(1.0), n), label="ct")
        ct = _c(ct_np)
    _, vjp_fn = ad.vjp(case.fn, _c(z))
    (u,) = vjp_fn(ct)
    assert u.dtype == xp.complex128
    lhs = np.real(np.sum(ct_np * _np(tangent)))
    rhs = np.real(np.sum(_np(u) * t))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-12), "Re<ct, J t> == Re<vjp(ct), t>"


def test_vjps_of_the_real_linear_primitives():
    z, ct = _c([3 + 4j]), _c([0.5 - 1.5j])
    np.testing.assert_allclose(_np(ad.vjp(xp.conj, z)[1](ct)[0]), [0.5 + 1.5j])
    two = _f([2.0])
    np.testing.assert_allclose(_np(ad.vjp(xp.real, z)[1](two)[0]), [2.0 + 0j])
    np.testing.assert_allclose(_np(ad.vjp(xp.imag, z)[1](two)[0]), [-2.0j])
    np.testing.assert_allclose(_np(ad.vjp(xp.abs, z)[1](two)[0]), [1.2 - 1.6j])  # ct conj(z)/|z|
    _, t = ad.jvp(xp.abs, (z,), (_c([0.5 + 1j]),))
    np.testing.assert_allclose(_np(t), [1.1])  # Re(conj(z) t) / |z|


# ---- grad of real-valued functions: conj of torch's z.grad, = df/dx - i df/dy ---------


REAL_VALUED = [
    ("abs(z)**2", lambda z: xp.sum(xp.abs(z) ** 2), lambda z: (z.abs() ** 2).sum(),
     lambda z: 2 * np.conj(z)),
    ("real(z)", lambda z: xp.sum(xp.real(z)), lambda z: z.real.sum(), lambda z: np.ones_like(z)),
    ("imag(z)", lambda z: xp.sum(xp.imag(z)), lambda z: z.imag.sum(), lambda z: -1j * np.ones_like(z)),
    ("abs(z)", lambda z: xp.sum(xp.abs(z)), lambda z: z.abs().sum(), lambda z: np.conj(z) / np.abs(z)),
    ("real(conj(z) * exp(z))", lambda z: xp.sum(xp.real(xp.conj(z) * xp.exp(z))),
     lambda z: (z.conj() * z.exp()).real.sum(), None),
    ("abs(sin(z))**2 + imag(z*z)", lambda z: xp.sum(xp.abs(xp.sin(z)) ** 2 + xp.imag(z * z)),
     lambda z: (z.sin().abs() ** 2 + (z * z).imag).sum(), None),
]


def _torch_grad(fn: Callable, z: np.ndarray) -> np.ndarray:
    import torch

    zt = torch.tensor(z, dtype=torch.complex128, requires_grad=True)
    fn(zt).backward()
    return zt.grad.numpy()


@pytest.mark.parametrize("name,f,f_torch,analytic", REAL_VALUED, ids=[r[0] for r in REAL_VALUED])
@settings(max_examples=20)
@given(z=st.integers(1, 3).flatmap(lambda n: carr(cplx(ok=lambda v: abs(v) > 0.2), n)))
def test_grad_of_real_valued_function(name, f, f_torch, analytic, z):
    g = ad.grad(f)(_c(z))
    assert g.dtype == xp.complex128 and g.shape == z.shape
    g = _np(g)
    np.testing.assert_allclose(g, np.conj(_torch_grad(f_torch, z)), rtol=1e-12, atol=1e-12,
                               err_msg="conj of torch's z.grad")
    np.testing.assert_allclose(g, fd_wirtinger_grad(f, z), err_msg="df/dx - i df/dy", **TOL)
    if analytic is not None:
        np.testing.assert_allclose(g, analytic(z), rtol=1e-12, atol=1e-12, err_msg="analytic")
    zt = _c(z)
    with ad.GradientTape() as tape:
        tape.watch(zt)
        y = f(zt)
    np.testing.assert_allclose(_np(tape.gradient(y, zt)), g, rtol=1e-12, atol=1e-12, err_msg="tape")


def test_abs_squared_gradient_is_twice_conj():
    g = ad.grad(lambda z: xp.abs(z) ** 2)(_c(3 + 4j))
    assert complex(g) == pytest.approx(6 - 8j)  # JAX: 6-8j; torch's z.grad: 6+8j


@settings(max_examples=20)
@given(z=carr(cplx(), 3), w=carr(cplx(), 3))
def test_two_complex_arguments_against_torch(z, w):
    import torch

    def f(a, b):
        return xp.sum(xp.abs(a * b + xp.exp(a)) ** 2) + xp.real(xp.sum(xp.conj(a) * b))

    ga, gb = ad.grad(f, argnums=(0, 1))(_c(z), _c(w))
    za = torch.tensor(z, requires_grad=True)
    wb = torch.tensor(w, requires_grad=True)
    ((za * wb + za.exp()).abs() ** 2).sum().add((za.conj() * wb).real.sum()).backward()
    np.testing.assert_allclose(_np(ga), np.conj(za.grad.numpy()), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(_np(gb), np.conj(wb.grad.numpy()), rtol=1e-11, atol=1e-12)


@settings(max_examples=20)
@given(x=st.lists(fl(-2, 2), min_size=1, max_size=4).map(np.array))
def test_real_input_through_complex_intermediates(x):
    """real -> complex (promotion) -> real: the gradient is real and matches torch."""
    import torch

    def f(v):
        z = xp.exp(1j * v) * (v + 2j)
        return xp.sum(xp.abs(z) ** 2 + xp.real(z * z))

    g = ad.grad(f)(_f(x))
    assert g.dtype == xp.float64
    xt = torch.tensor(x, requires_grad=True)
    zt = torch.exp(1j * xt) * (xt + 2j)
    (zt.abs() ** 2 + (zt * zt).real).sum().backward()
    np.testing.assert_allclose(_np(g), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_grad_of_complex_output_is_an_error():
    with pytest.raises(ShapeError, match="real scalar"):
        ad.grad(lambda z: xp.sum(z * z))(_c([1 + 1j]))
    # vjp is the tool for complex outputs: with ct = 1 it is f'(z) (holomorphic)
    _, vjp_fn = ad.vjp(lambda z: xp.sum(z * z), _c([1 + 1j]))
    np.testing.assert_allclose(_np(vjp_fn(_c(1.0))[0]), [2 + 2j])
