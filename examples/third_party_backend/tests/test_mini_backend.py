"""What is specific to mini: discovery, its buffers, dtypes, DLPack, missing kernels, energy, AD.

Run once the package is installed (see tests/test_third_party_backend_example.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from tenferro_core import catalog
from tenferro_core.errors import DTypeError, MissingKernelError
from tenferro_core.plugins import hookimpl
from tenferro_runtime import Runtime, default_runtime, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.testing.conformance import context, probe_tensors

from tenferro_mini import KERNEL_NAMES, MiniBackend, MiniBuffer
from tenferro_mini.backend import JOULES_PER_BYTE, JOULES_PER_FLOP

MINI = "mini:cpu"
MISSING = sorted(p.name for p in catalog.PRIMITIVES if p.name not in KERNEL_NAMES)


@pytest.fixture
def dev():
    return default_runtime().device(MINI)


def test_discovered_through_entry_points():
    alone = Runtime.from_entry_points(allow=["mini"])
    assert alone.device_names() == [MINI]
    assert alone.default_device() == MINI  # the only backend
    (report,) = [r for r in alone.reports if r.name == "mini"]
    assert report.ok and report.distribution == "tenferro-mini"
    assert report.registered == ["backend mini (priority -10, 33 kernels)"]
    both = Runtime.from_entry_points(allow=["mini", "numpy"])
    assert both.default_device() == "numpy:cpu"  # mini runs only when asked for
    assert set(both.device_names()) == {"numpy:cpu", MINI}


def test_kernel_table_is_the_declared_subset(dev):
    assert {p.name for p in dev.kernels} == KERNEL_NAMES
    assert len(KERNEL_NAMES) == 33 and KERNEL_NAMES <= set(catalog.BY_NAME)


def test_buffers_are_mini_buffers_uploaded_by_copy_and_immutable(dev):
    host = np.arange(6.0).reshape(2, 3)
    t = xp.asarray(host, device=MINI)
    host[0, 0] = 100.0  # the upload copied: the tensor keeps its value
    assert type(t._buf) is MiniBuffer and t._buf.shape == (2, 3)
    assert dev.backend.describe(t._buf) == ((2, 3), xp.float64)
    out = xp.permute_dims(t, (1, 0)) * 2.0
    assert type(out._buf) is MiniBuffer and out.device == MINI
    np.testing.assert_array_equal(out.numpy(), np.arange(6.0).reshape(2, 3).T * 2)
    view = t.numpy()
    assert not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0, 0] = 1.0


@given(
    m=st.integers(0, 4), k=st.integers(0, 4), n=st.integers(0, 4),
    dtype=st.sampled_from([np.float32, np.float64, np.int32, np.int64]), data=st.data(),
)
def test_small_array_api_program_matches_numpy(m, k, n, dtype, data):
    """`x @ y + 1`, `sum`, `where`, `max`: the runtime lowers them to mini's primitives only."""
    values = st.integers(-50, 50) if np.dtype(dtype).kind == "i" else st.floats(-50, 50, width=32)
    a = data.draw(arrays(dtype, (m, k), elements=values))
    b = data.draw(arrays(dtype, (k, n), elements=values))
    x, y = xp.asarray(a, device=MINI), xp.asarray(b, device=MINI)

    z = x @ y + 1
    w = xp.where(z > 0, z, -z)
    expected = a @ b + dtype(1)
    assert (z.dtype.name, z.shape, z.device) == (np.dtype(dtype).name, (m, n), MINI)
    tol = {"rtol": 1e-5, "atol": 1e-3} if dtype is np.float32 else {"rtol": 1e-12, "atol": 1e-9}
    np.testing.assert_allclose(z.numpy(), expected, **tol)
    np.testing.assert_allclose(w.numpy(), np.where(expected > 0, expected, -expected), **tol)
    np.testing.assert_allclose(xp.sum(w, axis=0).numpy(), np.abs(expected).sum(axis=0), **tol)
    if m * n:
        np.testing.assert_allclose(float(xp.max(z)), expected.max(), **tol)


