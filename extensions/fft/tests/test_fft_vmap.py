"""Every transform under vmap of vmap: nested batch sizes 0 to 3, batch axes anywhere, drawn
axes, lengths and norm; equals numpy.fft on each example, on each CPU backend (conftest).
Complements test_fft_batching.py (one level, non-empty batches)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_fft as tf
from tenferro_ad import PerformanceWarning, vmap
from tenferro_runtime import array_api as xp

ONE_AXIS = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
MANY_AXES = ["fftn", "ifftn", "rfftn", "irfftn"]
REAL_INPUT = {"rfft", "rfftn", "ihfft"}


def _kwargs(name: str, data: st.DataObject) -> dict:
    kw: dict = {"norm": data.draw(st.sampled_from(["backward", "ortho", "forward"]), label="norm")}
    if name in ONE_AXIS:
        kw["axis"] = data.draw(st.sampled_from([0, 1, -1]), label="axis")
        kw["n"] = data.draw(st.sampled_from([None, 2, 5]), label="n")
    else:
        kw["axes"] = data.draw(st.sampled_from([(0, 1), (1, 0), (1,)]), label="axes")
        if data.draw(st.booleans(), label="s given"):
            kw["s"] = tuple(data.draw(st.integers(2, 5)) for _ in kw["axes"])
    return kw


@pytest.mark.parametrize("name", ONE_AXIS + MANY_AXES)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_transform_under_nested_vmap_equals_each_example(name, data):
    kw = _kwargs(name, data)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    sizes = data.draw(st.tuples(st.sampled_from([0, 1, 3]), st.sampled_from([0, 1, 2])),
                      label="sizes (outer, inner)")
    shape = sizes + (3, 4)
    x = rng.standard_normal(shape)
    if name not in REAL_INPUT:
        x = x + 1j * rng.standard_normal(shape)
    ai = data.draw(st.integers(0, 2), label="inner axis")
    ao = data.draw(st.integers(0, 3), label="outer axis")
    arg = np.ascontiguousarray(np.moveaxis(np.moveaxis(x, 1, 1 + ai), 0, ao))
    f = getattr(tf, name)
    g = vmap(vmap(lambda v: f(v, **kw), in_axes=ai, axis_size=sizes[1]), in_axes=ao,
             axis_size=sizes[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerformanceWarning)
        got = g(xp.asarray(arg)).numpy()
    ref = getattr(np.fft, name)
    one = ref(x.reshape((-1, 3, 4))[0] if x.size else np.zeros((3, 4), x.dtype), **kw)
    per = [ref(e, **kw) for e in x.reshape((-1, 3, 4))]
    want = (np.stack(per) if per else np.zeros((0,) + one.shape, one.dtype)).reshape(sizes + one.shape)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=f"{name} {kw}")
