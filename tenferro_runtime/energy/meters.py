"""The root distribution's energy meters (RAPL powercap, the cost-model estimate), the
`checked` read that turns a meter's garbage into `MeterError`, and `meters_for`, the order in
which accounting tries the meters of a device. DESIGN.md section 8.

Meters report cumulative `Reading`s (joules since the meter's origin, never decreasing);
accounting subtracts two of them. A meter that cannot read says why (`probe()`'s reason, a
`MeterError`), never a silent 0.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tenferro_core.energy import MAX_DEVICE_WATTS, SOURCES, Meter, MeterError, MeterStatus, Reading

from .profiles import DeviceProfile, _device_id, profile_for

POWERCAP = Path("/sys/class/powercap")
RAPL_MAX_WATTS = 5000.0  # no CPU package draws this: a "wrap" implying more is a broken counter
_ROOT_ONLY = ("root only since Linux 5.10 (CVE-2020-8694); `sudo chmod o+r {path}` "
              "(for every RAPL zone) or run as root")


def _is_cpu(device: Any) -> bool:
    return _device_id(device) == "cpu"


@dataclass
class _Zone:
    """One powercap zone: its unwrapped total (uJ since the first read) and last raw value."""

    path: Path
    label: str
    kind: str  # "package" or "dram"
    max_range: int | None = None
    last: int | None = None
    total: int = 0
    last_time: float = 0.0


class RaplMeter:
    """CPU energy from the Linux powercap RAPL counters (``energy_uj`` of each zone).

    Covers every CPU device (all share the package counters). `read(device)` sums the package
    zones (name ``package-N``, Intel and AMD alike; a zone duplicated by ``intel-rapl-mmio`` is
    counted once); ``read(device, domain="dram")`` sums the DRAM subzones. Each zone is unwrapped
    with its own ``max_energy_range_uj`` (a counter smaller than before has wrapped once; read at
    least once per wrap period, minutes at full load). Unreadable counters: `probe()` says why
    (no powercap in VMs; ``energy_uj`` root-only since Linux 5.10) and `read` raises `MeterError`.
    """

    name = "rapl"
    source = "rapl"
    update_period = 0.001
    priority = 50
    description = "CPU devices (*:cpu): RAPL package domains, DRAM separately"

    def __init__(self, root: Path | str = POWERCAP, clock: Callable[[], float] = time.perf_counter):
        self.root = Path(root)
        self._clock = clock
        self._lock = threading.Lock()
        self._zones: list[_Zone] | None = None

    def covers(self, device: Any) -> bool:
        return _is_cpu(device)

    @staticmethod
    def _read_text(path: Path) -> str:
        return path.read_text()

    def _read_int(self, path: Path) -> int:
        """An integer sysfs file, or MeterError saying why not (permissions, garbage)."""
        try:
            text = self._read_text(path)
        except PermissionError as exc:
            raise MeterError(f"{path} is not readable ({exc.strerror or exc}): "
                             + _ROOT_ONLY.format(path=path)) from exc
        except OSError as exc:
            raise MeterError(f"reading {path} failed: {exc}") from exc
        try:
            value = int(text.strip())
        except ValueError as exc:
            raise MeterError(f"{path} holds {text.strip()[:40]!r}, not an integer") from exc
        if value < 0:
            raise MeterError(f"{path} holds a negative counter {value}")
        return value

    def _discover(self) -> list[_Zone]:
        if self._zones is not None:
            return self._zones
        if not self.root.is_dir():
            raise MeterError(f"no powercap directory {self.root} (no RAPL interface: typical in VMs "
                             f"and containers, or the intel_rapl_common module is not loaded)")
        paths = sorted({*self.root.glob("*:*"), *self.root.glob("*:*/*:*")},
                       key=lambda p: ("mmio" in p.name, p.name.count(":"), p.name))
        zones: dict[str, _Zone] = {}
        resolved: set[Path] = set()
        for path in paths:
            real = path.resolve()
            try:
                name = path.joinpath("name").read_text().strip()
            except OSError:
                continue
            if real in resolved:
                continue
            resolved.add(real)
            if name.startswith("package"):
                label, kind = name, "package"
            elif name == "dram":
                parent = self.root / path.name.rsplit(":", 1)[0]
                parent = parent if parent.exists() else path.parent
                try:
                    label = f"{parent.joinpath('name').read_text().strip()}/dram"
                except OSError:
                    label = f"{path.name}/dram"
                kind = "dram"
            else:
                continue  # core, uncore, psys: inside or beside the package domain
            zones.setdefault(label, _Zone(path, label, kind))
        self._zones = list(zones.values())
        return self._zones

    def probe(self) -> MeterStatus:
        try:
            with self._lock:
                zones = self._discover()
                if not any(z.kind == "package" for z in zones):
                    raise MeterError(f"no RAPL package zone (a zone whose name starts with 'package') "
                                     f"under {self.root}")
                domains = []
                for z in zones:
                    try:
                        self._read_int(z.path / "energy_uj")
                        self._read_int(z.path / "max_energy_range_uj")
                    except MeterError:
                        if z.kind == "package":
                            raise
                        continue  # an unreadable DRAM zone leaves the package readings usable
                    domains.append(z.label)
        except MeterError as exc:
            return MeterStatus(self.name, self.source, False, str(exc))
        return MeterStatus(self.name, self.source, True, domains=tuple(domains))

    def read(self, device: Any, domain: str = "package") -> Reading:
        """Joules of the `domain` ("package" or "dram") zones since this meter first read them."""
        if not self.covers(device):
            raise MeterError(f"rapl measures CPU devices, not {device}")
        with self._lock:
            zones = [z for z in self._discover() if z.kind == domain]
            if not zones:
                raise MeterError(f"no RAPL {domain} zone under {self.root}")
            raws = []
            for z in zones:
                if z.max_range is None:
                    z.max_range = self._read_int(z.path / "max_energy_range_uj")
                raws.append(self._read_int(z.path / "energy_uj"))
            now = self._clock()
            totals = [self._advance(z, raw, now) for z, raw in zip(zones, raws)]
            for z, raw, total in zip(zones, raws, totals):  # all zones read fine: commit
                z.last, z.total, z.last_time = raw, total, now
        return Reading(sum(totals) / 1e6, now, self.source,
                       note=f"rapl {domain}: {', '.join(z.label for z in zones)}")

    @staticmethod
    def _advance(z: _Zone, raw: int, now: float) -> int:
        """The zone's total after reading `raw` (uJ), unwrapping one wraparound."""
        if z.max_range and raw > z.max_range:
            raise MeterError(f"{z.path}/energy_uj = {raw} exceeds max_energy_range_uj = {z.max_range}")
        if z.last is None:
            return 0
        if raw >= z.last:
            return z.total + raw - z.last
        if not z.max_range:
            raise MeterError(f"{z.path}/energy_uj went back from {z.last} to {raw} and "
                             f"max_energy_range_uj is 0: cannot unwrap")
        delta = raw + z.max_range - z.last
        dt = now - z.last_time
        if dt <= 0 or delta / 1e6 / dt > RAPL_MAX_WATTS:
            raise MeterError(f"{z.path}/energy_uj went back from {z.last} to {raw} in {dt:.3g} s; as a "
                             f"wraparound that is {delta / 1e6:.3g} J: a broken counter")
        return z.total + delta


