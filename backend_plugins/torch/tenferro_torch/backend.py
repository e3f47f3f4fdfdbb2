"""The torch backend: devices ``cpu`` and ``cuda:N``; buffers are torch tensors.

Nothing here imports torch at module level: registering the plugin, listing its devices
and building a Device object stay cheap, and torch is imported by the first transfer or
kernel call. Buffers are immutable by contract, so kernels may return views and
``from_dlpack`` / ``to_host`` share memory.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from tenferro_core import dtypes as D
from tenferro_core.backend import read_only_dlpack
from tenferro_core.energy import EnergyTelemetry
from tenferro_core.errors import ArgumentError, DeviceError, DTypeError

from .discovery import cuda_device_count

SUPPORTED = frozenset(D.ALL_DTYPES)
"""Every dtype: uint16/uint32/uint64, which torch stores but mostly cannot compute on, run
through emulating kernels (`tenferro_torch.ops.unsigned`)."""


OMP_SPIN_COUNT = "3000"
"""GOMP_SPINCOUNT for torch's OpenMP pool when tenferro imports torch (libgomp reads it once,
when torch loads it). libgomp's default, 300,000 pause loops (~10 ms), keeps idle workers
busy long after each parallel region: the next numpy:cpu step in the same process, or any
other busy process, then fights them for the cores, and next to a busy process a spinning
worker loses its wake-up priority (the torch:cpu MLP step 456 ms instead of 13 ms). Fewer
spins make each parallel region after a pause pay a futex wake-up: 1,000 (libgomp's count for
oversubscribed CPUs) cost the step 45% on an idle machine. 3,000 keeps the idle step within
~8% of libgomp's default, numpy and torch in one process within 10% of each alone, and the
step next to a busy process at 13 ms (docs/performance.md, "Threads"). Not applied where the
user set GOMP_SPINCOUNT or OMP_WAIT_POLICY, or imported torch first."""


_PENDING_THREADS: list[int] = []  # a `set_threads` made before torch was imported


def _torch() -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        torch = _import_torch()
    if _PENDING_THREADS:
        n = _PENDING_THREADS.pop()
        _PENDING_THREADS.clear()
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    return torch


def _storage_uses(storage: Any) -> int:
    """How many tensors (and storage objects) share `storage`; a large number where this
    torch cannot say (then nothing is donatable)."""
    count = getattr(sys.modules["torch"]._C, "_storage_Use_Count", None)
    return count(storage._cdata) if count is not None else 1 << 30


_OWN_USES = 2
"""`_storage_uses` of a tensor's storage that only that tensor holds (its TensorImpl and the
storage object asked), checked by the test of `donatable`."""


def _import_torch() -> Any:
    import os

    mine = not (os.environ.get("GOMP_SPINCOUNT") or os.environ.get("OMP_WAIT_POLICY"))
    if mine:
        os.environ["GOMP_SPINCOUNT"] = OMP_SPIN_COUNT
    try:
        import torch
    finally:
        if mine:  # read by libgomp's constructor; child processes keep their own default
            del os.environ["GOMP_SPINCOUNT"]
    return torch


def _raise_if_out_of_memory(what: str, device: str, exc: BaseException) -> None:
    """Raise the runtime's typed `KernelMemoryError` (chained to `exc`) when `exc` is an
    allocation failure (NumPy's MemoryError, torch's allocator RuntimeError or
    OutOfMemoryError)."""
    from tenferro_runtime.kernels import is_out_of_memory, memory_error

    if is_out_of_memory(exc):
        raise memory_error(what, f"torch:{device}", exc) from exc


class TorchBackend:
    """Backend ``torch``; priority -1 keeps ``numpy:cpu`` the default device."""

    name = "torch"
    priority = -1
    # The layout pass's hint, measured on CPU (3x3 conv, 32x64x32x32 float32, 2 threads):
    # 12-15 ms either way, the two transposes win nothing, and torch's layouts round differently.
    preferred_conv_layout = "channels_first"

    def __init__(self) -> None:
        self._telemetry: dict[str, EnergyTelemetry] = {}

    # ---- devices and kernels ---------------------------------------------
    def devices(self) -> tuple[str, ...]:
        return ("cpu",) + tuple(f"cuda:{i}" for i in range(cuda_device_count()))

    def supported_dtypes(self, device: str) -> frozenset:
        return SUPPORTED

    def kernels(self) -> Mapping[str, Any]:
        from .kernels import KERNELS

        return KERNELS

    def specialize(self, name: str, kernel: Any, in_avals: tuple, out_avals: tuple,
                   params: dict | None = None) -> Any:
        """The real torch kernel for this signature in place of the lazy stub (kernels other
        plugins registered for this backend are returned as they are); a `fused` group's
        code is generated here, once per group (fusion.py). On the CPU a small product, a
        small MKL VML function or a small group holding one runs on one intra-op thread
        (threads.py)."""
        if getattr(kernel, "torch_primitive", None) != name:
            return kernel
        _torch()  # imported with this backend's settings
        from .threads import sized

        if name == "fused" and params:
            from .fusion import specialized

            return sized(specialized(params["graph"]), name, in_avals, out_avals, params)
        from .ops import specialize

        return sized(specialize(name, in_avals, out_avals, params), name, in_avals, out_avals, params)

    def out_kernel(self, name: str, kernel: Any) -> Any:
        """`fn(*bufs, out, **params)` writing a `fused` group's or a product's result into a
        dead buffer the plan gives (fusion.fused_out, reductions.dot_out): a parameter
        update into its donated or dead gradient's buffer instead of a new tensor."""
        if getattr(kernel, "torch_primitive", None) != name:
            return None  # another plugin's kernel for this backend
        if name == "fused":
            from .fusion import fused_out

            return fused_out
        if name == "dot_general":
            from .ops.reductions import dot_out

            return dot_out
        return None

    def donatable(self, buf: Any, others: int) -> bool:
        """True when a donated input's tensor may be overwritten: nothing beyond the executor
        holds it (`others` is 0), it is no view, no other tensor shares its storage, and
        torch allocated that storage (a `torch.from_numpy` tensor shares the caller's
        NumPy array: not resizable)."""
        if others > 0 or buf._base is not None or buf.requires_grad:
            return False
        storage = buf.untyped_storage()
        return storage.resizable() and _storage_uses(storage) <= _OWN_USES

    def set_threads(self, n: int) -> None:
        """Use at most `n` threads in torch's intra-op pool (OpenMP, MKL, oneDNN):
        `torch.set_num_threads` (process-wide; the inter-op pool is left as torch set it),
        now if torch is imported, else when this backend first imports it."""
        _PENDING_THREADS.append(n)
        if "torch" in sys.modules:  # else when the backend first uses torch (importing it is slow)
            _torch()

    # ---- transfer ----------------------------------------------------------
    def from_host(self, array: np.ndarray, device: str) -> Any:
        """A torch tensor on `device` with `array`'s values; an allocation failure (a copy of
        a read-only array, a transfer to CUDA) is a `KernelMemoryError` (a MemoryError)."""
        torch = _torch()
        try:
            if not array.flags.writeable or any(s < 0 for s in array.strides):
                array = array.copy()  # torch.from_numpy warns on the first, refuses the second
            if array.dtype.name == "bfloat16":
                buf = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
            else:
                buf = torch.from_numpy(array)
            if device == "cpu":
                return buf
            return buf.to(device)
        except (RuntimeError, AssertionError, MemoryError) as exc:
            _raise_if_out_of_memory("from_host (a host-to-device copy)", device, exc)
            if device == "cpu":
                raise
            raise DeviceError(f"torch:{device} cannot take data ({exc}); use torch:cpu") from None

    def to_host(self, buf: Any) -> np.ndarray:
        torch = _torch()
        try:
            if buf.device.type != "cpu":
                buf = buf.cpu()
        except (RuntimeError, MemoryError) as exc:
            _raise_if_out_of_memory("to_host (a device-to-host copy)", str(buf.device), exc)
            raise
        if buf.dtype is torch.bfloat16:  # torch's numpy() has no bfloat16; ml_dtypes has
            return buf.view(torch.int16).numpy().view(D.bfloat16.numpy)
        return buf.numpy()

    def unstack(self, buf: Any) -> list:
        """Views of `buf`'s slices along dim 0 (`unbind`)."""
        return list(buf.unbind(0))

    def stack(self, bufs: Any) -> Any:
        """The tensors stacked on a new dim 0."""
        return _torch().stack(list(bufs))

    def describe(self, buf: Any) -> tuple[tuple[int, ...], D.DType]:
        from .ops.common import FROM_TORCH

        return tuple(buf.shape), FROM_TORCH[buf.dtype]

    def from_dlpack(self, obj: Any, device: str) -> Any:
        """A tensor sharing memory with `obj` (a torch tensor or any DLPack producer).

        Refused, with what to do: tensors that require grad, carry torch's lazy conjugate or
        negative bit, are not contiguous, have a dtype this backend lacks, or live on
        another device (there are no implicit transfers).
        """
        torch = _torch()
        if isinstance(obj, torch.Tensor):
            t = obj
        else:
            try:
                t = torch.from_dlpack(obj)
            except (BufferError, RuntimeError, TypeError, ValueError) as exc:
                raise DeviceError(
                    f"torch:{device} cannot import this DLPack object ({exc}); copy it to host "
                    f"memory first (e.g. numpy.asarray) and use asarray"
                ) from None
        if t.requires_grad:
            raise ArgumentError(
                "from_dlpack: the torch tensor requires grad; pass tensor.detach() (tenferro "
                "differentiates with tenferro_ad, not torch.autograd)"
            )
        if t.is_conj() or t.is_neg():
            raise ArgumentError(
                "from_dlpack: the torch tensor carries a lazy conjugate/negation bit; pass "
                "tensor.resolve_conj().resolve_neg()"
            )
        from .ops.common import FROM_TORCH

        dtype = FROM_TORCH.get(t.dtype)
        if dtype is None:
            raise DTypeError(
                f"from_dlpack: device torch:{device} does not support {t.dtype}; it supports "
                f"{sorted(d.name for d in SUPPORTED)}; convert it first (tensor.to(...))"
            )
        if str(t.device) != device:
            raise DeviceError(
                f"from_dlpack: the tensor is on torch device {t.device}, not {device}; pass "
                f"device='torch:{t.device}' or move it first (tensor.to({device!r}))"
            )
        if not t.is_contiguous():
            raise ArgumentError(
                f"from_dlpack: the tensor is not contiguous (shape {tuple(t.shape)}, strides "
                f"{t.stride()}); pass tensor.contiguous() (a copy)"
            )
        return t.detach()  # a new tensor object over the same memory

    def claims(self, obj: Any) -> str | None:
        """torch.Tensor objects are this backend's buffers: their device id ("cpu",
        "cuda:0"). Checked by type name, so it never imports torch."""
        t = type(obj)
        if t.__module__.partition(".")[0] != "torch" or "torch" not in sys.modules:
            return None
        torch = _torch()
        if not isinstance(obj, torch.Tensor):
            return None
        dev = obj.device
        return "cpu" if dev.type == "cpu" else f"{dev.type}:{dev.index or 0}"

    def to_dlpack(self, buf: Any, **kwargs: Any) -> Any:
        """CPU tensors export read-only through a NumPy view (a copy for consumers without
        DLPack's read-only flag); GPU and bfloat16 tensors as torch exports them."""
        if buf.device.type == "cpu":
            try:
                host = buf.numpy()  # bfloat16 has no NumPy view
            except (TypeError, RuntimeError):
                host = None
            if host is not None:
                return read_only_dlpack(host, lambda **kw: buf.clone().__dlpack__(**kw), **kwargs)
        return buf.__dlpack__(**{k: v for k, v in kwargs.items() if v is not None})

    def dlpack_device(self, buf: Any) -> tuple[int, int]:
        kind, index = buf.__dlpack_device__()
        return int(kind), int(index)

    # ---- energy ------------------------------------------------------------
    def device_name(self, device: str) -> str | None:
        """The hardware's name ("NVIDIA H100 80GB HBM3"), so energy estimates pick its profile;
        None for the CPU (its model comes from /proc/cpuinfo)."""
        if not device.startswith("cuda"):
            return None
        import torch

        return torch.cuda.get_device_name(int(device.partition(":")[2] or 0))

    def telemetry(self, device: str) -> EnergyTelemetry:
        tel = self._telemetry.get(device)
        if tel is None:
            from .telemetry import cpu_telemetry, cuda_telemetry

            tel = cpu_telemetry() if device == "cpu" else cuda_telemetry(int(device.partition(":")[2]))
            self._telemetry[device] = tel
        return tel
