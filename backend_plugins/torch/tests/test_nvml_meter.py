"""NvmlMeter against a stub pynvml with a fake clock: a total-energy counter that moves every
100 ms, short windows (approximate, never 0), GPUs without the counter (power x time), pynvml
or NVML missing, and garbage (a counter going back) -> MeterError."""

from __future__ import annotations

import math
import subprocess
import sys
import types

import pytest

from tenferro_core.energy import Meter, MeterError
from tenferro_runtime.energy.meters import checked
from tenferro_torch import nvml_meter, telemetry
from tenferro_torch.nvml_meter import NvmlMeter

GPU = "torch:cuda:0"
WATTS = 200.0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
    pass


def stub_nvml(clock: Clock, counter: bool = True, gpus: int = 1) -> types.ModuleType:
    """A pynvml stand-in: the GPU draws WATTS; its counter (mJ) moves every 100 ms of `clock`."""
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError, nvml.NVMLError_NotSupported = NVMLError, NVMLError_NotSupported
    nvml.inits = 0
    nvml.watts = WATTS
    nvml.offset_mj = 0.0

    def init():
        nvml.inits += 1

    def energy(handle):
        if not counter:
            raise NVMLError_NotSupported("Not Supported")
        return math.floor(clock.t / 0.1 + 1e-9) * 0.1 * WATTS * 1e3 + nvml.offset_mj

    nvml.nvmlInit = init
    nvml.nvmlDeviceGetCount = lambda: gpus
    nvml.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    nvml.nvmlDeviceGetTotalEnergyConsumption = energy
    nvml.nvmlDeviceGetPowerUsage = lambda handle: nvml.watts * 1e3
    return nvml


@pytest.fixture
def fake(monkeypatch):
    """(meter, clock, stub): an NvmlMeter reading the stub; no torch needed for the handle."""
    clock = Clock()
    nvml = stub_nvml(clock)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(telemetry, "_nvml_handle", lambda nv, i: nv.nvmlDeviceGetHandleByIndex(i))
    return NvmlMeter(clock=clock, min_query_interval=0.0), clock, nvml


def test_is_a_meter_that_covers_torch_cuda_only():
    meter = NvmlMeter()
    assert isinstance(meter, Meter) and meter.priority == 100 and meter.update_period == pytest.approx(0.1)
    assert meter.covers("torch:cuda:1") and not meter.covers("torch:cpu") and not meter.covers("numpy:cpu")


def test_counter_reads_are_exact_over_whole_updates(fake):
    meter, clock, nvml = fake
    assert meter.probe().available and meter.probe().domains == ("gpu0: energy counter",)
    first = checked(meter, GPU, None)
    assert first.joules == 0.0 and first.source == "nvml" and nvml.inits == 1
    clock.t += 1.0  # ten counter updates
    r = checked(meter, GPU, first)
    assert r.joules == pytest.approx(WATTS * 1.0) and not r.approximate and r.source == "nvml"


def test_short_windows_are_extended_approximate_and_never_zero(fake):
    meter, clock, _ = fake
    clock.t += 0.01  # just after an update
    prev = checked(meter, GPU, None)
    for _ in range(25):  # windows of 30 ms: the counter moves on every third or fourth one
        clock.t += 0.03
        r = checked(meter, GPU, prev)
        assert r.joules > prev.joules and r.approximate and r.note
        prev = r
    # 750 ms in all: the extended readings stay within one update (20 J) of the truth
    assert prev.joules == pytest.approx(WATTS * 0.75, abs=WATTS * 0.1 + 1e-9)
    clock.t += 1.0  # a long window lands on the counter again
    r = checked(meter, GPU, prev)
    assert r.joules >= prev.joules and r.joules == pytest.approx(WATTS * 1.75, abs=WATTS * 0.1)


def test_unchanged_counter_note_says_why(fake):
    meter, clock, _ = fake
    clock.t += 0.01
    meter.read(GPU)
    clock.t += 0.05  # within the same 100 ms update
    r = meter.read(GPU)
    assert r.approximate and "unchanged" in r.note and r.joules == pytest.approx(WATTS * 0.05)


