"""Tests of the example extension, run once it is installed (see tests/test_custom_op_example.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tenferro_core.errors import DTypeError
from tenferro_runtime import Runtime, use_runtime
from tenferro_runtime.array_api import asarray
from tenferro_softplus import softplus, softplus_p


def _reference(x):
    return np.logaddexp(0, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_matches_reference_without_overflow(dtype):
    x = np.array([-1000.0, -3.0, 0.0, 2.5, 1000.0], dtype=dtype)
    out = softplus(x)
    assert out.dtype.name == np.dtype(dtype).name
    np.testing.assert_allclose(out.numpy(), _reference(x), rtol=1e-6)


def test_decomposition_matches_kernel():
    x = asarray(np.linspace(-50, 50, 101))
    with_kernel = softplus(x).numpy()
    decomposed = softplus_p.decomposition(x).numpy()
    np.testing.assert_allclose(decomposed, with_kernel, rtol=1e-12)


def test_discovered_through_entry_points():
    rt = Runtime.from_entry_points(allow=["numpy", "softplus"])
    assert "tenferro_softplus.softplus.v1" in rt.ops
    assert rt.ops["tenferro_softplus.softplus.v1"] in rt.device("numpy:cpu").kernels
    with use_runtime(rt):
        assert softplus(asarray([0.0])).numpy()[0] == pytest.approx(np.log(2.0))


def test_integer_input_is_a_clear_error():
    with pytest.raises(DTypeError, match="real floating"):
        softplus(asarray([1, 2]))


def test_gradients_through_the_registered_rule():
    import tenferro_ad as ad

    x = np.array([-3.0, 0.0, 2.0])
    g = ad.grad(lambda v: xp_sum(softplus(v)))(asarray(x)).numpy()
    np.testing.assert_allclose(g, 1 / (1 + np.exp(-x)), rtol=1e-12)
    g2 = ad.grad(lambda v: xp_sum(ad.grad(lambda w: xp_sum(softplus(w)))(v)))(asarray(x)).numpy()
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(g2, s * (1 - s), rtol=1e-10)


def xp_sum(v):
    from tenferro_runtime import array_api as xp

    return xp.sum(v)
