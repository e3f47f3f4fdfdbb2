"""``python -m tenferro_runtime energy``: the registered meters, what each can read on this
machine (or why not), the meter accounting would use for each CPU and CUDA device, and the
estimate's profile for each."""

from __future__ import annotations

from typing import Any

from .meters import meter_status, meters_for


def energy_report(runtime: Any) -> list[str]:
    """The lines of the listing for `runtime`."""
    out = [f"tenferro energy meters: {len(runtime.meters)} registered"]
    devices = []
    for name in runtime.device_names():
        backend, _, dev_id = name.partition(":")
        if dev_id == "cpu" or dev_id.startswith("cuda"):
            try:
                devices.append(runtime.device(name))
            except Exception as exc:  # a backend that cannot build its device: say so, go on
                out.append(f"  (device {name} unavailable: {type(exc).__name__}: {exc})")
    for name, meter in sorted(runtime.meters.items(), key=lambda kv: -getattr(kv[1], "priority", 0)):
        status = meter_status(runtime, name)
        covered = [str(d) for d in devices if _covers(meter, d)]
        what = getattr(meter, "description", None) or "(no description)"
        out.append(f"\n  {name:<10} source {meter.source!r:<14} priority {meter.priority:<4} "
                   f"update period {meter.update_period * 1e3:g} ms")
        out.append(f"      covers: {what}; here: {', '.join(covered) or 'no device'}")
        if status.available:
            out.append(f"      available: {', '.join(status.domains) or 'yes'}")
        else:
            out.append(f"      unavailable: {status.reason}")
    out.append("\ndevices (meter accounting uses, then its fallbacks):")
    for dev in devices:
        order = meters_for(runtime, dev)
        estimate = order[-1]
        profile = estimate.profile(dev) if hasattr(estimate, "profile") else None
        chain = " -> ".join(m.name for m in order)
        prof = f"; estimate profile {profile.name!r}" if profile is not None else ""
        out.append(f"  {str(dev):<14} {chain}{prof}")
        if profile is not None:
            out.append(f"      {profile.source_note}")
    if not devices:
        out.append("  no CPU or CUDA device (is a backend installed?)")
    return out


def _covers(meter: Any, device: Any) -> bool:
    try:
        return bool(meter.covers(device))
    except Exception:
        return False


def main() -> int:
    """Print the listing for the default runtime; always exits 0 (a listing, not a check)."""
    from ..runtime import default_runtime

    print("\n".join(energy_report(default_runtime())))
    return 0
