"""Devices, dispatch errors, the abstract-eval cache and default-device selection."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import BackendPlugin, TwinBackend
from tenferro_core import catalog, dtypes
from tenferro_core.errors import ArgumentError, DeviceError, DTypeError, ShapeError
from tenferro_runtime import Device, Runtime, default_device, lax, use_runtime
from tenferro_runtime.array_api import asarray
from tenferro_runtime.caches import LRUCache


@pytest.fixture
def two_backends():
    rt = Runtime([numpy_plugin, BackendPlugin(TwinBackend("twin"))])
    with use_runtime(rt):
        yield rt


def test_device_names_and_objects(two_backends):
    rt = two_backends
    x = asarray([1.0, 2.0], device="twin:cpu")
    assert isinstance(x.device, Device) and x.device == "twin:cpu" and str(x.device) == "twin:cpu"
    y = asarray([1.0, 2.0], device=rt.device("numpy:cpu"))
    assert y.device is rt.device("numpy") and repr(y.device) == "Device('numpy:cpu')"


def test_unknown_backend_and_device_ids(two_backends):
    with pytest.raises(DeviceError, match="unknown backend 'cuda'.*installed backends"):
        asarray([1.0], device="cuda:0")
    with pytest.raises(DeviceError, match="no device 'gpu7'"):
        asarray([1.0], device="numpy:gpu7")
    with pytest.raises(DeviceError, match="expected a device name"):
        asarray([1.0], device=3.5)


def test_mixing_devices_says_how_to_move(two_backends):
    a = asarray([1.0, 2.0], device="numpy:cpu")
    b = asarray([3.0, 4.0], device="twin:cpu")
    with pytest.raises(DeviceError, match=r"to_device\('numpy:cpu'\)"):
        lax.add(a, b)
    moved = b.to_device("numpy:cpu")
    assert moved.device == "numpy:cpu" and b.device == "twin:cpu"
    assert lax.add(a, moved).numpy().tolist() == [4.0, 6.0]


def test_default_device_env_and_context(two_backends, monkeypatch):
    assert asarray([1]).device == "numpy:cpu"
    monkeypatch.setenv("TENFERRO_DEVICE", "twin:cpu")
    assert asarray([1]).device == "twin:cpu"
    with default_device("numpy:cpu"):
        assert asarray([1]).device == "numpy:cpu"
    assert asarray([1]).device == "twin:cpu"


def test_unsupported_dtype_is_a_clear_error(two_backends):
    x = asarray([1.0, 2.0])
    with pytest.raises(DTypeError, match="does not support dtype bfloat16"):
        lax.convert(x, new_dtype=dtypes.bfloat16)
    with pytest.raises(DTypeError, match="bfloat16"):
        asarray([1.0], dtype="bfloat16")


def test_non_tensor_operands_and_bad_params(two_backends):
    x = asarray([1.0, 2.0])
    with pytest.raises(ArgumentError, match="operand 1 must be a tenferro Tensor, got list"):
        lax.add(x, [1.0, 2.0])
    with pytest.raises(ArgumentError, match="unknown parameter"):
        lax.add(x, x, axis=0)
    with pytest.raises(ArgumentError, match="missing required parameter 'axes'"):
        lax.reduce_sum(x)
    with pytest.raises(ArgumentError, match="expects a sequence of ints"):
        lax.reduce_sum(x, axes=0.5)


def test_failed_op_leaves_inputs_and_cache_unchanged(two_backends):
    rt = two_backends
    x = asarray(np.arange(6.0).reshape(2, 3))
    before = rt.caches.stats()["dispatch[numpy:cpu]"]
    with pytest.raises(ShapeError):
        lax.reshape(x, new_sizes=(4, 2))
    after = rt.caches.stats()["dispatch[numpy:cpu]"]
    assert after.size == before.size and after.misses == before.misses + 1
    assert x.shape == (2, 3) and x.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_dispatch_cache_hits_and_bound(two_backends):
    rt = two_backends
    rt.caches.clear()
    x = asarray([1.0, 2.0])
    lax.add(x, x)
    lax.add(x, x)
    stats = rt.caches.stats()["dispatch[numpy:cpu]"]
    assert stats.misses == 1 and stats.hits == 1
    small = LRUCache("t", 2)
    for i in range(5):
        small.put(i, i)
    assert len(small) == 2 and small.evictions == 3 and list(small) == [3, 4]
    assert small.get_or_build(3, lambda: -1) == 3  # a hit makes 3 the most recently used
    small.put(5, 5)
    assert list(small) == [3, 5]
    assert small.get_or_build(6, lambda k: k, 6) == 6 and small.stats().misses == 1


def test_unhashable_params_are_normalized():
    with use_runtime(Runtime([numpy_plugin])):
        x = asarray(np.arange(6.0).reshape(2, 3))
        assert lax.reduce_sum(x, axes=[0, 1]).numpy() == 15.0
        assert lax.transpose(x, permutation=[1, 0]).shape == (3, 2)


def test_every_catalog_primitive_has_a_numpy_kernel():
    rt = Runtime([numpy_plugin])
    missing = [p.name for p in catalog.PRIMITIVES if p not in rt.device("numpy:cpu").kernels]
    assert missing == []


def test_op_with_payload_defaults_called_without_params_gets_them_every_time():
    """The no-params fast path must not skip an op's normalized default payload."""
    from tenferro_core.extension import define_op
    from tenferro_core.params import p_int
    from tenferro_core.plugins import hookimpl
    from tenferro_numpy import plugin as numpy_plugin
    from tenferro_runtime import Runtime, use_runtime
    from tenferro_runtime.array_api import asarray

    scale_p = define_op("test_runtime.scale.v1", lambda x, *, k: (x.shape, x.dtype),
                        payload={"k": (p_int, 3)})

    class Plugin:
        @hookimpl
        def tenferro_register(self, registry):
            registry.add_op(scale_p)
            registry.add_kernel("numpy", scale_p, lambda x, *, k: x * k)

    with use_runtime(Runtime([numpy_plugin, Plugin()])):
        x = asarray([1.0, 2.0])
        for _ in range(3):
            assert scale_p.bind(x).numpy().tolist() == [3.0, 6.0]


