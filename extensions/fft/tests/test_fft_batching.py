"""The FFT ops under vmap (and vmap of vmap) equal stacking them: the batch axis goes first
and the transformed axes shift past it, on each CPU backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenferro_fft as fft
from tenferro_ad import vmap
from tenferro_ad.testing import check_vmap
from tenferro_runtime import array_api as xp

FUNCTIONS = {
    "fft": lambda x: fft.fft(x),
    "ifft axis 0": lambda x: fft.ifft(x, axis=0, norm="ortho"),
    "fftn": lambda x: fft.fftn(x),
    "rfft": lambda x: fft.rfft(x),
    "irfft": lambda x: fft.irfft(x, n=6),
    "rfftn": lambda x: fft.rfftn(x, axes=(0, 1)),
    "irfftn": lambda x: fft.irfftn(fft.rfftn(x)),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_fft_under_vmap_equals_stacking(name, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    size = data.draw(st.integers(1, 3), label="batch")
    axis = data.draw(st.integers(0, 2), label="batch axis")
    shape = (3, 4)
    examples = [[xp.asarray(rng.standard_normal(shape))] for _ in range(size)]
    check_vmap(FUNCTIONS[name], examples, [axis])


def test_nested_vmap_and_an_empty_batch():
    x = np.random.default_rng(0).standard_normal((2, 3, 8))
    got = vmap(vmap(fft.fft), in_axes=1)(xp.asarray(x))
    np.testing.assert_allclose(got.numpy(), np.fft.fft(np.swapaxes(x, 0, 1)), atol=1e-12)
    assert vmap(fft.rfft)(xp.zeros((0, 8), dtype=xp.float64)).shape == (0, 5)