class EstimateMeter:
    """The cost-model estimate, the fallback for every device: accounting `charge`s each op's
    FLOPs and bytes; `read` gives the charged joules (coefficients of the device's profile)
    plus ``profile.idle_watts`` x the time since the meter's origin. Thread-safe.

    `profiles` maps device names ("torch:cuda:0") to profiles (a calibrated one, say); others
    come from `profile_for`, with the backend's ``device_name(id)`` (when it has one) as hint.
    """

    name = "estimate"
    source = "estimate"
    update_period = 0.0
    priority = 0
    description = "every device: cost rules (FLOPs, bytes) x a device profile"

    def __init__(self, profiles: Mapping[str, DeviceProfile] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._origin = clock()
        self._lock = threading.Lock()
        self._joules: dict[str, float] = {}
        self._profiles: dict[str, DeviceProfile] = dict(profiles or {})

    def covers(self, device: Any) -> bool:
        return True

    def probe(self) -> MeterStatus:
        return MeterStatus(self.name, self.source, True, domains=("cost model",))

    def profile(self, device: Any) -> DeviceProfile:
        """The profile used for `device` (resolved once per device)."""
        prof = self._profiles.get(device if isinstance(device, str) else str(device))
        if prof is None:
            hint = None
            describe = getattr(getattr(device, "backend", None), "device_name", None)
            if callable(describe):
                try:
                    hint = describe(_device_id(device))
                except Exception:  # a backend that cannot name its device: the generic profile
                    hint = None
            prof = profile_for(device, hint if isinstance(hint, str) else None)
            with self._lock:
                prof = self._profiles.setdefault(str(device), prof)
        return prof

    def set_profile(self, device: Any, profile: DeviceProfile) -> None:
        """Use `profile` (from `calibrate`, say) for `device` from now on."""
        with self._lock:
            self._profiles[str(device)] = profile

    def charge(self, device: Any, flops: float, bytes: float) -> float:
        """Add one op's cost to `device` and return its joules."""
        prof = self._profiles.get(device) or self.profile(device)
        joules = flops * prof.joules_per_flop + bytes * prof.joules_per_byte
        with self._lock:
            try:
                self._joules[device] += joules  # keeps the key first stored: a plain str
            except KeyError:
                key = str(device)  # a Device's name, so no Device (nor its runtime) is kept alive
                self._joules[key] = self._joules.get(key, 0.0) + joules
        return joules

    def read(self, device: Any) -> Reading:
        key = device if isinstance(device, str) else str(device)
        prof = self._profiles.get(key) or self.profile(device)
        with self._lock:
            now = self._clock()
            joules = self._joules.get(key, 0.0)
        return Reading(joules + prof.idle_watts * max(now - self._origin, 0.0), now, self.source,
                       note=f"estimate: profile {prof.name!r}")


def _max_watts(meter: Any) -> float:
    """The most power `meter`'s device may draw: its ``max_watts`` if it has a positive one,
    else `MAX_DEVICE_WATTS`."""
    w = getattr(meter, "max_watts", None)
    if isinstance(w, (int, float)) and not isinstance(w, bool) and w > 0:
        return float(w)
    return MAX_DEVICE_WATTS


def _period(meter: Any) -> float:
    p = getattr(meter, "update_period", 0.0)
    ok = isinstance(p, (int, float)) and not isinstance(p, bool) and math.isfinite(p) and p > 0
    return float(p) if ok else 0.0


def checked(meter: Any, device: Any, previous: Reading | None) -> Reading:
    """`meter.read(device)`, or MeterError naming the meter, the device and what was wrong: the
    read raised, returned no Reading, a non-finite or negative value, an unknown source, less
    than `previous` (a counter must not decrease), or more joules since `previous` than the
    device can draw in the time between them (`MAX_DEVICE_WATTS`, or the meter's `max_watts`,
    times that time, at least the meter's `update_period` and 1 us: a counter that jumps by
    1e300 J, say)."""
    name = getattr(meter, "name", type(meter).__name__)
    where = f"meter {name!r} reading {device}"
    try:
        got = meter.read(device)
    except Exception as exc:  # a broken meter must not crash the measured program
        raise MeterError(f"{where}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(got, Reading):
        raise MeterError(f"{where}: returned {type(got).__name__} {got!r:.80}, not a Reading")
    j, t = got.joules, got.time
    if isinstance(j, bool) or not isinstance(j, (int, float)) or not math.isfinite(j) or j < 0:
        raise MeterError(f"{where}: returned {j!r} J; expected a finite number >= 0")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        raise MeterError(f"{where}: returned time {t!r}; expected a finite perf_counter value")
    if got.source not in SOURCES:
        raise MeterError(f"{where}: source {got.source!r} is none of {SOURCES}")
    if previous is not None:
        if j < previous.joules:
            raise MeterError(f"{where}: counter decreased from {previous.joules!r} J to {j!r} J")
        if t < previous.time:
            raise MeterError(f"{where}: time went back from {previous.time!r} to {t!r}")
        gained, elapsed = j - previous.joules, t - previous.time
        watts = _max_watts(meter)
        if gained > watts * max(elapsed, _period(meter), 1e-6):
            raise MeterError(
                f"{where}: the counter rose by {gained:.4g} J in {elapsed:.3g} s, more than any one device "
                f"draws ({watts:.4g} W); the reading is broken (max_watts on the meter raises this bound)")
    return got


@dataclass
class _Probed:
    status: dict[str, MeterStatus]
    fallback: EstimateMeter | None = None


# runtime -> its meters' probe results: bounded by the runtimes alive and the meters they hold
_PROBED: weakref.WeakKeyDictionary[Any, _Probed] = weakref.WeakKeyDictionary()
_PROBED_LOCK = threading.Lock()


def _probe(name: str, meter: Any) -> MeterStatus:
    source = getattr(meter, "source", "?")
    try:
        status = meter.probe()
    except Exception as exc:  # a probe that raises means: not available, and why
        return MeterStatus(name, source, False, f"probe raised {type(exc).__name__}: {exc}")
    if not isinstance(status, MeterStatus):
        return MeterStatus(name, source, False, f"probe returned {status!r:.80}, not a MeterStatus")
    return status


def _entry(runtime: Any) -> _Probed:
    with _PROBED_LOCK:
        entry = _PROBED.get(runtime)
        if entry is None:
            entry = _PROBED[runtime] = _Probed({})
        return entry


def meter_status(runtime: Any, name: str) -> MeterStatus:
    """The probe result of `runtime.meters[name]`, probed once per runtime (see `forget_probes`)."""
    entry = _entry(runtime)
    status = entry.status.get(name)
    if status is None:
        status = _probe(name, runtime.meters[name])
        with _PROBED_LOCK:
            status = entry.status.setdefault(name, status)
    return status


def forget_probes(runtime: Any) -> None:
    """Probe `runtime`'s meters again on next use (after fixing permissions, say)."""
    with _PROBED_LOCK:
        _PROBED.pop(runtime, None)


def meters_for(runtime: Any, device: Any) -> list[Meter]:
    """The available meters covering `device`, highest priority first, an estimate last (the
    runtime's own, else one kept per runtime for it): the order accounting tries them in."""
    found = []
    for name, meter in runtime.meters.items():
        try:
            covers = bool(meter.covers(device))
        except Exception:  # a meter that cannot say is not used
            covers = False
        if covers and meter_status(runtime, name).available:
            found.append(meter)
    found.sort(key=lambda m: (m.source == "estimate", -m.priority))
    if not found or found[-1].source != "estimate":
        entry = _entry(runtime)
        with _PROBED_LOCK:
            if entry.fallback is None:
                entry.fallback = EstimateMeter()
        found.append(entry.fallback)
    return found


__all__ = ["EstimateMeter", "RaplMeter", "checked", "forget_probes", "meter_status", "meters_for"]
