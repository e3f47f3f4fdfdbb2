"""The ``mini`` backend: one device (``cpu``), its own buffers, an estimated energy meter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tenferro_core import dtypes
from tenferro_core.energy import EnergyTelemetry, EstimatedTelemetry
from tenferro_core.errors import DeviceError, DTypeError

from .buffer import MiniBuffer
from .kernels import build_kernels

SUPPORTED = frozenset({dtypes.bool_, dtypes.int32, dtypes.int64, dtypes.float32, dtypes.float64})

# The cost model of the estimated meter (joules per floating-point op, per byte moved).
JOULES_PER_FLOP = 1e-10
JOULES_PER_BYTE = 5e-10


class MiniBackend:
    """Backend ``mini``: device ``mini:cpu``, dtypes bool/int32/int64/float32/float64."""

    name = "mini"
    priority = -10  # never the default device while numpy:cpu is installed

    def __init__(self) -> None:
        self.meter = EstimatedTelemetry(JOULES_PER_FLOP, JOULES_PER_BYTE)
        self._kernels = build_kernels(self.meter)

    def devices(self) -> tuple[str, ...]:
        return ("cpu",)

    def supported_dtypes(self, device: str) -> frozenset[dtypes.DType]:
        return SUPPORTED

    def kernels(self) -> Mapping[str, Any]:
        return self._kernels

    def from_host(self, array: np.ndarray, device: str) -> MiniBuffer:
        return MiniBuffer(array.copy())  # "upload": mini owns its memory, later host writes don't leak in

    def to_host(self, buf: MiniBuffer) -> np.ndarray:
        return buf.array  # read-only: buffers are immutable

    def describe(self, buf: MiniBuffer) -> tuple[tuple[int, ...], dtypes.DType]:
        return buf.array.shape, dtypes.from_numpy(buf.array.dtype)

    def from_dlpack(self, obj: Any, device: str) -> MiniBuffer:
        try:
            array = np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError) as exc:
            raise DeviceError(
                f"mini:cpu cannot import this DLPack object ({exc}); move it to CPU memory first"
            ) from None
        if dtypes.from_numpy(array.dtype) not in SUPPORTED:  # (a DTypeError for dtypes tenferro lacks)
            raise DTypeError(
                f"mini:cpu does not support dtype {array.dtype}; it supports "
                f"{sorted(d.name for d in SUPPORTED)}; convert the array before importing it"
            )
        return MiniBuffer(array)  # shares memory with the producer

    def to_dlpack(self, buf: MiniBuffer, **kwargs: Any) -> Any:
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        try:
            return buf.array.__dlpack__(**kwargs)
        except BufferError:  # a consumer of DLPack < 1.0 cannot be told the memory is read-only
            if kwargs.get("copy") is False:
                raise
            return buf.array.copy().__dlpack__(**kwargs)

    def dlpack_device(self, buf: MiniBuffer) -> tuple[int, int]:
        return buf.array.__dlpack_device__()

    def telemetry(self, device: str) -> EnergyTelemetry:
        return self.meter
