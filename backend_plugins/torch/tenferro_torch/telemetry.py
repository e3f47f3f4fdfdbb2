"""Energy telemetry of torch devices (the contract in tenferro_core.energy).

CPU: the RAPL powercap counter where readable, else the cost-model estimate (as the numpy
backend). CUDA: NVML through ``pynvml`` (package nvidia-ml-py, imported only here), reading
the total-energy counter (Volta and newer); within one counter update, or on GPUs without
the counter, energy is power x elapsed time. Without pynvml or a working NVML the GPU gets
a cost-model estimate with a GPU profile. ``measured`` and ``source`` say which.
"""

from __future__ import annotations

import time
from typing import Any

from tenferro_core.energy import EnergyTelemetry, EstimatedTelemetry, RaplTelemetry

GPU_JOULES_PER_FLOP = 1e-11
GPU_JOULES_PER_BYTE = 5e-11


class NvmlTelemetry:
    """One NVIDIA GPU read through NVML; energy since construction or the last reset."""

    measured = True
    source = "nvml"

    def __init__(self, nvml: Any, handle: Any):
        self._nvml, self._handle = nvml, handle
        try:
            self._counter()
            self._has_counter = True
        except nvml.NVMLError:
            self._has_counter = False
        self.reset_counters()

    def _counter(self) -> float:
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1e3  # mJ -> J

    def energy_consumed_joules(self) -> float:
        elapsed = time.perf_counter() - self._t0
        if self._has_counter:
            joules = self._counter() - self._e0
            if joules > 0 or elapsed <= 0:
                return joules
        return (self.power_draw_watts() or 0.0) * elapsed

    def power_draw_watts(self) -> float | None:
        try:
            return self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1e3  # mW -> W
        except self._nvml.NVMLError:
            return None

    def temperature_celsius(self) -> float | None:
        try:
            return float(self._nvml.nvmlDeviceGetTemperature(self._handle, self._nvml.NVML_TEMPERATURE_GPU))
        except self._nvml.NVMLError:
            return None

    def reset_counters(self) -> None:
        self._t0 = time.perf_counter()
        self._e0 = self._counter() if self._has_counter else 0.0


def _nvml_handle(nvml: Any, index: int) -> Any:
    """The NVML handle of CUDA device `index`, matched by PCI bus id (CUDA_VISIBLE_DEVICES
    renumbers CUDA devices, NVML does not); by index when torch does not report the bus."""
    import torch

    props = torch.cuda.get_device_properties(index)
    if hasattr(props, "pci_bus_id"):
        bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(bus)
        except nvml.NVMLError:
            pass
    return nvml.nvmlDeviceGetHandleByIndex(index)


def cuda_telemetry(index: int) -> EnergyTelemetry:
    """NVML telemetry of CUDA device `index`, else a labelled GPU cost-model estimate."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            return NvmlTelemetry(pynvml, _nvml_handle(pynvml, index))
        except pynvml.NVMLError:
            pass
    return EstimatedTelemetry(GPU_JOULES_PER_FLOP, GPU_JOULES_PER_BYTE)


def cpu_telemetry() -> EnergyTelemetry:
    """RAPL where readable, else the CPU cost-model estimate."""
    return RaplTelemetry.find() or EstimatedTelemetry()
