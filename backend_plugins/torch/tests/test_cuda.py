"""torch:cuda:0 specifics, collected only where CUDA is present (conftest.py; the kit also
runs there, see test_torch_conformance.py): transfers, DLPack sharing on the GPU, device mixing, the CUDA-only
kernel paths (integer dot_general, float32 convolution without TF32), AD."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tenferro_ad as ad
from tenferro_core import dtypes as D
from tenferro_core.energy import EnergyTelemetry
from tenferro_core.errors import DeviceError
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime, lax
from tenferro_runtime.testing.reference_reductions import conv_values
from tenferro_torch.backend import TorchBackend

GPU = "torch:cuda:0"


def test_cuda_device_is_listed_and_computes():
    assert GPU in default_runtime().device_names()
    x = xp.asarray(np.arange(6.0).reshape(2, 3), device=GPU)
    assert x._buf.is_cuda and x.device == GPU
    y = xp.sum(xp.exp(x) * 2, axis=0)
    np.testing.assert_allclose(y.numpy(), (np.exp(np.arange(6.0).reshape(2, 3)) * 2).sum(0), rtol=1e-12)
    assert xp.zeros((2,), dtype=D.bfloat16, device=GPU)._buf.is_cuda


def test_cuda_dlpack_shares_memory():
    src = torch.arange(4.0, device="cuda:0")
    t = xp.from_dlpack(src, device=GPU)
    assert t._buf.data_ptr() == src.data_ptr()
    src[0] = 5.0
    assert float(t[0]) == 5.0
    assert torch.from_dlpack(t).data_ptr() == src.data_ptr()
    assert t.__dlpack_device__() == (2, 0)  # kDLCUDA


def test_cpu_and_cuda_do_not_mix():
    with pytest.raises(DeviceError, match="to_device"):
        lax.add(xp.ones((2,), device="torch:cpu"), xp.ones((2,), device=GPU))
    with pytest.raises(DeviceError, match="torch:cuda:0"):
        xp.from_dlpack(torch.zeros(2, device="cuda:0"), device="torch:cpu")


def test_integer_dot_general_on_cuda():
    rng = np.random.default_rng(9)
    a, b = rng.integers(-100, 100, (3, 4, 5)), rng.integers(-100, 100, (3, 5, 2))
    for dtype in (np.int8, np.int64):
        lhs, rhs = xp.asarray(a.astype(dtype), device=GPU), xp.asarray(b.astype(dtype), device=GPU)
        out = lax.dot_general(lhs, rhs, contracting_dims=((2,), (1,)), batch_dims=((0,), (0,)))
        np.testing.assert_array_equal(out.numpy(), np.matmul(a.astype(dtype), b.astype(dtype)))


def test_float32_convolution_keeps_float32_precision():
    rng = np.random.default_rng(10)
    lhs, rhs = rng.standard_normal((2, 8, 16, 16)), rng.standard_normal((4, 8, 3, 3))
    out = lax.conv_general(xp.asarray(lhs.astype(np.float32), device=GPU),
                           xp.asarray(rhs.astype(np.float32), device=GPU), padding=((1, 1), (1, 1)))
    want = conv_values(lhs, rhs, window_strides=(1, 1), padding=((1, 1), (1, 1)), lhs_dilation=(1, 1),
                       rhs_dilation=(1, 1), feature_group_count=1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_grad_on_cuda():
    x = xp.asarray(np.linspace(-1, 1, 5), device=GPU)
    g = ad.grad(lambda v: xp.sum(xp.sin(v) * v))(x)
    assert g.device == GPU
    v = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(g.numpy(), np.sin(v) + v * np.cos(v), rtol=1e-12)


def test_cuda_tensor_into_cpu_device_is_a_device_error():
    with pytest.raises(DeviceError, match=r"cuda:0.*device='torch:cuda:0'"):
        xp.from_dlpack(torch.zeros(2, device="cuda:0"), device="torch:cpu")


def test_cuda_device_telemetry_contract():
    tel = TorchBackend().telemetry("cuda:0")
    assert isinstance(tel, EnergyTelemetry) and isinstance(tel.measured, bool) and tel.source
    assert tel.energy_consumed_joules() >= 0.0
    tel.reset_counters()
    assert tel.energy_consumed_joules() >= 0.0
