"""What energy accounting records: per device per region (`DeviceEnergy`), per op kind
(`OpEnergy`), and regions (`Region`: a `measure()` block, a compiled call, an optimizer step,
an epoch, the process) nested in a tree. The report reads these; nothing else does."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DeviceEnergy:
    """Joules one device used in a region, and where the number comes from: `source` (one of
    tenferro_core.energy.SOURCES), the `meter`'s name, the profile for estimates, whether it
    is `approximate` and a `note` (why a fallback was used, how a short window was handled)."""

    device: str
    joules: float
    source: str
    meter: str
    approximate: bool = False
    note: str = ""


@dataclass
class OpEnergy:
    """The ops of one primitive on one device in a region: how many ran, their cost-rule FLOPs
    and bytes, and their share of the device's joules (cost-weighted, so the shares of a
    region's ops add up to its measured total)."""

    name: str
    category: str
    device: str
    count: int = 0
    flops: int = 0
    bytes: int = 0
    joules: float = 0.0


@dataclass
class Region:
    """One accounted region. `kind` is "region" (measure()), "call" (a compiled call), "step"
    (an optimizer step), "epoch" or "process"; `children` are the regions nested in it."""

    label: str
    kind: str = "region"
    start: float = 0.0
    end: float = 0.0
    devices: dict[str, DeviceEnergy] = field(default_factory=dict)
    ops: dict[tuple[str, str], OpEnergy] = field(default_factory=dict)
    children: list[Region] = field(default_factory=list)

    @property
    def joules(self) -> float:
        return sum(d.joules for d in self.devices.values())

    @property
    def seconds(self) -> float:
        return max(self.end - self.start, 0.0)

    @property
    def watts(self) -> float | None:
        return self.joules / self.seconds if self.seconds > 0 else None

    @property
    def sources(self) -> str:
        """The sources of its devices' numbers, e.g. "rapl" or "estimate (numpy:cpu)"."""
        return ", ".join(sorted({d.source + (" ~" if d.approximate else "") for d in self.devices.values()}))

    def by_category(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for op in self.ops.values():
            out[op.category] = out.get(op.category, 0.0) + op.joules
        return out


__all__ = ["DeviceEnergy", "OpEnergy", "Region"]
