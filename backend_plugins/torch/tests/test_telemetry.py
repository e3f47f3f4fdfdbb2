"""Energy telemetry of torch devices: RAPL or a labelled estimate on CPU, NVML (pynvml,
imported lazily) or a labelled GPU estimate on CUDA."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from tenferro_core.energy import EnergyTelemetry, EstimatedTelemetry, RaplTelemetry
from tenferro_torch import TorchBackend, telemetry
from tenferro_torch.telemetry import NvmlTelemetry


def test_cpu_meter_is_labelled_and_one_per_device():
    backend = TorchBackend()
    tel = backend.telemetry("cpu")
    assert tel is backend.telemetry("cpu") and isinstance(tel, EnergyTelemetry)
    if isinstance(tel, RaplTelemetry):
        assert tel.measured and tel.source == "rapl"
    else:
        assert isinstance(tel, EstimatedTelemetry) and not tel.measured and tel.source == "cost-model"


def test_cpu_estimate_when_rapl_is_unreadable(monkeypatch):
    monkeypatch.setattr(RaplTelemetry, "find", staticmethod(lambda: None))
    tel = TorchBackend().telemetry("cpu")
    assert isinstance(tel, EstimatedTelemetry) and tel.measured is False


def test_gpu_estimate_without_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    tel = telemetry.cuda_telemetry(0)
    assert isinstance(tel, EstimatedTelemetry) and tel.measured is False
    assert tel.joules_per_flop == telemetry.GPU_JOULES_PER_FLOP
    assert tel.record(flops=1e9, bytes_moved=0) == pytest.approx(1e9 * telemetry.GPU_JOULES_PER_FLOP)


class _Error(Exception):
    pass


def _fake_nvml(counter_mj: list[float] | None, power_mw: float = 250_000.0) -> types.ModuleType:
    """A pynvml stand-in: a total-energy counter in mJ (None: unsupported), power in mW."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = _Error
    nvml.NVML_TEMPERATURE_GPU = 0
    nvml.inits = []
    nvml.nvmlInit = lambda: nvml.inits.append(1)
    nvml.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    nvml.nvmlDeviceGetHandleByPciBusId = lambda bus: ("handle", bus)
    nvml.nvmlDeviceGetPowerUsage = lambda h: power_mw
    nvml.nvmlDeviceGetTemperature = lambda h, sensor: 61

    def energy(h):
        if counter_mj is None:
            raise _Error("not supported")
        return counter_mj[0]

    nvml.nvmlDeviceGetTotalEnergyConsumption = energy
    return nvml


def test_nvml_energy_counter(monkeypatch):
    counter = [5_000.0]
    nvml = _fake_nvml(counter)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(telemetry, "_nvml_handle", lambda nv, i: nv.nvmlDeviceGetHandleByIndex(i))
    tel = telemetry.cuda_telemetry(0)
    assert isinstance(tel, NvmlTelemetry) and tel.measured and tel.source == "nvml" and nvml.inits
    counter[0] += 1_500.0
    assert tel.energy_consumed_joules() == pytest.approx(1.5)
    assert tel.power_draw_watts() == pytest.approx(250.0) and tel.temperature_celsius() == 61.0
    tel.reset_counters()
    counter[0] += 250.0
    assert tel.energy_consumed_joules() == pytest.approx(0.25)


def test_nvml_short_window_and_no_counter_use_power_times_time(monkeypatch):
    for counter in ([1_000.0], None):  # the counter did not move yet / does not exist
        tel = NvmlTelemetry(_fake_nvml(counter, power_mw=100_000.0), "handle")
        tel._t0 -= 2.0  # two seconds ago
        assert tel.energy_consumed_joules() == pytest.approx(200.0, rel=0.01)


def test_nvml_failure_falls_back_to_estimate(monkeypatch):
    nvml = _fake_nvml([0.0])

    def broken():
        raise _Error("driver not loaded")

    nvml.nvmlInit = broken
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert isinstance(telemetry.cuda_telemetry(0), EstimatedTelemetry)


def test_nvml_handle_by_pci_bus(monkeypatch):
    props = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    assert telemetry._nvml_handle(_fake_nvml([0.0]), 1) == ("handle", "00000000:3b:00.0")