def test_gpu_without_counter_integrates_power(fake, monkeypatch):
    _, clock, _ = fake
    nvml = stub_nvml(clock, counter=False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    meter = NvmlMeter(clock=clock, min_query_interval=0.0)
    assert meter.probe().domains == ("gpu0: power x time",)
    prev = checked(meter, GPU, None)
    assert prev.source == "power x time"
    nvml.watts = 100.0
    clock.t += 0.05
    r = checked(meter, GPU, prev)  # trapezoid of 200 W and 100 W over 50 ms
    assert r.joules == pytest.approx(7.5) and r.source == "power x time" and not r.approximate
    clock.t += 2.0  # sparse samples: labelled
    r2 = checked(meter, GPU, r)
    assert r2.joules == pytest.approx(207.5) and r2.approximate and "every ~100 ms" in r2.note


def test_pynvml_missing_or_nvml_failing_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    status = NvmlMeter().probe()
    assert not status.available and "pip install nvidia-ml-py" in status.reason
    with pytest.raises(MeterError, match="nvidia-ml-py"):
        NvmlMeter().read(GPU)
    nvml = stub_nvml(Clock())

    def broken():
        raise NVMLError("Driver Not Loaded")

    nvml.nvmlInit = broken
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    status = NvmlMeter().probe()
    assert not status.available and "Driver Not Loaded" in status.reason
    monkeypatch.setitem(sys.modules, "pynvml", stub_nvml(Clock(), gpus=0))
    assert NvmlMeter().probe().reason == "NVML found no NVIDIA GPU"


def test_decreasing_counter_and_zero_power_are_meter_errors(fake):
    meter, clock, nvml = fake
    prev = checked(meter, GPU, None)
    clock.t += 0.5
    prev = checked(meter, GPU, prev)
    nvml.offset_mj = -1e6  # the counter goes back
    clock.t += 0.1
    with pytest.raises(MeterError, match="went back") as info:
        checked(meter, GPU, prev)
    assert "'nvml'" in str(info.value) and GPU in str(info.value)
    nvml.offset_mj = 0.0
    prev = checked(meter, GPU, prev)  # the failed read changed nothing
    assert prev.joules == pytest.approx(WATTS * 0.6)
    nvml.watts = 0.0
    clock.t += 0.01
    with pytest.raises(MeterError, match="0.0 mW"):  # an extension at 0 W would be a silent zero
        checked(meter, GPU, prev)


def test_import_and_construction_do_not_import_pynvml_or_torch():
    code = ("import sys\nfrom tenferro_torch.nvml_meter import NvmlMeter\nfrom tenferro_torch import plugin\n"
            "NvmlMeter()\nprint([m for m in ('torch', 'pynvml') if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert nvml_meter.NvmlMeter is NvmlMeter


def test_estimates_of_cuda_devices_pick_the_gpus_profile(monkeypatch):
    """TorchBackend.device_name names a CUDA device, so the estimate meter picks its profile."""
    import torch

    from tenferro_runtime.energy.meters import EstimateMeter
    from tenferro_torch.backend import TorchBackend

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"NVIDIA H100 80GB HBM3 #{i}")
    backend = TorchBackend()
    assert backend.device_name("cuda:1") == "NVIDIA H100 80GB HBM3 #1" and backend.device_name("cpu") is None

    class Dev:
        id = "cuda:1"

        def __init__(self):
            self.backend = backend

        def __str__(self):
            return "torch:cuda:1"

    assert EstimateMeter().profile(Dev()).name == "nvidia-h100"


@pytest.mark.parametrize("counter", [True, False])
def test_nvml_is_queried_at_most_every_min_query_interval(monkeypatch, counter):
    """Reads every 10 ms (a decode step's) query NVML at most every 100 ms; the readings in
    between extend the last one with the last power seen, rise, are labelled approximate
    and stay within one counter update of the truth."""
    clock = Clock()
    nvml = stub_nvml(clock, counter=counter)
    calls = []
    for name in ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage"):
        fn = getattr(nvml, name)
        monkeypatch.setattr(nvml, name, lambda *a, fn=fn: (calls.append(clock.t), fn(*a))[1])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(telemetry, "_nvml_handle", lambda nv, i: nv.nvmlDeviceGetHandleByIndex(i))
    meter = NvmlMeter(clock=clock)
    clock.t += 0.005
    prev = checked(meter, GPU, None)
    start = len(calls)
    extended = 0
    for _ in range(100):  # one second
        clock.t += 0.01
        r = checked(meter, GPU, prev)
        assert r.joules >= prev.joules
        extended += "at most every 100 ms" in r.note
        prev = r
    queries = sorted(set(calls[start:]))
    assert len(queries) <= 11 and all(b - a >= 0.1 - 1e-9 for a, b in zip(queries, queries[1:]))
    assert extended >= 85
    assert prev.joules == pytest.approx(WATTS * 1.0, abs=WATTS * 0.1 + 1e-9)
