"""The kernel contract: a kernel that raises surfaces as a KernelError naming primitive, backend
and device; with kernel checks on, a result that does not match the abstract eval is one too."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import BackendPlugin, TwinBackend
from tenferro_core.errors import KernelError, KernelMemoryError, LinAlgError, TenferroError
from tenferro_runtime import Runtime, lax, use_runtime
from tenferro_runtime import array_api as xp


class Broken(TwinBackend):
    """A NumPy backend whose kernels for a few primitives misbehave on purpose."""

    def __init__(self, bad: dict):
        super().__init__("broken")
        self._bad = bad

    def kernels(self):
        return {**super().kernels(), **self._bad}


def _raise(exc):
    def kernel(*args, **params):
        raise exc
    return kernel


BAD = {
    "exp": lambda x: np.zeros(2 * x.size),           # 6 elements for a float64[3] result
    "sin": lambda x: x.astype(np.float32),            # wrong dtype
    "cos": lambda x: list(x),                         # not a buffer of the backend
    "tanh": _raise(RuntimeError("device lost")),
    "log": _raise(MemoryError("out of memory")),
    "sqrt": _raise(LinAlgError("typed errors pass through")),
    "reduce_sum": lambda x, *, axes: np.zeros(7),     # wrong shape, through the params path
}


@pytest.fixture(params=[True, False], ids=["checked", "unchecked"])
def broken(request):
    rt = Runtime([numpy_plugin, BackendPlugin(Broken(BAD))], check_kernels=request.param)
    with use_runtime(rt):
        yield rt, xp.asarray([0.5, 1.0, 2.0], device="broken:cpu")


@pytest.mark.parametrize("fn", [xp.exp, xp.sin, xp.cos, lambda x: lax.reduce_sum(x, axes=(0,))],
                         ids=["shape", "dtype", "buffer", "params-path"])
def test_a_wrong_result_is_caught_when_checks_are_on(broken, fn):
    rt, x = broken
    if not rt.check_kernels:
        fn(x)  # trusted: checking costs a describe() per call, so it is opt-in outside tests
        return
    with pytest.raises(KernelError, match=r"on backend 'broken' \(device broken:cpu\) returned"):
        fn(x)


def test_a_raising_kernel_is_a_kernel_error_with_the_cause_chained(broken):
    _, x = broken
    with pytest.raises(KernelError, match=r"'tanh' on backend 'broken' \(device broken:cpu\) "
                                          r"raised RuntimeError: device lost") as info:
        xp.tanh(x)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, TenferroError)
    with pytest.raises(KernelError, match="device lost"):  # the same through lax (slow path)
        lax.tanh(x)


def test_an_allocation_failure_is_also_a_memory_error(broken):
    _, x = broken
    with pytest.raises(MemoryError) as info:
        xp.log(x)
    assert isinstance(info.value, KernelMemoryError)


def test_a_kernels_own_typed_error_passes_through(broken):
    _, x = broken
    with pytest.raises(LinAlgError, match="typed errors pass through"):
        xp.sqrt(x)


def test_good_kernels_pass_the_checks():
    rt = Runtime([numpy_plugin], check_kernels=True)
    with use_runtime(rt):
        x = xp.asarray(np.arange(6.0).reshape(2, 3))
        assert float(xp.sum(xp.exp(x) * x)) == pytest.approx(float(np.sum(np.exp(np.arange(6.0)) *
                                                                     np.arange(6.0))))
        np.testing.assert_array_equal(xp.sort(-x, axis=1).numpy(), np.sort(-x.numpy(), axis=1))


def test_turning_checks_on_later_applies_to_cached_signatures():
    rt = Runtime([numpy_plugin, BackendPlugin(Broken(BAD))], check_kernels=False)
    with use_runtime(rt):
        x = xp.asarray([1.0, 2.0, 3.0], device="broken:cpu")
        xp.exp(x)  # cached unchecked
        rt.set_check_kernels(True)
        with pytest.raises(KernelError):
            xp.exp(x)


def test_compiled_plans_keep_the_contract(broken):
    """A plan's generated code reports the failing step's primitive, and typed errors pass."""
    from tenferro_runtime import compile

    _, x = broken
    f = compile(lambda v: xp.tanh(xp.abs(v) + 1.0) * 2.0, passes=())
    with pytest.raises(KernelError, match=r"'tanh' on backend 'broken'.*device lost") as info:
        f(x)
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(LinAlgError, match="typed errors pass through"):
        compile(lambda v: xp.sqrt(v) + 1.0, passes=())(x)
    plan = f._cache[next(iter(f._cache))][0].executable().plan
    assert "= f0(" in plan.source() and "_kernel_error(_prims[k]" in plan.source()
