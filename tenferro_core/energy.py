"""The energy telemetry contract and the meters that need no plugin."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol, runtime_checkable


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
