"""EstimateMeter (charge/read, idle watts, thread safety, the profile named) and the device
profiles (`profile_for`, `calibrate`)."""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tenferro_core.energy import MeterError
from tenferro_runtime.energy import profiles
from tenferro_runtime.energy.meters import EstimateMeter, checked
from tenferro_runtime.energy.profiles import PROFILES, CalibrationError, DeviceProfile, calibrate, profile_for

CPU, GPU = "numpy:cpu", "torch:cuda:0"
FLAT = DeviceProfile("flat", 1e-9, 1e-10, 0.0, "test")


class Clock:
    def __init__(self) -> None:
        self.t = 10.0

    def __call__(self) -> float:
        return self.t


def test_charge_and_read_name_the_profile():
    meter = EstimateMeter({CPU: FLAT}, clock=Clock())
    assert meter.probe().available and meter.covers(GPU)
    assert meter.charge(CPU, flops=1e9, bytes=1e9) == pytest.approx(1.1)
    meter.charge(CPU, 2e9, 0)
    r = checked(meter, CPU, None)
    assert r.joules == pytest.approx(3.1) and r.source == "estimate" and "profile 'flat'" in r.note
    assert meter.read("numpy:other").joules >= 0.0  # a device never charged reads its idle draw only


def test_idle_watts_times_elapsed():
    clock = Clock()
    meter = EstimateMeter({CPU: replace(FLAT, idle_watts=5.0)}, clock=clock)
    assert meter.read(CPU).joules == 0.0
    clock.t += 2.0
    meter.charge(CPU, 1e9, 0)
    assert meter.read(CPU).joules == pytest.approx(11.0)


def test_set_profile_and_device_objects():
    from tenferro_runtime import default_runtime

    dev = default_runtime().device(CPU)
    meter = EstimateMeter(clock=Clock())
    assert meter.profile(dev) == profile_for(dev)
    meter.set_profile(dev, FLAT)
    meter.charge(dev, 1e9, 0)
    meter.charge(CPU, 1e9, 0)  # the Device and its name are one key
    assert meter.read(dev).joules == pytest.approx(2.0) == meter.read(CPU).joules
    assert all(type(k) is str for k in meter._joules)  # no Device (nor its runtime) kept alive


class _PausingProfile(DeviceProfile):
    """A profile whose J/FLOP lookup blocks the first charging thread until released."""

    def __getattribute__(self, item):
        if item == "joules_per_flop":
            hook = PAUSE.get(threading.get_ident())
            if hook is not None:
                inside, release = hook
                inside.set()
                assert release.wait(10)
        return super().__getattribute__(item)


PAUSE: dict[int, tuple[threading.Event, threading.Event]] = {}