@pytest.mark.parametrize("prim_name", MISSING)
def test_primitive_without_kernel_is_a_missing_kernel_error(dev, prim_name):
    tensors, params = probe_tensors(prim_name, context(dev))
    before = [t.numpy().copy() for t in tensors]
    with pytest.raises(MissingKernelError, match=f"backend 'mini' has no kernel for '{prim_name}'") as err:
        catalog.BY_NAME[prim_name].bind(*tensors, **params)
    assert "backends that have it: [" in str(err.value) and "'numpy'" in str(err.value)
    for t, values in zip(tensors, before):
        np.testing.assert_array_equal(t.numpy(), values)


def test_missing_kernel_through_the_array_api_and_its_remedy():
    x = xp.asarray([0.0, 1.0], device=MINI)
    with pytest.raises(MissingKernelError, match=r"no kernel for 'sin'.*'numpy'.*\.to_device\(\)"):
        xp.sin(x)
    y = xp.sin(x.to_device("numpy:cpu")).to_device(MINI)  # the fix the message names
    assert y.device == MINI and type(y._buf) is MiniBuffer
    np.testing.assert_allclose(y.numpy(), np.sin([0.0, 1.0]), rtol=1e-15)


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "float16", "int8", "uint8", "uint64"])
def test_unsupported_dtypes_are_dtype_errors(dtype):
    with pytest.raises(DTypeError, match=f"device mini:cpu does not support {dtype}"):
        xp.asarray(np.zeros(2, dtype=dtype), device=MINI)
    with pytest.raises(DTypeError, match=f"mini:cpu does not support dtype {dtype}"):
        xp.from_dlpack(np.zeros(2, dtype=dtype), device=MINI)
    with pytest.raises(DTypeError, match=f"device mini:cpu does not support dtype {dtype}"):
        xp.astype(xp.asarray([1.0, 2.0], device=MINI), dtype)


def test_dlpack_shares_the_wrapped_array():
    host = np.arange(4.0)
    t = xp.from_dlpack(host, device=MINI)  # shares memory with the producer
    assert type(t._buf) is MiniBuffer and np.shares_memory(t._buf.array, host)
    back = np.from_dlpack(t)  # DLPack >= 1.0 consumer: shared, flagged read-only
    assert np.shares_memory(back, host) and not back.flags.writeable
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU, device 0
    legacy = np.from_dlpack(_Legacy(t))  # a pre-1.0 consumer cannot be told "read-only": a copy
    assert not np.shares_memory(legacy, host)
    np.testing.assert_array_equal(legacy, host)
    with pytest.raises(BufferError):
        t.__dlpack__(copy=False)


class _Legacy:
    """A DLPack producer facade that asks the old (unversioned) protocol of a tensor."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_energy_is_an_estimate_charged_per_kernel():
    backend = MiniBackend()  # a fresh meter, in a runtime of its own
    with use_runtime(Runtime([_Plugin(backend)])):
        meter = backend.telemetry("cpu")
        assert meter.measured is False and meter.source == "cost-model"
        x = xp.asarray(np.ones((3, 4)), device=MINI)
        y = xp.asarray(np.ones((4, 5)), device=MINI)
        meter.reset_counters()
        assert meter.energy_consumed_joules() == 0.0
        xp.matmul(x, y)
        flops, moved = 2 * 3 * 4 * 5, (12 + 20 + 15) * 8
        assert math.isclose(meter.energy_consumed_joules(), flops * JOULES_PER_FLOP + moved * JOULES_PER_BYTE)
        assert meter.power_draw_watts() is None and meter.temperature_celsius() is None


class _Plugin:
    """Registers one given backend object (a runtime with a fresh meter)."""

    def __init__(self, backend):
        self.backend = backend

    @hookimpl
    def tenferro_register(self, registry):
        registry.add_backend(self.backend)


def test_gradients_run_on_mini():
    """AD rules are written with core primitives, so they run on mini's 33 kernels as they are."""
    from tenferro_ad.testing import check_grads

    rng = np.random.default_rng(0)
    x = xp.asarray(rng.standard_normal((3, 4)), device=MINI)
    y = xp.asarray(rng.standard_normal((4, 3)), device=MINI)
    check_grads(lambda a, b: xp.sum(xp.where(a @ b > 0, a @ b, 0.5 * (a @ b)) * (a @ b)), (x, y), order=2)
