"""torch backend specifics: device selection and discovery, lazy import of torch, dtype set,
the lazy kernel table and `specialize`."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import tenferro_numpy.plugin as numpy_plugin
import tenferro_torch.plugin as torch_plugin
from tenferro_core import catalog
from tenferro_core import dtypes as D
from tenferro_core.avals import Aval
from tenferro_core.errors import DeviceError
from tenferro_runtime import Runtime, default_device, default_runtime, lax
from tenferro_runtime import array_api as xp
from tenferro_torch import SUPPORTED, TorchBackend, discovery
from tenferro_torch.kernels import KERNELS as STUBS
from tenferro_torch.ops import KERNELS, specialize

DEVICE = "torch:cpu"


# ---- devices ----------------------------------------------------------------------


def test_numpy_stays_the_default_device(monkeypatch):
    monkeypatch.delenv("TENFERRO_DEVICE", raising=False)
    assert TorchBackend.priority < 0 and default_runtime().default_device() == "numpy:cpu"
    rt = Runtime([torch_plugin, numpy_plugin])  # load order does not matter, priority does
    assert rt.default_device() == "numpy:cpu"


def test_torch_alone_is_the_default():
    rt = Runtime([torch_plugin])
    assert rt.default_device() == DEVICE and rt.device("torch") == DEVICE


def test_selecting_torch(monkeypatch):
    monkeypatch.setenv("TENFERRO_DEVICE", DEVICE)
    x = xp.zeros((2,))
    assert x.device == DEVICE and isinstance(x._buf, torch.Tensor)
    monkeypatch.delenv("TENFERRO_DEVICE")
    with default_device(DEVICE):
        y = xp.asarray([1.0, 2.0]) * 3
    assert y.device == DEVICE and xp.asarray([1.0]).device == "numpy:cpu"
    np.testing.assert_array_equal(y.numpy(), [3.0, 6.0])


def test_missing_cuda_device_is_a_device_error():
    missing = f"torch:cuda:{torch.cuda.device_count()}"  # one past the last one there is
    with pytest.raises(DeviceError, match="has no device 'cuda:"):
        default_runtime().device(missing)
    with pytest.raises(DeviceError, match="cuda"):
        xp.zeros((2,), device=missing)


def test_devices_match_torch():
    ids = TorchBackend().devices()
    assert ids == ("cpu",) + tuple(f"cuda:{i}" for i in range(torch.cuda.device_count()))


@pytest.mark.parametrize(("env", "physical", "expected"), [
    (None, 2, 2), ("", 2, 0), ("1", 2, 1), ("0,1", 2, 2), ("1,0,5,0", 2, 2), ("2", 2, 0),
    ("0,-1,1", 2, 1), ("GPU-8a1b,MIG-77", 1, 2), ("0,junk,1", 4, 1), ("0,0", 2, 1),
])
def test_cuda_visible_devices_filter(env, physical, expected):
    assert discovery.visible_count(physical, env) == expected


def test_cuda_count_without_importing_torch(monkeypatch, tmp_path):
    """With torch not yet imported, a CUDA build counts the driver's GPUs, a CPU build none."""
    for i in range(3):
        (tmp_path / f"0000:0{i}:00.0").mkdir()
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(discovery, "NVIDIA_GPUS", tmp_path)
    monkeypatch.setattr(discovery.sys, "platform", "linux")
    monkeypatch.setattr(discovery, "torch_build", lambda: {"cuda": "12.4", "hip": None})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert discovery.cuda_device_count() == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert discovery.cuda_device_count() == 3
    monkeypatch.setattr(discovery, "NVIDIA_GPUS", tmp_path / "no-driver")
    assert discovery.cuda_device_count() == 0
    monkeypatch.setattr(discovery, "torch_build", lambda: {"cuda": None, "hip": None})
    assert discovery.cuda_device_count() == 0


def test_torch_build_is_read_not_imported():
    build = discovery.torch_build()
    assert build["__version__"] == torch.__version__
    assert build["cuda"] == torch.version.cuda and build["hip"] == torch.version.hip


# ---- lazy import --------------------------------------------------------------------

_LAZY = """
import sys
from tenferro_runtime import array_api as xp, default_runtime
rt = default_runtime()
assert "torch" in rt.backends, [r.error for r in rt.reports]
names = rt.device_names()
dev = rt.device("torch:cpu")
assert len(dev.kernels) >= 89 and dev.dtypes
xp.__array_namespace_info__().devices()
assert "torch" not in sys.modules, "torch was imported before the backend was used"
x = xp.asarray([1.0, 2.0], device="torch:cpu")
assert "torch" in sys.modules and float(xp.sum(x)) == 3.0
print(",".join(names))
"""


