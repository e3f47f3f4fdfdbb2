"""Gradients of every transform with check_grads (order 2: forward vs finite differences,
reverse vs forward through the transpose pairing), every norm, odd and even lengths,
padding and truncation, several axes, float64 and complex128 inputs."""

from __future__ import annotations

import numpy as np
import pytest
from fft_cases import NORMS, host

import tenferro_ad as ad
import tenferro_fft as F
from tenferro_ad.ad_util import UndefinedPrimal, Zero, is_zero
from tenferro_ad.testing import check_grads
from tenferro_fft import _rules
from tenferro_runtime import array_api as xp

RNG = np.random.default_rng(7)
X = {d: xp.asarray(host(RNG, (3, 4), d)) for d in ("float64", "complex128")}
X3 = {d: xp.asarray(host(RNG, (2, 3, 5), d)) for d in ("float64", "complex128")}

# (function, input dtypes): the 1-d transforms
ONE_D = [(F.fft, ("float64", "complex128")), (F.ifft, ("float64", "complex128")), (F.rfft, ("float64",)),
         (F.irfft, ("complex128", "float64")), (F.hfft, ("complex128", "float64")), (F.ihfft, ("float64",))]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn,dtypes", ONE_D, ids=[f.__name__ for f, _ in ONE_D])
def test_one_d_gradients(fn, dtypes, norm):
    # n: default, odd and even, shorter (truncation) and longer (zero-padding) than the input
    for dtype in dtypes:
        for n, axis in [(None, -1), (3, -1), (6, -1), (1, 0), (2, 0), (5, 0)]:
            check_grads(lambda v, n=n, axis=axis: fn(v, n=n, axis=axis, norm=norm), (X[dtype],), order=2,
                        what=f"{fn.__name__}(n={n}, axis={axis}, norm={norm}) of {dtype}")


# (function, input dtypes, (s, axes) cases): the n-d transforms on a (2, 3, 5) input
N_D_CASES = [(None, None), (None, (0, 2)), ((4, 2), (2, 0)), ((3,), (-2,)), ((2, 4, 3), None),
             ((1, 6), (-1, 1))]
N_D = [(F.fftn, ("float64", "complex128")), (F.ifftn, ("complex128",)), (F.rfftn, ("float64",)),
       (F.irfftn, ("complex128", "float64"))]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn,dtypes", N_D, ids=[f.__name__ for f, _ in N_D])
def test_n_d_gradients(fn, dtypes, norm):
    for dtype in dtypes:
        for s, axes in N_D_CASES:
            check_grads(lambda v, s=s, axes=axes: fn(v, s=s, axes=axes, norm=norm), (X3[dtype],), order=2,
                        what=f"{fn.__name__}(s={s}, axes={axes}, norm={norm}) of {dtype}")


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_shift_gradients(dtype):
    for axes in (None, 0, (1,), (2, 0)):
        check_grads(lambda v, axes=axes: F.fftshift(v, axes=axes), (X3[dtype],), order=2)
        check_grads(lambda v, axes=axes: F.ifftshift(v, axes=axes), (X3[dtype],), order=2)


def test_gradient_of_a_real_loss_through_a_round_trip():
    # |rfft(x)|^2 summed with the Hermitian weights is n * |x|^2 (Parseval): gradient 2 n x
    a = host(RNG, (6,), "float64")

    def power(v):
        y = F.rfft(v)
        w = xp.asarray([1.0, 2.0, 2.0, 1.0])
        return xp.sum(w * xp.real(y * xp.conj(y)))

    g = ad.grad(power)(xp.asarray(a))
    np.testing.assert_allclose(g.numpy(), 2 * 6 * a, rtol=1e-12)


@pytest.mark.parametrize("rule,op_params", [
    (_rules.fft_transpose, {"axes": (1,), "inverse": False, "norm": "ortho"}),
    (_rules.rfft_transpose, {"axes": (1,), "norm": "backward"}),
    (_rules.irfft_transpose, {"axes": (1,), "s": (4,), "norm": "forward"}),
])
def test_transposes_of_a_zero_cotangent_are_zero(rule, op_params):
    x = X["complex128"] if rule is not _rules.rfft_transpose else X["float64"]
    (out,) = rule(Zero(x.aval), UndefinedPrimal(x.aval), **op_params)
    assert is_zero(out) and out.aval == x.aval