def test_concurrent_charges_interleaved_are_all_counted():
    prof = _PausingProfile("pausing", 1e-9, 0.0, 0.0, "test")
    meter = EstimateMeter({CPU: prof}, clock=Clock())
    inside, release = threading.Event(), threading.Event()

    def paused_charge():
        PAUSE[threading.get_ident()] = (inside, release)
        meter.charge(CPU, 1e9, 0)

    a = threading.Thread(target=paused_charge)
    a.start()
    assert inside.wait(10)  # thread a is in the middle of charge()
    b = threading.Thread(target=lambda: [meter.charge(CPU, 1e9, 0) for _ in range(100)])
    b.start()
    b.join(10)
    assert meter.read(CPU).joules == pytest.approx(100.0)  # b's charges, a's not yet
    release.set()
    a.join(10)
    PAUSE.clear()
    threads = [threading.Thread(target=lambda: [meter.charge(CPU, 1e9, 0) for _ in range(1000)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert meter.read(CPU).joules == pytest.approx(4101.0)


def test_checked_rejects_garbage_from_any_meter():
    class Bad:
        name, source, update_period, priority = "bad", "estimate", 0.0, 0

        def __init__(self, value):
            self.value = value

        def read(self, device):
            if isinstance(self.value, Exception):
                raise self.value
            return self.value

    good = EstimateMeter({CPU: FLAT}, clock=Clock()).read(CPU)
    for value, what in [(OSError("gone"), "OSError"), (3.0, "not a Reading"),
                        (replace(good, joules=float("nan")), "nan"), (replace(good, joules=-1.0), "-1.0"),
                        (replace(good, source="guess"), "source"), (replace(good, joules=1.0), "decreased")]:
        with pytest.raises(MeterError, match=what) as info:
            checked(Bad(value), CPU, replace(good, joules=2.0))
        assert "'bad'" in str(info.value) and CPU in str(info.value)


@pytest.mark.parametrize("hint, name", [
    ("NVIDIA H100 80GB HBM3", "nvidia-h100"), ("NVIDIA H200", "nvidia-h200"),
    ("NVIDIA A100-SXM4-80GB", "nvidia-a100"), ("NVIDIA A10G", "nvidia-a10"), ("NVIDIA A10", "nvidia-a10"),
    ("NVIDIA L4", "nvidia-l4"), ("Tesla T4", "nvidia-t4"), ("NVIDIA GeForce RTX 4090", "nvidia-rtx-4090"),
    ("Some Future GPU", "generic-gpu"), (None, "generic-gpu"),
])
def test_profile_for_gpu_by_hint(hint, name):
    assert profile_for(GPU, hint).name == name


@pytest.mark.parametrize("model, name", [
    ("AMD EPYC 7763 64-Core Processor", "amd-epyc-zen3"),
    ("AMD EPYC 9654 96-Core Processor", "amd-epyc-zen4"),
    ("Intel(R) Xeon(R) Platinum 8380 CPU @ 2.30GHz", "intel-xeon-icelake"),
    ("Intel(R) Xeon(R) Platinum 8480+", "intel-xeon-sapphire-rapids"), ("Apple M2", "apple-m-series"),
    ("0xd0c", "arm-neoverse"), ("Intel(R) Core(TM) i7-8700 CPU", "generic-x86-core"),
])
def test_profile_for_cpu_by_model(model, name, tmp_path, monkeypatch):
    picked = profile_for(CPU, model)
    socket = profiles.PROFILES[name]
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if socket.cores > usable:  # this process idles its share of the socket
        assert picked.name == f"{name} ({usable} of {socket.cores} cores)"
        assert picked.idle_watts == pytest.approx(socket.idle_watts * usable / socket.cores)
        assert picked.joules_per_flop == socket.joules_per_flop
    else:
        assert picked == socket
    if sys.platform == "darwin":
        return  # no /proc/cpuinfo there
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: {model}\n")
    monkeypatch.setattr(profiles, "CPUINFO", Path(info))
    assert profiles.cpu_model(info) == model
    assert profile_for(CPU).name == profile_for(CPU, profiles.cpu_model(info)).name


def test_every_profile_says_where_its_numbers_come_from():
    for p in PROFILES.values():
        assert p.joules_per_flop > 0 and p.joules_per_byte > 0 and p.idle_watts > 0
        assert ("TDP" in p.source_note and "bandwidth" in p.source_note), p.name


def test_calibrate_recovers_known_coefficients():
    jpf, jpb, idle = 3e-11, 2e-10, 40.0
    runs = [(2e12, 1e9, 1.0), (1e10, 5e11, 2.0), (5e11, 5e10, 0.5), (1e12, 2e11, 3.0)]
    joules = [f * jpf + b * jpb + idle * s for f, b, s in runs]
    flops, nbytes, secs = zip(*runs)
    fitted = calibrate("mine", joules, flops, nbytes, secs)
    assert fitted.joules_per_flop == pytest.approx(jpf, rel=1e-6)
    assert fitted.joules_per_byte == pytest.approx(jpb, rel=1e-6)
    assert fitted.idle_watts == pytest.approx(idle, rel=1e-6) and "fitted" in fitted.source_note
    given = calibrate("mine", joules[:2], flops[:2], nbytes[:2], secs[:2], idle_watts=idle)
    assert given.joules_per_flop == pytest.approx(jpf) and given.joules_per_byte == pytest.approx(jpb)


def test_calibrate_is_non_negative_and_explains_bad_input():
    # bytes explain nothing (their least-squares coefficient would be negative): clamped to 0
    fitted = calibrate("x", [1.0, 2.0, 3.0], [1e9, 2e9, 3e9], [3e9, 1e9, 2e9], [0, 0, 0], idle_watts=0.0)
    assert fitted.joules_per_byte >= 0 and fitted.joules_per_flop > 0
    with pytest.raises(CalibrationError, match="cannot separate"):
        calibrate("x", 5.0, 1e9, 1e9, 1.0, idle_watts=0.0)
    one = calibrate("x", 5.0, 1e9, 1e9, 1.0, idle_watts=0.0, base=FLAT)
    assert one.joules(1e9, 1e9) == pytest.approx(5.0) and "'flat'" in one.source_note
    with pytest.raises(CalibrationError, match=">= 0"):
        calibrate("x", [-1.0], [1.0], [1.0], [1.0])
    with pytest.raises(CalibrationError, match="one entry per run"):
        calibrate("x", [1.0, 2.0], [1.0], [1.0], [1.0])
