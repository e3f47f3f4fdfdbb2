"""softplus under vmap of vmap: distinct examples, nested batch sizes 0 to 3 and batch axes
anywhere give the reference on each example, with no PerformanceWarning (the registered
batch rule runs, not the loop fallback)."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tenferro_ad import PerformanceWarning, vmap
from tenferro_runtime import array_api as xp
from tenferro_softplus import softplus


@settings(max_examples=8, deadline=None)
@given(sizes=st.tuples(st.sampled_from([0, 1, 3]), st.sampled_from([0, 1, 2])),
       inner=st.integers(0, 2), outer=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_softplus_under_nested_vmap(sizes, inner, outer, seed):
    x = np.random.default_rng(seed).standard_normal(sizes + (2, 3)) * 30
    arg = np.moveaxis(np.moveaxis(x, 1, 1 + inner), 0, outer)
    g = vmap(vmap(softplus, in_axes=inner), in_axes=outer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = g(xp.asarray(np.ascontiguousarray(arg))).numpy()
    np.testing.assert_allclose(got, np.logaddexp(0, x), rtol=1e-12)
