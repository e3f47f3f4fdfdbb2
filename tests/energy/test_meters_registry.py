"""The root meters plugin, `meters_for` (order, probe cache, fallback) and the energy CLI."""

from __future__ import annotations

import subprocess
import sys

import tenferro_numpy.plugin as numpy_plugin
import tenferro_runtime.energy.plugin as meters_plugin
from plugin_fixtures import hook_plugin
from tenferro_core.energy import MeterStatus, Reading
from tenferro_runtime import Runtime, default_runtime
from tenferro_runtime.energy.meters import (
    EstimateMeter,
    RaplMeter,
    forget_probes,
    meter_status,
    meters_for,
)


class FakeMeter:
    """A meter of CPU devices that is available or not, counting its probes."""

    source, update_period = "rapl", 0.001

    def __init__(self, name: str, priority: int, available: bool = True, probe_raises: bool = False):
        self.name, self.priority, self.available, self.probe_raises = name, priority, available, probe_raises
        self.probes = 0

    def covers(self, device) -> bool:
        return str(device).endswith(":cpu")

    def probe(self) -> MeterStatus:
        self.probes += 1
        if self.probe_raises:
            raise OSError("sysfs went away")
        return MeterStatus(self.name, self.source, self.available, "" if self.available else "nope")

    def read(self, device) -> Reading:
        return Reading(1.0, 0.0, self.source)


def _runtime(*meters) -> Runtime:
    def register(registry):
        for m in meters:
            registry.add_meter(m.name, m)

    return Runtime([numpy_plugin, hook_plugin("fake_meters", register)], strict=True)


def test_root_plugin_registers_rapl_and_estimate():
    meters = default_runtime().meters
    assert isinstance(meters["rapl"], RaplMeter) and isinstance(meters["estimate"], EstimateMeter)
    rt = Runtime([numpy_plugin, meters_plugin], strict=True)
    assert set(rt.meters) == {"rapl", "estimate"}
    order = meters_for(rt, rt.device("numpy:cpu"))
    assert order[-1] is rt.meters["estimate"]
    assert [m.name for m in order] in (["rapl", "estimate"], ["estimate"])  # rapl where readable


def test_order_priority_then_estimate_and_unavailable_skipped():
    high, low = FakeMeter("high", 100), FakeMeter("low", 50)
    off, broken = FakeMeter("off", 200, available=False), FakeMeter("broken", 300, probe_raises=True)
    rt = _runtime(low, off, high, broken)
    cpu = rt.device("numpy:cpu")
    order = meters_for(rt, cpu)
    assert [m.name for m in order] == ["high", "low", "estimate"]
    assert isinstance(order[-1], EstimateMeter) and order[-1] is meters_for(rt, cpu)[-1]  # kept per runtime
    assert meter_status(rt, "off").reason == "nope"
    assert "probe raised OSError: sysfs went away" in meter_status(rt, "broken").reason
    assert high.probes == 1  # probed once per runtime
    forget_probes(rt)
    off.available = True
    assert [m.name for m in meters_for(rt, cpu)] == ["off", "high", "low", "estimate"]
    assert [m.name for m in meters_for(rt, "numpy:gpu")] == ["estimate"]  # no meter covers it


def test_registered_estimate_goes_last_even_with_higher_priority():
    est = EstimateMeter()
    est.priority = 1000
    rt = _runtime(FakeMeter("high", 100), est)
    assert meters_for(rt, rt.device("numpy:cpu")) == [rt.meters["high"], est]


def test_cli_lists_meters_with_their_status():
    out = subprocess.run([sys.executable, "-m", "tenferro_runtime", "energy"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    for name in default_runtime().meters:
        assert f"\n  {name} " in out.stdout
    assert out.stdout.count("available") >= len(default_runtime().meters)  # available / unavailable
    assert "numpy:cpu" in out.stdout and "estimate profile '" in out.stdout
    status = RaplMeter().probe()
    assert (status.reason or "available") in out.stdout
