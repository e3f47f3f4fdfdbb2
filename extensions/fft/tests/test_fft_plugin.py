"""The plugin registers the ops, their NumPy kernels, their transpose rules and array_api.fft."""

from __future__ import annotations

import numpy as np

import tenferro_fft
from tenferro_runtime import Runtime, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.testing.subprocess_check import imports_module

OPS = ("tenferro_fft.fft.v1", "tenferro_fft.rfft.v1", "tenferro_fft.irfft.v1")


def test_array_api_fft_is_this_module():
    assert xp.fft is tenferro_fft
    assert xp.fft.fft(xp.asarray([1.0, 2.0])).numpy().tolist() == [3.0, -1.0]


def test_discovered_through_entry_points():
    rt = Runtime.from_entry_points(allow=["numpy", "fft"])
    assert rt.namespaces["fft"] is tenferro_fft
    for name in OPS:
        assert name in rt.ops
        assert ("numpy", name) in rt.kernels
        assert ("transpose", name) in rt.rules
        assert ("jvp", name) not in rt.rules and rt.ops[name].linear_in(0)  # JVP derived
    with use_runtime(rt):
        y = xp.fft.rfft(xp.asarray(np.arange(4.0)))
        np.testing.assert_allclose(y.numpy(), np.fft.rfft(np.arange(4.0)))


def test_loading_the_plugin_does_not_import_scipy():
    code = ("from tenferro_runtime import Runtime\n"
            "rt = Runtime.from_entry_points(allow=['numpy', 'fft'])\n"
            "assert 'tenferro_fft.fft.v1' in rt.ops")
    assert not imports_module(code, "scipy")
