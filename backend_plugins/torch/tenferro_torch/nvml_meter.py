"""`NvmlMeter`: energy of ``torch:cuda:N`` devices through NVML (package nvidia-ml-py, import
name ``pynvml``, imported on first probe or read, never by importing this module).

* GPUs with the total-energy counter (Volta and newer): readings are the counter (mJ) since
  the meter first read the GPU. The counter moves about every 100 ms (`update_period`): a read
  that finds it unchanged is extended with power x the time since it last moved, and a read
  within one update period of the previous one is labelled ``approximate``. So a window shorter
  than the update period is never 0; readings never decrease (an extension that ran ahead of
  the counter is held until the counter catches up).
* GPUs without it: power x time, the trapezoid between the power samples of consecutive reads
  (source "power x time"). It is accurate only when reads come at least every ~100 ms;
  readings further apart are labelled approximate.

* NVML itself is queried at most every `min_query_interval` (100 ms, the counter's update
  period): a query took ~4 ms on a lent H100 and H200 (virtual machines), and the inference
  engine reads its meter twice a decode step, which cost 8 ms of a 48 ms token. A read
  sooner than that after the last query extends the last reading with the last power seen
  (labelled approximate); the counter could not have told more, as it moves only every
  ~100 ms.

Errors (pynvml missing, NVML not starting, a counter going back, a 0 W or NaN power sample)
are `MeterError`s, so accounting falls back to the next meter.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tenferro_core.energy import MeterError, MeterStatus, Reading

from . import telemetry


def _device_id(device: Any) -> str:
    dev_id = getattr(device, "id", None)
    return dev_id if isinstance(dev_id, str) else str(device).partition(":")[2]


@dataclass
class _Gpu:
    """What the meter last saw of one GPU."""

    handle: Any
    has_counter: bool
    origin_mj: float = 0.0  # counter at the first read
    last_mj: float = 0.0  # counter at the last read
    seen: float = 0.0  # when the counter was first seen at last_mj
    joules: float = 0.0  # the last reading
    last_time: float = 0.0
    last_watts: float = 0.0  # power x time: the last power sample
    queried: float = 0.0  # when NVML was last queried
    rate: float = 0.0  # watts seen at the last query (extends reads between queries)


class NvmlMeter:
    """NVML energy meter of torch CUDA devices (see the module doc); priority 100."""

    name = "nvml"
    source = "nvml"
    priority = 100
    description = "torch:cuda:N devices: NVML total-energy counter, else power x time"

    def __init__(self, clock: Callable[[], float] = time.perf_counter, update_period: float = 0.1,
                 min_query_interval: float = 0.1):
        self.update_period = update_period
        self.min_query_interval = min_query_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._gpus: dict[str, _Gpu] = {}

    def covers(self, device: Any) -> bool:
        backend = getattr(getattr(device, "backend", None), "name", None)
        backend = backend if isinstance(backend, str) else str(device).partition(":")[0]
        return backend == "torch" and _device_id(device).startswith("cuda:")

    def _load(self) -> Any:
        """pynvml, initialised once; MeterError saying why not."""
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise MeterError("pynvml is not installed: pip install nvidia-ml-py "
                                 "(or tenferro-torch[nvml])") from exc
            try:
                pynvml.nvmlInit()
            except Exception as exc:  # NVMLError_DriverNotLoaded, LibraryNotFound, ...
                raise MeterError(f"NVML did not start: {type(exc).__name__}: {exc}") from exc
            self._nvml = pynvml
        return self._nvml

    @staticmethod
    def _not_supported(nvml: Any, exc: Exception) -> bool:
        cls = getattr(nvml, "NVMLError_NotSupported", None)
        return (isinstance(cls, type) and isinstance(exc, cls)) or (
            getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", object()))

    def _has_counter(self, nvml: Any, handle: Any) -> bool:
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except nvml.NVMLError as exc:
            if self._not_supported(nvml, exc):
                return False
            raise
        return True

    def probe(self) -> MeterStatus:
        try:
            with self._lock:
                nvml = self._load()
                count = nvml.nvmlDeviceGetCount()
                domains = []
                for i in range(count):
                    try:
                        has = self._has_counter(nvml, nvml.nvmlDeviceGetHandleByIndex(i))
                        domains.append(f"gpu{i}: {'energy counter' if has else 'power x time'}")
                    except nvml.NVMLError as exc:
                        domains.append(f"gpu{i}: unreadable ({exc})")
        except MeterError as exc:
            return MeterStatus(self.name, self.source, False, str(exc))
        except Exception as exc:  # an NVMLError of the device count
            return MeterStatus(self.name, self.source, False, f"NVML: {type(exc).__name__}: {exc}")
        if not count:
            return MeterStatus(self.name, self.source, False, "NVML found no NVIDIA GPU")
        return MeterStatus(self.name, self.source, True, domains=tuple(domains))

    def read(self, device: Any) -> Reading:
        """Joules of `device` since this meter first read it (see the module doc)."""
        if not self.covers(device):
            raise MeterError(f"nvml measures torch:cuda:N devices, not {device}")
        dev_id = _device_id(device)
        with self._lock:
            nvml = self._load()
            try:
                gpu = self._gpus.get(dev_id)
                if gpu is None:
                    return self._start(nvml, dev_id)
                now = self._clock()
                if now - gpu.queried < self.min_query_interval:
                    return self._extend(gpu, now)
                gpu.queried = now
                if gpu.has_counter:
                    return self._read_counter(nvml, gpu)
                return self._read_power(nvml, gpu)
            except nvml.NVMLError as exc:
                raise MeterError(f"NVML read of {device} failed: {type(exc).__name__}: {exc}") from exc

    def _start(self, nvml: Any, dev_id: str) -> Reading:
        index = int(dev_id.partition(":")[2])
        handle = telemetry._nvml_handle(nvml, index)
        gpu = _Gpu(handle, self._has_counter(nvml, handle))
        now = self._clock()
        if gpu.has_counter:
            gpu.origin_mj = gpu.last_mj = self._counter(nvml, gpu)
            gpu.seen = now
        gpu.rate = gpu.last_watts = self._watts(nvml, gpu)
        gpu.last_time = gpu.queried = now
        self._gpus[dev_id] = gpu
        return Reading(0.0, now, "nvml" if gpu.has_counter else "power x time", note="origin")

    def _extend(self, gpu: _Gpu, now: float) -> Reading:
        """A read within `min_query_interval` of the last NVML query: the last reading plus
        the last power seen times the time since, approximate."""
        dt = max(now - gpu.last_time, 0.0)
        gpu.joules += gpu.rate * dt
        gpu.last_time = now
        source = "nvml" if gpu.has_counter else "power x time"
        return Reading(gpu.joules, now, source, True,
                       f"extended with {gpu.rate:.0f} W x elapsed: NVML is queried at most every "
                       f"{self.min_query_interval * 1e3:.0f} ms")

    @staticmethod
    def _counter(nvml: Any, gpu: _Gpu) -> float:
        mj = nvml.nvmlDeviceGetTotalEnergyConsumption(gpu.handle)
        if isinstance(mj, bool) or not isinstance(mj, (int, float)) or not math.isfinite(mj) or mj < 0:
            raise MeterError(f"NVML total-energy counter returned {mj!r} mJ")
        return float(mj)

    @staticmethod
    def _watts(nvml: Any, gpu: _Gpu) -> float:
        mw = nvml.nvmlDeviceGetPowerUsage(gpu.handle)
        if isinstance(mw, bool) or not isinstance(mw, (int, float)) or not math.isfinite(mw) or mw <= 0:
            raise MeterError(f"NVML power usage returned {mw!r} mW; a powered GPU draws > 0 W")
        return mw / 1e3

    def _read_counter(self, nvml: Any, gpu: _Gpu) -> Reading:
        mj = self._counter(nvml, gpu)
        now = self._clock()
        if mj < gpu.last_mj:
            raise MeterError(f"NVML total-energy counter went back from {gpu.last_mj:g} to {mj:g} mJ")
        seen = now if mj > gpu.last_mj else gpu.seen
        counted = (mj - gpu.origin_mj) / 1e3
        stale, dt = now - seen, now - gpu.last_time
        period_ms = self.update_period * 1e3
        if mj > gpu.last_mj and now > gpu.seen:
            gpu.rate = (mj - gpu.last_mj) / 1e3 / (now - gpu.seen)
        if stale <= 0 and counted > gpu.joules:
            joules, approx = counted, dt < self.update_period
            note = (f"counter moved within one update period (~{period_ms:.0f} ms) of the previous read: "
                    f"its step may cover more than this window" if approx else "")
        elif dt <= 0:
            joules, approx, note = gpu.joules, False, "no time passed since the previous read"
        else:
            watts = gpu.rate = self._watts(nvml, gpu)
            joules = max(counted + watts * stale, gpu.joules + watts * dt)
            approx = True
            note = (f"counter unchanged for {stale * 1e3:.0f} ms (it moves every ~{period_ms:.0f} ms): "
                    f"extended with {watts:.0f} W x elapsed" if stale > 0 else
                    f"held ahead of the counter, extended with {watts:.0f} W x elapsed")
        gpu.last_mj, gpu.seen, gpu.joules, gpu.last_time = mj, seen, joules, now
        return Reading(joules, now, "nvml", approx, note)

    def _read_power(self, nvml: Any, gpu: _Gpu) -> Reading:
        watts = self._watts(nvml, gpu)
        now = self._clock()
        dt = max(now - gpu.last_time, 0.0)
        joules = gpu.joules + (gpu.last_watts + watts) / 2 * dt
        approx = dt > self.update_period
        note = f"trapezoid of power samples {dt * 1e3:.0f} ms apart" + (
            f"; accurate only with reads every ~{self.update_period * 1e3:.0f} ms" if approx else "")
        gpu.joules, gpu.last_watts, gpu.last_time, gpu.rate = joules, watts, now, watts
        return Reading(joules, now, "power x time", approx, note)


__all__ = ["NvmlMeter"]