def test_torch_is_imported_on_first_use_only():
    out = subprocess.run([sys.executable, "-c", _LAZY], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "numpy:cpu" in out.stdout and DEVICE in out.stdout


def test_plugins_listing_does_not_import_torch():
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "tenferro_runtime", "plugins"],
                         capture_output=True, text=True, timeout=120)
    assert "backend torch (priority -1, 90 kernels)" in out.stdout and DEVICE in out.stdout
    modules = [line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if "|" in line]
    assert "tenferro_torch.backend" in modules  # the plugin was loaded
    assert not [m for m in modules if m == "torch" or m.startswith("torch.")]


# ---- dtypes -------------------------------------------------------------------------


def test_dtype_set():
    assert default_runtime().device(DEVICE).dtypes == SUPPORTED
    assert SUPPORTED == frozenset(D.ALL_DTYPES)  # uint16/32/64 emulated where torch lacks kernels
    assert D.bfloat16 in SUPPORTED and D.float16 in SUPPORTED


@pytest.mark.parametrize("make", [
    lambda: xp.asarray(np.arange(3, dtype=np.uint16), device=DEVICE),
    lambda: xp.zeros((2,), dtype=D.uint32, device=DEVICE),
    lambda: lax.full(shape=(2,), fill_value=1, dtype=D.uint64, device=DEVICE),
    lambda: lax.iota(dtype=D.uint16, shape=(2,), dimension=0, device=DEVICE),
    lambda: lax.convert(xp.asarray([1, 2], device=DEVICE), new_dtype=D.uint32),
    lambda: xp.asarray([1, 2], device="numpy:cpu", dtype=D.uint64).to_device(DEVICE),
], ids=["asarray", "zeros", "full", "iota", "convert", "to_device"])
def test_wide_unsigned_dtypes_are_created_on_torch_cpu(make):
    t = make()
    assert t.device.name == DEVICE and t.dtype.name in ("uint16", "uint32", "uint64")
    assert str(t._buf.dtype) == f"torch.{t.dtype.name}"


def test_bfloat16_host_round_trip():
    host = np.array([[1.5, -2.0], [np.inf, 3.25]], dtype=D.bfloat16.numpy)
    t = xp.asarray(host, device=DEVICE)
    assert t.dtype is D.bfloat16 and t._buf.dtype is torch.bfloat16
    back = t.numpy()
    assert back.dtype == D.bfloat16.numpy and back.tobytes() == host.tobytes()
    np.testing.assert_array_equal(lax.transpose(t, permutation=(1, 0)).numpy().astype(np.float32),
                                  host.T.astype(np.float32))


def test_host_arrays_share_memory_unless_read_only():
    a = np.arange(4.0)
    t = xp.asarray(a, device=DEVICE)
    a[0] = 7.0  # the same contract as numpy:cpu: asarray of a NumPy array does not copy
    assert float(t[0]) == 7.0
    ro = np.broadcast_to(np.arange(3.0), (2, 3))  # read-only and zero-strided
    r = xp.asarray(ro, device=DEVICE)
    np.testing.assert_array_equal(r.numpy(), ro)


# ---- kernel table --------------------------------------------------------------------


def test_every_primitive_has_a_torch_kernel():
    names = {p.name for p in catalog.PRIMITIVES}
    assert set(KERNELS) == names and set(STUBS) == names | {"fused"}  # fused: compiled groups
    dev = default_runtime().device(DEVICE)
    assert all(dev.kernels[p] is STUBS[p.name] for p in catalog.PRIMITIVES)


def test_stub_calls_the_real_kernel():
    x = torch.tensor([-1.5, 0.0, float("nan")])
    out = STUBS["sign"](x)
    assert STUBS["sign"].torch_primitive == "sign"
    np.testing.assert_array_equal(out.numpy(), [-1.0, 0.0, np.nan])


def test_specialize_picks_the_kind_implementation():
    backend = TorchBackend()
    f64, i32 = Aval((2,), D.float64), Aval((2,), D.int32)
    assert backend.specialize("add", STUBS["add"], (f64, f64), (f64,)) is torch.add
    assert backend.specialize("floor", STUBS["floor"], (f64,), (f64,)) is torch.floor
    assert backend.specialize("div", STUBS["div"], (f64, f64), (f64,)) is torch.div
    idiv = backend.specialize("div", STUBS["div"], (i32, i32), (i32,))
    assert idiv is KERNELS["div"].by_kind["i"]
    np.testing.assert_array_equal(idiv(torch.tensor([7, -7, 5]), torch.tensor([2, 2, 0])).numpy(), [3, -3, 0])
    assert specialize("reshape", (f64,), (f64,)) is KERNELS["reshape"]

    def foreign(x):
        return x

    assert backend.specialize("add", foreign, (f64, f64), (f64,)) is foreign


def test_no_torch_warnings_from_kernels():
    z = xp.asarray(np.array([1 + 2j, -3j]), device=DEVICE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when casting complex to real
        np.testing.assert_array_equal(lax.convert(z, new_dtype=D.float32).numpy(), [1.0, 0.0])
        np.testing.assert_array_equal(lax.convert(z, new_dtype=D.int8).numpy(), [1, 0])
        np.testing.assert_array_equal(lax.convert(z, new_dtype=D.bool_).numpy(), [True, True])
