"""tenferro_ad.testing.check_grads: passes correct rules, and catches wrong ones in each mode."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_ad as ad
from tenferro_ad.testing import check_grads
from tenferro_runtime import array_api as xp

RNG = np.random.default_rng(0)
X = xp.asarray(RNG.standard_normal((3, 2)))
Z = xp.asarray(RNG.standard_normal(4) + 1j * RNG.standard_normal(4))


def _sin_with_jvp(scale: float):
    @ad.custom_jvp
    def f(x):
        return xp.sin(x)

    @f.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), xp.cos(x) * t * scale

    return f


def test_correct_functions_pass_to_second_order():
    check_grads(lambda a, b: (xp.sin(a) @ b.T, xp.sum(a * a)), (X, X), order=2)
    check_grads(lambda z: (xp.exp(z) * xp.conj(z), xp.abs(z)), (Z,), order=2)
    check_grads(_sin_with_jvp(1.0), (X,), order=1)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_a_wrong_rule_is_caught(mode):
    with pytest.raises(AssertionError, match="JVP|VJP"):
        check_grads(_sin_with_jvp(1.001), (X,), order=1, modes=(mode,))


def test_a_wrong_second_derivative_is_caught():
    """x*|x| with abs's tangent frozen: right first derivative, wrong second."""
    @ad.custom_jvp
    def f(x):
        return x * xp.abs(x)

    @f.defjvp
    def _(primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 2 * ad.stop_gradient(xp.abs(x)) * t

    check_grads(f, (X,), order=1)
    with pytest.raises(AssertionError):
        check_grads(f, (X,), order=2, modes=("fwd",))
