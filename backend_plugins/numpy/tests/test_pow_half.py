"""pow by a scalar exponent of 0.5 follows C's pow on every path (NumPy's power takes a square
root there: -inf gave NaN and -0.0 gave -0.0 for a 0-d or broadcast exponent, and the same
operands as 1-element arrays gave +inf and +0.0)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tenferro_runtime import array_api as xp
from tenferro_runtime import compile

VALUES = [-math.inf, -0.0, 0.0, 3.0, 4.0, 1e-30, math.inf, math.nan, -1.0, -2.5]


def _c_pow(dtype: str) -> np.ndarray:
    return np.array([math.pow(v, 0.5) if not (v < 0 and v != -math.inf) else math.nan for v in VALUES],
                    dtype)


def _same(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(want)
    assert np.array_equal(np.signbit(got[num]), np.signbit(want[num])), (got, want)
    np.testing.assert_allclose(got, want, rtol=2 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_half_matches_c_pow_for_0d_broadcast_full_and_fused_exponents(dtype):
    want = _c_pow(dtype)
    x = xp.asarray(np.array(VALUES, dtype))
    half0 = xp.asarray(np.array(0.5, dtype))
    _same(xp.pow(x, half0), want, dtype)                                     # 0-d exponent
    _same(xp.pow(x, xp.asarray(np.full(len(VALUES), 0.5, dtype))), want, dtype)  # full exponent
    _same(x ** 0.5, want, dtype)                                              # Python scalar
    with np.errstate(invalid="ignore"):
        fused = want * 0 + want
    _same(compile(lambda t: xp.abs(t) * 0 + t ** 0.5)(x), fused, dtype)  # fused group
    for v, w in zip(VALUES, want):                                            # 0-d base too
        _same(xp.pow(xp.asarray(np.array(v, dtype)), half0), np.array(w, dtype), dtype)