def test_a_cache_miss_builds_from_the_params_themselves(monkeypatch):
    """The exact parts of a dispatch key (type and repr of fill_value) stay out of the params
    the shape rule and the kernel choice see; -0.0 and 0.0 still get their own entries."""
    from tenferro_runtime import eager

    seen = []
    real = eager.prepare

    def spy(prim, avals, nparams, device):
        seen.append(dict(nparams))
        return real(prim, avals, nparams, device)

    monkeypatch.setattr(eager, "prepare", spy)
    with use_runtime(Runtime([numpy_plugin])):
        for v in (1.5, -0.0, 0.0):
            out = lax.full(shape=(2,), fill_value=v, dtype=dtypes.float64, device="numpy:cpu")
            assert np.signbit(out.numpy()).tolist() == [np.signbit(v)] * 2
    assert [p["fill_value"] for p in seen] == [1.5, -0.0, 0.0]
    assert all(type(p["fill_value"]) is float for p in seen)


def test_eager_front_tables_stay_bounded(monkeypatch):
    """The fast paths' {aval: kernel} tables are emptied when full; results stay right."""
    from tenferro_runtime import array_api as xp
    from tenferro_runtime import fast_paths

    monkeypatch.setattr(fast_paths, "FRONT_SIZE", 4)
    add = next(f for f in fast_paths._FRONTS if f.prim.name == "add")
    for n in range(1, 11):
        a = np.arange(n, dtype=np.float64)
        np.testing.assert_array_equal((xp.asarray(a) + xp.asarray(a)).numpy(), a + a)
        assert len(add.table) <= 4 and len(add.slow) <= 4
