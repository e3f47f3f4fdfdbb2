"""Entry point ``meters`` of the root distribution: registers the ``rapl`` meter (CPU powercap
counters) and the ``estimate`` meter (cost rules x device profile, the fallback). Constructing
them reads nothing; they touch sysfs and /proc/cpuinfo on first use."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .meters import EstimateMeter, RaplMeter


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_meter("rapl", RaplMeter())
    registry.add_meter("estimate", EstimateMeter())
