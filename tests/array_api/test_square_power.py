"""`x ** 2` (the Python int 2) of a real tensor is `x * x`: bit-for-bit NumPy's `x ** 2` on
every real dtype, and traced as one mul (its gradient 2x without pow's zero-base handling).
Complex squares stay pow (a complex multiply rounds its real part differently)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import trace


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint16", "float16", "float32", "float64"])
@pytest.mark.parametrize("device", ["numpy:cpu", "torch:cpu"])
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(0, 5))
def test_square_equals_numpy(dtype, device, seed, n):
    from tenferro_runtime import default_runtime

    if dtype not in {d.name for d in default_runtime().device(device).dtypes}:
        return
    rng = np.random.default_rng(seed)
    host = (rng.standard_normal((n, 3)) * 50).astype(dtype)
    got = (xp.asarray(host, device=device) ** 2).numpy()
    want = host ** 2
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_square_traces_as_one_mul_and_differentiates():
    x = xp.asarray([0.0, -1.5, 3.0])
    assert [n.prim.name for n in trace(lambda v: v ** 2, x).nodes] == ["mul"]
    np.testing.assert_array_equal(grad(lambda v: xp.sum(v ** 2))(x).numpy(), [0.0, -3.0, 6.0])
    assert [n.prim.name for n in trace(lambda v: v ** 3, x).nodes][-1] == "pow"
    z = xp.asarray([1 + 2j])
    assert [n.prim.name for n in trace(lambda v: v ** 2, z).nodes][-1] == "pow"
