"""The NumPy CPU backend: the reference every other backend is tested against."""

from __future__ import annotations

import math
import operator
import sys
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from tenferro_core import dtypes
from tenferro_core.backend import read_only_dlpack
from tenferro_core.energy import EnergyTelemetry, EstimatedTelemetry, RaplTelemetry
from tenferro_core.errors import DeviceError

SUPPORTED = frozenset(d for d in dtypes.ALL_DTYPES if d is not dtypes.bfloat16)
# ufuncs that ndarray operators call directly (same dtypes in and out, so no casting differs)
_OPERATORS = {np.negative: operator.neg}  # -x: ~15 ns less than the ufunc call; for binary
# ufuncs the operator is ~25 ns slower (it first checks whether the other operand defers)


def _gemm_calls(name: str, in_avals: tuple, params: dict) -> int:
    """How many BLAS calls the kernel makes (one per batch entry or group)."""
    if name == "dot_general":
        lb = params["batch_dims"][0]
        return max(1, math.prod(in_avals[0].shape[i] for i in lb))
    return max(1, params.get("feature_group_count", 1))


def _gemm_macs(name: str, in_avals: tuple, out_avals: tuple, params: dict) -> int:
    """Multiply-adds of each BLAS call the kernel makes."""
    out = math.prod(out_avals[0].shape)
    lhs, rhs = in_avals[0].shape, in_avals[1].shape
    if name == "dot_general":
        per = math.prod(lhs[i] for i in params["contracting_dims"][0])
    else:
        per = math.prod(rhs[1:])
    return out * per // _gemm_calls(name, in_avals, params)


def _gemm_bytes(name: str, in_avals: tuple, params: dict) -> int:
    """Bytes of the operands each BLAS call reads (a matrix-vector product of few
    multiply-adds still streams its whole matrix)."""
    return sum(math.prod(a.shape) * a.dtype.itemsize for a in in_avals[:2]) // _gemm_calls(
        name, in_avals, params)


