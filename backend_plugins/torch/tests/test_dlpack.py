"""Zero-copy exchange with torch and NumPy, and the typed errors of bad exchanges."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DeviceError, DTypeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_device, lax

DEVICE = "torch:cpu"


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_from_torch_shares_memory_both_ways():
    src = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    t = xp.from_dlpack(src, device=DEVICE)
    assert (t.device, t.shape, t.dtype) == (DEVICE, (2, 3), D.float64)
    assert t._buf.data_ptr() == src.data_ptr()
    src[0, 0] = 42.0  # torch writes, tenferro sees it
    assert float(t[0, 0]) == 42.0
    back = torch.from_dlpack(t)
    assert back.data_ptr() == src.data_ptr()
    back[1, 2] = -1.0  # the exported tensor writes, the source and tenferro see it
    assert float(src[1, 2]) == -1.0 and float(t[1, 2]) == -1.0
    host = np.from_dlpack(t)
    assert _address(host) == src.data_ptr()  # no copy, but read-only: tensors are immutable
    with pytest.raises(ValueError, match="read-only"):
        host[0, 1] = 7.0  # NumPy reads DLPack's read-only flag
    assert float(src[0, 1]) == 1.0
    np.testing.assert_array_equal(t.numpy(), src.numpy())


def test_default_device_context_imports_onto_torch():
    src = torch.ones(3, dtype=torch.float32)
    with default_device(DEVICE):
        t = xp.from_dlpack(src)
        u = xp.asarray(src)  # asarray of a DLPack object goes through from_dlpack
    assert t.device == u.device == DEVICE
    assert t._buf.data_ptr() == u._buf.data_ptr() == src.data_ptr()


def test_without_device_a_torch_tensor_stays_on_torch_and_an_array_on_numpy():
    """from_dlpack(x) keeps x on the backend that claims its type (Backend.claims)."""
    src = torch.arange(4.0)
    t = xp.from_dlpack(src)
    assert t.device == DEVICE and t._buf.data_ptr() == src.data_ptr()
    src[0] = 42.0
    assert t.numpy()[0] == 42.0
    a = np.arange(3.0)
    n = xp.from_dlpack(a)
    assert n.device == "numpy:cpu" and np.shares_memory(n.numpy(), a)
    assert xp.from_dlpack(src, device="numpy:cpu").device == "numpy:cpu"


def test_copy_does_not_share():
    src = torch.arange(4, dtype=torch.int32)
    t = xp.from_dlpack(src, device=DEVICE, copy=True)
    src[0] = 9
    assert int(t[0]) == 0 and t._buf.data_ptr() != src.data_ptr()


def test_numpy_arrays_import_without_copy():
    a = np.arange(5.0)
    t = xp.from_dlpack(a, device=DEVICE)
    assert t._buf.data_ptr() == _address(a)
    a[4] = 0.5
    assert float(t[4]) == 0.5


@pytest.mark.parametrize("dtype", [torch.bool, torch.int8, torch.uint8, torch.int64, torch.float16,
                                   torch.bfloat16, torch.float32, torch.complex64, torch.complex128])
def test_every_dtype_round_trips_through_torch(dtype):
    src = torch.arange(6).reshape(3, 2).to(dtype)
    t = xp.from_dlpack(src, device=DEVICE)
    out = torch.from_dlpack(lax.transpose(t, permutation=(1, 0)))  # a strided view exports too
    assert out.dtype == dtype and torch.equal(out, src.T)


def test_computed_results_export():
    x = xp.asarray(np.arange(6.0).reshape(2, 3), device=DEVICE)
    row = lax.broadcast_in_dim(xp.asarray(np.arange(3.0), device=DEVICE), shape=(2, 3),
                               broadcast_dimensions=(1,))
    for t, want in ((x * 2, np.arange(6.0).reshape(2, 3) * 2), (x.mT, np.arange(6.0).reshape(2, 3).T),
                    (row, np.broadcast_to(np.arange(3.0), (2, 3))), (xp.sum(x), np.array(15.0)),
                    (xp.conj(x * 1j), -1j * np.arange(6.0).reshape(2, 3))):
        np.testing.assert_array_equal(np.from_dlpack(t), want)
        np.testing.assert_array_equal(torch.from_dlpack(t).numpy(), want)
        assert t.__dlpack_device__() == (1, 0)


def test_non_contiguous_torch_tensor_is_refused():
    src = torch.arange(6.0).reshape(2, 3).T
    with pytest.raises(ArgumentError, match=r"not contiguous.*\.contiguous\(\)"):
        xp.from_dlpack(src, device=DEVICE)
    t = xp.from_dlpack(src.contiguous(), device=DEVICE)
    np.testing.assert_array_equal(t.numpy(), src.numpy())


def test_tensor_requiring_grad_is_refused():
    src = torch.ones(3, requires_grad=True)
    with pytest.raises(ArgumentError, match=r"requires grad.*\.detach\(\)"):
        xp.from_dlpack(src, device=DEVICE)
    with pytest.raises(ArgumentError, match="detach"):
        xp.asarray(src, device=DEVICE)
    assert xp.from_dlpack(src.detach(), device=DEVICE)._buf.data_ptr() == src.data_ptr()


def test_lazy_conjugate_is_refused():
    src = torch.tensor([1 + 2j]).conj()
    with pytest.raises(ArgumentError, match="resolve_conj"):
        xp.from_dlpack(src, device=DEVICE)


def test_dtype_the_device_lacks():
    with pytest.raises(DTypeError, match=r"torch:cpu does not support torch.float8_e4m3fn"):
        xp.from_dlpack(torch.zeros(2, dtype=torch.float8_e4m3fn), device=DEVICE)


def test_cuda_device_without_cuda_is_a_device_error():
    missing = f"torch:cuda:{torch.cuda.device_count()}"
    with pytest.raises(DeviceError, match="has no device"):
        xp.from_dlpack(torch.zeros(2), device=missing)


def test_two_backends_in_one_op():
    a = xp.asarray([1.0, 2.0], device="numpy:cpu")
    b = xp.asarray([1.0, 2.0], device=DEVICE)
    with pytest.raises(DeviceError, match=r"one device.*to_device"):
        lax.add(a, b)
    with pytest.raises(DeviceError, match="to_device"):
        a + b
    moved = b.to_device("numpy:cpu")
    np.testing.assert_array_equal((a + moved).numpy(), [2.0, 4.0])
    assert (a.to_device(DEVICE) + b).device == DEVICE
