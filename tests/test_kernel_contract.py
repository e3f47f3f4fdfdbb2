"""The kernel contract: a kernel that raises surfaces as a KernelError naming primitive, backend
and device; a result that does not match the abstract eval is one too, on the first call of
each dispatch signature always and on every call with kernel checks on."""

from __future__ import annotations

import numpy as np
import pytest

import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import BackendPlugin, Broken
from tenferro_core.errors import KernelError, KernelMemoryError, LinAlgError, TenferroError
from tenferro_runtime import Runtime, lax, use_runtime
from tenferro_runtime import array_api as xp


def _raise(exc):
    def kernel(*args, **params):
        raise exc
    return kernel


BAD = {
    "exp": lambda x: np.zeros(2 * x.size),           # 6 elements for a float64[3] result
    "sin": lambda x: x.astype(np.float32),            # wrong dtype
    "cos": lambda x: list(x),                         # not a buffer of the backend
    "sinh": lambda x: None,                           # no buffer at all
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


@pytest.mark.parametrize("fn", [xp.exp, xp.sin, xp.cos, xp.sinh, lambda x: lax.reduce_sum(x, axes=(0,)),
                                lax.exp, lambda x: xp.sin(x[::2])],
                         ids=["shape", "dtype", "list", "None", "params-path", "lax", "strided"])
def test_a_wrong_result_is_caught_on_the_first_call_always(broken, fn):
    """Checks on or off, the first call of a signature compares the result with the abstract
    eval: a wrong shape, dtype, a list or None never spreads; a second call raises again
    (the failed check stored no kernel as trusted)."""
    _, x = broken
    for _ in range(2):
        with pytest.raises(KernelError, match=r"on backend 'broken' \(device broken:cpu\) returned"):
            fn(x)


def _right_then_wrong():
    calls = []

    def kernel(x):
        calls.append(1)
        return np.exp(x) if len(calls) == 1 else np.zeros(2 * x.size)
    return kernel, calls


def test_later_calls_pay_nothing_unless_checks_are_on():
    """After a first result passed, the dispatch entry holds the plain kernel (no wrapper):
    a kernel that turns wrong later is trusted unless kernel checks are on."""
    kernel, calls = _right_then_wrong()
    rt = Runtime([numpy_plugin, BackendPlugin(Broken({"exp": kernel}))], check_kernels=False)
    with use_runtime(rt):
        x = xp.asarray([1.0, 2.0, 3.0], device="broken:cpu")
        np.testing.assert_allclose(xp.exp(x).numpy(), np.exp(x.numpy()))
        entry = x.device.dispatch(_prim("exp"), x.aval)
        assert entry[0] is kernel  # the check replaced itself with the kernel
        assert xp.exp(x)._buf.shape == (6,)  # trusted from now on: checking each call is opt-in
        rt.set_check_kernels(True)
        with pytest.raises(KernelError):
            xp.exp(x)


def _prim(name):
    from tenferro_core import catalog

    return catalog.BY_NAME[name]


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
    kernel, calls = _right_then_wrong()
    rt = Runtime([numpy_plugin, BackendPlugin(Broken({"exp": kernel}))], check_kernels=False)
    with use_runtime(rt):
        x = xp.asarray([1.0, 2.0, 3.0], device="broken:cpu")
        xp.exp(x)  # the first call checked, then cached plain
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
    assert "= f0(" in plan.source() and "_failed(_prims[k]" in plan.source()
