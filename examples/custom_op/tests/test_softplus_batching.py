"""softplus under vmap: its batch rule keeps the batch axis where it is, so no loop (and no
PerformanceWarning) runs, and the result equals stacking softplus over the examples."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import PerformanceWarning, grad, vmap
from tenferro_runtime import array_api as xp
from tenferro_softplus import softplus


@settings(max_examples=10, deadline=None)
@given(size=st.integers(0, 3), axis=st.integers(0, 2), seed=st.integers(0, 1000))
def test_softplus_under_vmap(size, axis, seed):
    x = np.random.default_rng(seed).standard_normal((2, 3)) * 30
    batch = np.stack([x] * size, axis=axis) if size else np.zeros((2, 3))[None][:0]
    if not size:
        axis = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = vmap(softplus, in_axes=axis)(xp.asarray(batch))
        per_example_grad = vmap(grad(lambda v: xp.sum(softplus(v))), in_axes=axis)(xp.asarray(batch))
    want = np.logaddexp(0, np.moveaxis(batch, axis, 0))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(per_example_grad.numpy(), 1 / (1 + np.exp(-np.moveaxis(batch, axis, 0))),
                               rtol=1e-12)
