"""The energy contracts: a backend's `EnergyTelemetry`, and `Meter`s, the plugins that read
energy counters (NVML, RAPL) or estimate it (cost model x device profile), with the values
they return (`Reading`, `MeterStatus`) and their error (`MeterError`). DESIGN.md section 8.

Every reading says its source (one of `SOURCES`) and whether it is approximate; a meter that
cannot read says why (`MeterStatus.reason`, `MeterError`) instead of returning 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .errors import MeterError  # noqa: F401  (defined with the other errors; part of the energy contract)

SOURCES = ("nvml", "rapl", "power x time", "estimate")


@dataclass(frozen=True)
class Reading:
    """A meter's cumulative energy counter for one device at `time` (perf_counter seconds):
    joules since the meter's own origin, never decreasing (wraparound already handled).
    `approximate` marks values not read from a counter that had updated (power x time over a
    window shorter than the counter's update period, say); `note` says how."""

    joules: float
    time: float
    source: str
    approximate: bool = False
    note: str = ""


MAX_DEVICE_WATTS = 1e6  # no single device draws a megawatt: a reading implying more is broken


class MeterWarning(RuntimeWarning):
    """A meter failed or returned an impossible reading inside a measured window, and the
    region fell back to the next meter (the region's note says why). Filter it with
    ``warnings.filterwarnings("ignore", category=MeterWarning)``."""


@dataclass(frozen=True)
class MeterStatus:
    """What a meter can read on this machine: `available`, else `reason` (permissions, no
    such counter, library missing); `domains` it measures (e.g. ("package-0", "dram"))."""

    name: str
    source: str
    available: bool
    reason: str = ""
    domains: tuple[str, ...] = ()


@runtime_checkable
class Meter(Protocol):
    """An energy meter registered by a plugin (``registry.add_meter(name, meter)``).

    `covers(device)` says whether it measures that device (a `tenferro_runtime.Device`: RAPL
    covers every CPU device, NVML ``torch:cuda:N``); `read(device)` returns the cumulative
    counter of the domain covering it, or raises `MeterError`; `update_period` is how often the
    counter moves (s), so shorter windows are extended or labelled approximate; `priority`
    orders meters covering the same device (higher first; the estimate is lowest).

    Accounting refuses (as a `MeterError`, then falls back to the next meter) a reading that
    no device can produce: not finite, negative, below the previous one, or more joules since
    the previous reading than `MAX_DEVICE_WATTS` (1 MW) over the time between them (at least
    `update_period`). A meter measuring something bigger than one device sets an optional
    ``max_watts`` attribute.
    """

    name: str
    source: str
    update_period: float
    priority: int

    def covers(self, device: Any) -> bool: ...

    def probe(self) -> MeterStatus: ...

    def read(self, device: Any) -> Reading: ...


@runtime_checkable
class EnergyTelemetry(Protocol):
    """Energy readings of one device; `measured` is False for cost-model estimates."""

    measured: bool
    source: str

    def energy_consumed_joules(self) -> float: ...

    def power_draw_watts(self) -> float | None: ...

    def temperature_celsius(self) -> float | None: ...

    def reset_counters(self) -> None: ...


class RaplTelemetry:
    """CPU package energy from the Linux powercap (RAPL) counter, where readable."""

    measured = True
    source = "rapl"

    def __init__(self, zone: Path):
        self._file = zone / "energy_uj"
        self._wrap = int((zone / "max_energy_range_uj").read_text())
        self._start = self._read()
        self._last = (self._start, time.perf_counter())

    @staticmethod
    def find() -> RaplTelemetry | None:
        for zone in sorted(Path("/sys/class/powercap").glob("intel-rapl:*")):
            try:
                int((zone / "energy_uj").read_text())
                return RaplTelemetry(zone)
            except (OSError, ValueError):
                continue
        return None

    def _read(self) -> int:
        return int(self._file.read_text())

    def energy_consumed_joules(self) -> float:
        delta = self._read() - self._start
        return (delta % self._wrap) / 1e6

    def power_draw_watts(self) -> float | None:
        now, t = self._read(), time.perf_counter()
        (e0, t0), self._last = self._last, (now, t)
        return ((now - e0) % self._wrap) / 1e6 / (t - t0) if t > t0 else None

    def temperature_celsius(self) -> float | None:
        return None

    def reset_counters(self) -> None:
        self._start = self._read()


class EstimatedTelemetry:
    """A cost-model meter: energy = FLOPs x J/FLOP + bytes x J/byte, per device profile."""

    measured = False
    source = "cost-model"

    def __init__(self, joules_per_flop: float = 1e-10, joules_per_byte: float = 5e-10):
        self.joules_per_flop = joules_per_flop
        self.joules_per_byte = joules_per_byte
        self._joules = 0.0

    def record(self, flops: float, bytes_moved: float) -> float:
        """Add one op's estimate and return it."""
        j = flops * self.joules_per_flop + bytes_moved * self.joules_per_byte
        self._joules += j
        return j

    def energy_consumed_joules(self) -> float:
        return self._joules

    def power_draw_watts(self) -> float | None:
        return None

    def temperature_celsius(self) -> float | None:
        return None

    def reset_counters(self) -> None:
        self._joules = 0.0