class NumpyBackend:
    """Backend ``numpy`` with one device, ``cpu``; buffers are NumPy arrays."""

    name = "numpy"
    priority = 0
    # The layout pass's hint: both layouts run one kernel (bitwise equal results) whose window
    # copy reads channels contiguously in channels_last. 3x3 conv, 32x64x32x32 float32, 2 CPU
    # threads: 36 ms channels_first, 28 ms channels_last, 34 ms with the pass's transposes.
    preferred_conv_layout = "channels_last"

    def __init__(self) -> None:
        self._telemetry: EnergyTelemetry | None = None

    def devices(self) -> tuple[str, ...]:
        return ("cpu",)

    def supported_dtypes(self, device: str) -> frozenset:
        return SUPPORTED

    def kernels(self) -> Mapping[str, Any]:
        from .kernels import KERNELS

        return KERNELS

    def specialize(self, name: str, kernel: Any, in_avals: tuple, out_avals: tuple,
                   params: dict | None = None) -> Any:
        """Drop the ``out=...`` of ufunc kernels when no output is 0-d (saves ~0.15 us a call):
        ``out=...`` only exists to keep 0-d results arrays rather than NumPy scalars. Where the
        ufunc is negation, call it as ``-x`` (~15 ns less). A `fused` group's code is generated
        here, once per group, so a call runs it with no lookup. A BLAS product (dot_general,
        conv_general) runs on one thread when it is small (`threads.sized`)."""
        if name == "fused" and params is not None:
            from .fusion import specialized

            return specialized(params["graph"])
        if name in ("dot_general", "conv_general") and params is not None:
            from .kernels import KERNELS, dot_kernel, matmul2d_kernel, plain_matmul2d
            from .threads import sized, small_state

            macs, nbytes = _gemm_macs(name, in_avals, out_avals, params), _gemm_bytes(name, in_avals, params)
            if name == "dot_general" and kernel is KERNELS["dot_general"] and len(in_avals) == 2:
                small = small_state(macs, nbytes)
                if small is not None and plain_matmul2d(in_avals, params):  # the switch inlined
                    a, b = in_avals
                    return matmul2d_kernel(a.shape[0], b.shape[1], a.dtype.numpy, b.dtype.numpy, small)
                kernel = dot_kernel(in_avals, params)  # its index work done once
            elif name == "conv_general" and kernel is KERNELS["conv_general"] and len(in_avals) == 2:
                from .conv import conv_kernel

                kernel = conv_kernel(in_avals, params)  # its shapes and path worked out once
            return sized(kernel, macs, nbytes)
        if (isinstance(kernel, partial) and kernel.keywords == {"out": Ellipsis}
                and isinstance(kernel.func, np.ufunc) and all(a.shape for a in out_avals)):
            return _OPERATORS.get(kernel.func, kernel.func)
        return kernel

    def set_threads(self, n: int) -> None:
        """Use at most `n` threads in NumPy's and SciPy's BLAS (threadpoolctl), with idle
        workers that give their core back (`tenferro_numpy.threads`)."""
        from .threads import set_threads

        set_threads(n)

    def out_kernel(self, name: str, kernel: Any) -> Any:
        """`fn(*bufs, out)` writing `kernel`'s result into `out`, where the kernel is one ufunc
        (the same loop, so the same bits): plans write such results into dead buffers."""
        if (isinstance(kernel, partial) and kernel.keywords == {"out": Ellipsis}
                and isinstance(kernel.func, np.ufunc) and not kernel.args):
            uf = kernel.func
            if uf in (np.maximum, np.minimum):  # NumPy deprecates a positional out for these
                return lambda *args: uf(*args[:-1], out=args[-1])
            return uf
        return None

    def fresh_results(self, name: str, kernel: Any) -> bool:
        """True where `kernel` (of primitive `name`) always returns new arrays, never views
        of its operands (a plan may then write into them once they are dead): this
        backend's own products (another plugin's kernel for them may not)."""
        return name == "dot_general" and getattr(kernel, "__module__", "").startswith("tenferro_numpy.")

    def donatable(self, buf: Any, others: int) -> bool:
        """True when a donated input's array may be overwritten: it is writeable, nothing
        beyond the executor holds it (`others`, the references the executor counted besides
        its own, is 0: no other tensor, view or caller's array), and it owns its memory, or
        numba made it (a generated loop's result: its MemInfo held by this array alone and
        counting no other array of the same allocation)."""
        if others > 0 or type(buf) is not np.ndarray or not buf.flags.writeable:
            return False
        base = buf.base
        return base is None or (type(base).__name__ == "_MemInfo" and getattr(base, "refcount", 0) == 1
                                and sys.getrefcount(base) <= 3)  # buf's, the local's, the call's

    def unstack(self, buf: Any) -> list:
        """Views of `buf`'s slices along axis 0 (iterating the array, ~40% faster than indexing;
        `x[i, ...]` for 1-D, a 0-d array rather than a scalar)."""
        return list(buf) if buf.ndim > 1 else [buf[i, ...] for i in range(buf.shape[0])]

    def stack(self, bufs: Any) -> Any:
        """The buffers stacked on a new axis 0: of arrays of at least one axis, their
        concatenation reshaped (the same copy, without np.stack's per-array expand_dims:
        ~30% less for a scan's 200 outputs of 16 x 128)."""
        first = bufs[0] if len(bufs) else None
        if first is None or not first.ndim:
            return np.stack(bufs)
        return np.concatenate(bufs).reshape((len(bufs), *first.shape))

    def claims(self, obj: Any) -> str | None:
        """NumPy arrays are this backend's buffers."""
        return "cpu" if isinstance(obj, np.ndarray) else None

    def from_host(self, array: np.ndarray, device: str) -> np.ndarray:
        return array

    def to_host(self, buf: np.ndarray) -> np.ndarray:
        return np.asarray(buf)

    def describe(self, buf: np.ndarray) -> tuple[tuple[int, ...], dtypes.DType]:
        return buf.shape, dtypes.from_numpy(buf.dtype)

    def from_dlpack(self, obj: Any, device: str) -> np.ndarray:
        try:
            return np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError) as exc:
            raise DeviceError(
                f"numpy:cpu cannot import this DLPack object ({exc}); move it to CPU memory first"
            ) from None

    def to_dlpack(self, buf: np.ndarray, **kwargs: Any) -> Any:
        """A read-only export (tensors are immutable); a copy for consumers without the flag."""
        return read_only_dlpack(buf, lambda **kw: np.array(buf, copy=True).__dlpack__(**kw), **kwargs)

    def dlpack_device(self, buf: np.ndarray) -> tuple[int, int]:
        return buf.__dlpack_device__()

    def telemetry(self, device: str) -> EnergyTelemetry:
        if self._telemetry is None:
            self._telemetry = RaplTelemetry.find() or EstimatedTelemetry()
        return self._telemetry
