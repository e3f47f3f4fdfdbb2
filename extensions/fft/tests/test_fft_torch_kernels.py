"""What only the torch kernels do: they are registered without importing torch, and answer
operands with a size-0 batch axis themselves (torch's MKL transforms refuse them) with the
declared dtype. Values on torch:cpu are checked by the whole suite, which runs on both
backends (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from fft_cases import COMPLEX, REAL, complex_of, real_of

import tenferro_fft as F
from tenferro_runtime import array_api as xp
from tenferro_runtime.testing.subprocess_check import imports_module

pytest.importorskip("tenferro_torch")

DEVICES = ("torch:cpu",)


def test_registered_without_importing_torch():
    code = ("from tenferro_runtime import Runtime\n"
            "rt = Runtime.from_entry_points(allow=['numpy', 'torch', 'fft'])\n"
            "for op in ('fft', 'rfft', 'irfft'):\n"
            "    assert ('torch', f'tenferro_fft.{op}.v1') in rt.kernels")
    assert not imports_module(code, "torch")


@pytest.mark.parametrize("dtype", REAL + COMPLEX)
def test_size_zero_batches_keep_the_declared_dtype(dtype):
    x = xp.asarray(np.zeros((0, 4), dtype))
    for y, shape, want in [
        (F.fft(x), (0, 4), complex_of(dtype)),
        (F.ifftn(x, axes=(1,)), (0, 4), complex_of(dtype)),
        (F.irfft(x, n=6), (0, 6), real_of(dtype)),
        (F.rfftn(xp.real(x), axes=(1,)) if dtype in COMPLEX else F.rfft(x), (0, 3), complex_of(dtype)),
    ]:
        assert y.shape == shape and y.dtype.name == want
        assert y.device.name == "torch:cpu" and y.numpy().shape == shape
