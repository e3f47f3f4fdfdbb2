"""RaplMeter against a fake powercap tree: cumulative reads, wraparound, packages summed, DRAM
separate, missing tree, root-only counters (Linux >= 5.10), garbage -> MeterError."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenferro_core.energy import MeterError, Reading
from tenferro_runtime.energy.meters import RaplMeter, checked

CPU, GPU = "numpy:cpu", "torch:cuda:0"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def zone(root: Path, zid: str, name: str, uj: int, max_uj: int = 1_000_000_000) -> Path:
    path = root / zid
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


def set_uj(path: Path, uj: int | str) -> None:
    (path / "energy_uj").write_text(f"{uj}\n")


@pytest.fixture
def tree(tmp_path):
    """Two packages, each with core and dram subzones, plus an mmio duplicate of package-0."""
    root = tmp_path / "powercap"
    z = {
        "p0": zone(root, "intel-rapl:0", "package-0", 5_000_000, max_uj=10_000_000),
        "p1": zone(root, "intel-rapl:1", "package-1", 1_000_000),
        "d0": zone(root, "intel-rapl:0:1", "dram", 300_000),
        "d1": zone(root, "intel-rapl:1:1", "dram", 700_000),
        "core": zone(root, "intel-rapl:0:0", "core", 42),
        "mmio": zone(root, "intel-rapl-mmio:0", "package-0", 9_999),
    }
    return root, z


def test_cumulative_reads_sum_packages_and_keep_dram_separate(tree):
    root, z = tree
    clock = Clock()
    meter = RaplMeter(root, clock=clock)
    status = meter.probe()
    assert status.available and status.source == "rapl"
    assert set(status.domains) == {"package-0", "package-1", "package-0/dram", "package-1/dram"}
    first = meter.read(CPU)
    assert first.joules == 0.0 and first.source == "rapl" and "package-0" in first.note
    assert meter.read(CPU, domain="dram").joules == 0.0
    set_uj(z["p0"], 6_000_000)  # +1 J
    set_uj(z["p1"], 3_500_000)  # +2.5 J
    set_uj(z["d0"], 800_000)  # +0.5 J
    set_uj(z["mmio"], 99_999_999)  # the duplicate is not counted
    clock.t += 1.0
    r = meter.read(CPU)
    assert r.joules == pytest.approx(3.5) and r.time == 101.0
    assert meter.read(CPU, domain="dram").joules == pytest.approx(0.5)
    set_uj(z["p1"], 4_500_000)
    clock.t += 1.0
    assert meter.read("torch:cpu").joules == pytest.approx(4.5)  # every CPU device, one counter


def test_wraparound_adds_max_energy_range(tree):
    root, z = tree
    clock = Clock()
    meter = RaplMeter(root, clock=clock)
    set_uj(z["p0"], 9_000_000)  # max_energy_range_uj is 10 J
    prev = checked(meter, CPU, None)
    set_uj(z["p0"], 500_000)  # wrapped: 1 J to the top, then 0.5 J
    clock.t += 2.0
    r = checked(meter, CPU, prev)
    assert r.joules == pytest.approx(1.5) and r.joules > prev.joules
    set_uj(z["p0"], 2_500_000)
    clock.t += 1.0
    assert checked(meter, CPU, r).joules == pytest.approx(3.5)


def test_implausible_wrap_is_an_error_and_leaves_state(tree):
    root, z = tree
    clock = Clock()
    meter = RaplMeter(root, clock=clock)
    meter.read(CPU)
    set_uj(z["p0"], 4_000_000)  # went back 1 J: a wrap would be 9 J in 1 ms
    clock.t += 0.001
    with pytest.raises(MeterError, match="went back"):
        meter.read(CPU)
    set_uj(z["p0"], 5_500_000)
    clock.t += 1.0
    assert meter.read(CPU).joules == pytest.approx(0.5)


def test_no_powercap_directory(tmp_path):
    status = RaplMeter(tmp_path / "missing").probe()
    assert not status.available and "no powercap directory" in status.reason and "VM" in status.reason
    with pytest.raises(MeterError, match="no powercap"):
        RaplMeter(tmp_path / "missing").read(CPU)


def test_no_package_zone(tmp_path):
    zone(tmp_path, "intel-rapl:0", "psys", 1)
    status = RaplMeter(tmp_path).probe()
    assert not status.available and "no RAPL package zone" in status.reason


def test_permission_error_says_root_only_since_5_10(tree, monkeypatch):
    root, _ = tree
    real = RaplMeter._read_text

    def deny(path: Path) -> str:
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(RaplMeter, "_read_text", staticmethod(deny))
    meter = RaplMeter(root)
    status = meter.probe()
    assert not status.available
    assert "5.10" in status.reason and "root" in status.reason and "chmod o+r" in status.reason
    with pytest.raises(MeterError, match="root only"):
        meter.read(CPU)


def test_unreadable_dram_leaves_package_available(tree, monkeypatch):
    root, z = tree
    real = RaplMeter._read_text

    def deny_dram(path: Path) -> str:
        if path.parent == z["d1"]:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(RaplMeter, "_read_text", staticmethod(deny_dram))
    status = RaplMeter(root).probe()
    assert status.available and "package-1/dram" not in status.domains and "package-1" in status.domains


@pytest.mark.parametrize("garbage", ["not-a-number", "-5", "", "99999999999"])
def test_garbage_counter_is_a_meter_error(tree, garbage):
    root, z = tree
    meter = RaplMeter(root, clock=Clock())
    prev = checked(meter, CPU, None)
    set_uj(z["p0"], garbage)
    with pytest.raises(MeterError) as info:
        checked(meter, CPU, prev)
    assert "'rapl'" in str(info.value) and CPU in str(info.value)


def test_covers_cpu_devices_only(tree):
    root, _ = tree
    meter = RaplMeter(root)
    assert meter.covers(CPU) and meter.covers("torch:cpu") and not meter.covers(GPU)
    with pytest.raises(MeterError, match="CPU devices"):
        meter.read(GPU)


def test_nested_tree_is_found_once(tmp_path):
    outer = zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    zone(outer, "intel-rapl:0:0", "dram", 2_000_000)
    status = RaplMeter(tmp_path).probe()
    assert status.available and status.domains == ("package-0", "package-0/dram")
    assert isinstance(RaplMeter(tmp_path).read(CPU, domain="dram"), Reading)
