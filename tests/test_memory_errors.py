"""An allocation failure is one typed error on every backend: `KernelMemoryError`, a
KernelError that is also a builtin `MemoryError` (DESIGN section 9). NumPy raises MemoryError,
torch raises RuntimeError from its CPU allocator and `torch.OutOfMemoryError` on CUDA; all of
them, from kernels (creation functions included) and host transfers, become the typed error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import BackendPlugin, TwinBackend
from tenferro_core import dtypes as D
from tenferro_core.errors import KernelError, KernelMemoryError
from tenferro_runtime import Runtime, use_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.kernels import is_out_of_memory

TORCH_CPU_OOM = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
                 "memory: you tried to allocate 52776558133248 bytes. Error code 12 (Cannot allocate memory)")
CUDA_OOM = "CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.11 GiB total capacity)"


class OutOfMemoryError(RuntimeError):
    """Stands in for torch.OutOfMemoryError (matched by class name and module, not imported)."""


OutOfMemoryError.__module__ = "torch.cuda"


def _raise(exc):
    def kernel(*args, **params):
        raise exc
    return kernel


RAISING = [
    MemoryError("Unable to allocate 8.00 PiB for an array"),
    RuntimeError(TORCH_CPU_OOM),
    RuntimeError("not enough memory: you tried to allocate 64GB. Buy new RAM!"),
    RuntimeError(CUDA_OOM),
    OutOfMemoryError(CUDA_OOM),
]


@pytest.mark.parametrize("exc", RAISING, ids=lambda e: type(e).__name__ + ":" + str(e)[:24])
def test_an_allocator_error_from_any_backend_is_a_kernel_memory_error(exc):
    bad = {"log": _raise(exc), "broadcast_in_dim": _raise(exc), "full": _raise(exc)}

    class Oom(TwinBackend):
        def kernels(self):
            return {**super().kernels(), **bad}

    rt = Runtime([numpy_plugin, BackendPlugin(Oom("oom"))])
    with use_runtime(rt):
        x = xp.asarray([0.5, 1.0], device="oom:cpu")
        for call in (lambda: xp.log(x), lambda: xp.zeros((3, 4), device="oom:cpu"),
                     lambda: xp.full((2,), 7.0, device="oom:cpu")):
            with pytest.raises(MemoryError, match="could not allocate memory") as info:
                call()
            assert isinstance(info.value, KernelMemoryError) and isinstance(info.value, KernelError)
            assert info.value.__cause__ is exc
            assert "on backend 'oom' (device oom:cpu)" in str(info.value)
        np.testing.assert_array_equal(np.asarray(x), [0.5, 1.0])  # the input is untouched


@pytest.mark.parametrize("exc", [RuntimeError("device lost"), ValueError("out of range"),
                                 TypeError("memory")], ids=str)
def test_other_kernel_errors_are_not_memory_errors(exc):
    assert not is_out_of_memory(exc)


def test_torchs_own_out_of_memory_class_is_recognised():
    torch = pytest.importorskip("torch")
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError(TORCH_CPU_OOM))


def test_a_real_huge_allocation_on_numpy_cpu_is_a_memory_error():
    # 8 PiB: beyond the 47-bit user address space of x86-64 and aarch64, so the allocator
    # refuses at once (no swapping, whatever the overcommit setting).
    with pytest.raises(KernelMemoryError, match=r"'broadcast_in_dim'|'full'|could not allocate"):
        xp.zeros((2**40, 2**10), device="numpy:cpu")
    with pytest.raises(MemoryError):
        xp.ones((2**40, 2**10), dtype=D.float32, device="numpy:cpu")


def test_a_real_huge_allocation_on_torch_cpu_is_a_memory_error():
    pytest.importorskip("tenferro_torch")
    with pytest.raises(KernelMemoryError, match="could not allocate memory") as info:
        xp.zeros((2**40, 2**10), device="torch:cpu")
    assert isinstance(info.value.__cause__, RuntimeError)  # torch's allocator error, chained
    assert "Exception raised from" not in str(info.value)  # torch's C++ stack is left out
    with pytest.raises(MemoryError):
        xp.full((2**40, 2**10), 1.5, device="torch:cpu")


def test_a_host_transfer_that_cannot_allocate_is_a_memory_error(monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("tenferro_torch")

    def from_numpy(array):
        raise RuntimeError(TORCH_CPU_OOM)

    monkeypatch.setattr(torch, "from_numpy", from_numpy)
    with pytest.raises(KernelMemoryError, match=r"from_host .* torch:cpu could not allocate memory"):
        xp.asarray(np.ones(3), device="torch:cpu")
    monkeypatch.undo()
    np.testing.assert_array_equal(np.asarray(xp.asarray(np.ones(3), device="torch:cpu")), np.ones(3))


def test_a_host_copy_that_cannot_allocate_is_a_memory_error(monkeypatch):
    pytest.importorskip("tenferro_torch")
    from tenferro_torch import backend as tb

    ro = np.ones(3)
    ro.flags.writeable = False  # from_host copies a read-only array before torch.from_numpy

    class NoMemory(np.ndarray):
        def copy(self, *args, **kwargs):
            raise MemoryError("Unable to allocate 8.00 PiB")

    with pytest.raises(KernelMemoryError, match="could not allocate memory"):
        tb.TorchBackend().from_host(ro.view(NoMemory), "cpu")


def test_bfloat16_repr_without_ml_dtypes():
    pytest.importorskip("tenferro_torch")
    code = textwrap.dedent("""
        import sys
        sys.modules["ml_dtypes"] = None  # unimportable
        from tenferro_core import dtypes as D
        from tenferro_runtime import array_api as xp
        x = xp.astype(xp.asarray([1.5, 2.0, -3.25], device="torch:cpu"), D.bfloat16)
        print(repr(x)); print(str(x)); print(repr(x[0])); print(str(x[:0]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "Tensor([ 1.5 ,  2.  , -3.25], dtype=bfloat16, device='torch:cpu')"
    assert lines[1] == "[ 1.5   2.   -3.25]"
    assert lines[2] == "Tensor(1.5, dtype=bfloat16, device='torch:cpu')"
    assert lines[3] == "[]"


@pytest.mark.parametrize("source", ["list", "cast", "copy"])
def test_asarray_host_side_copies_that_cannot_allocate_are_memory_errors(monkeypatch, source):
    import tenferro_runtime.array_api._creation as creation

    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 8.00 PiB for an array")

    if source == "list":
        monkeypatch.setattr(creation, "_host_from_python", no_memory)
        call = lambda: xp.asarray([1.0, 2.0])  # noqa: E731
    else:
        class NoMemory(np.ndarray):
            def astype(self, *args, **kwargs):
                no_memory()

            def copy(self, *args, **kwargs):
                no_memory()

        class Numpy:  # the module's numpy, whose asarray keeps the failing subclass
            def __getattr__(self, name):
                return getattr(np, name)

            def asarray(self, obj, *args, **kwargs):
                return np.asarray(obj, *args, **kwargs).view(NoMemory)

        monkeypatch.setattr(creation, "np", Numpy())
        data = np.ones(3)
        call = (lambda: xp.asarray(data, dtype=xp.float32)) if source == "cast" else (  # noqa: E731
            lambda: xp.asarray(data, copy=True))
    with pytest.raises(KernelMemoryError, match=r"asarray \(a host-side copy of the data\).*could not "
                                                r"allocate memory") as err:
        call()
    assert isinstance(err.value, MemoryError) and isinstance(err.value.__cause__, MemoryError)
