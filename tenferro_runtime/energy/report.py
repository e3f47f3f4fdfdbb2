"""Energy reports: a text table (per op category, per region: steps, epochs) with the source
of every number, and a matplotlib figure saved as PNG (energy and power over steps or
epochs; energy by op category). matplotlib is imported only by `plot`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tenferro_core.errors import ArgumentError

from .records import Region


def _joules(j: float) -> str:
    for unit, scale in (("kJ", 1e3), ("J", 1.0), ("mJ", 1e-3)):
        if abs(j) >= scale:
            return f"{j / scale:.3g} {unit}"
    return f"{j * 1e6:.3g} uJ"


def _watts(w: float | None) -> str:
    return "-" if w is None else f"{w:.3g} W"


def _check(regions: Sequence[Region], fn: str) -> list[Region]:
    if isinstance(regions, Region):
        return [regions]
    regions = list(regions) if isinstance(regions, (list, tuple)) else [regions]
    if not regions or not all(isinstance(r, Region) for r in regions):
        raise ArgumentError(f"{fn}: expected a Region or a non-empty sequence of Regions (from "
                            f"tenferro_runtime.energy.measure), got {regions!r:.80}")
    return regions


def table(regions: Region | Sequence[Region], *, categories: bool = True) -> str:
    """A text table: one row per region (time, joules, average watts, sources), then the
    joules per op category summed over the regions, with each category's share."""
    regions = _check(regions, "table")
    rows = [("region", "kind", "time", "energy", "power", "source")]
    for r in regions:
        rows.append((r.label, r.kind, f"{r.seconds:.3g} s", _joules(r.joules), _watts(r.watts), r.sources))
    total = sum(r.joules for r in regions)
    seconds = sum(r.seconds for r in regions)
    power = _watts(total / seconds if seconds else None)
    rows.append(("total", "", f"{seconds:.3g} s", _joules(total), power, _all_sources(regions)))
    out = _format(rows)
    if categories:
        cats: dict[str, float] = {}
        for r in regions:
            for c, j in r.by_category().items():
                cats[c] = cats.get(c, 0.0) + j
        if cats:
            rows = [("op category", "energy", "share")]
            for c, j in sorted(cats.items(), key=lambda kv: -kv[1]):
                rows.append((c, _joules(j), f"{100 * j / total:.1f}%" if total else "-"))
            out += "\n\n" + _format(rows)
    notes = sorted({f"{d.device}: {d.note}" for r in regions for d in r.devices.values() if d.note})
    if notes:
        out += "\n\nnotes:\n" + "\n".join(f"  {n}" for n in notes)
    return out


def _all_sources(regions: list[Region]) -> str:
    return ", ".join(sorted({s for r in regions for s in r.sources.split(", ") if s}))


def _format(rows: list[tuple]) -> str:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(regions: Region | Sequence[Region], path: str | Path, *, title: str = "energy") -> Path:
    """Save a PNG: energy and average power per region (steps or epochs, in order) and the
    energy by op category; each panel says where its numbers come from. Returns the path."""
    regions = _check(regions, "plot")
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax_e, ax_c) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    x = range(1, len(regions) + 1)
    ax_e.bar(x, [r.joules for r in regions], color="tab:blue", label="energy (J)")
    ax_e.set_xlabel(regions[0].kind if len({r.kind for r in regions}) == 1 else "region")
    ax_e.set_ylabel("energy (J)")
    ax_p = ax_e.twinx()
    ax_p.plot(list(x), [r.watts or 0.0 for r in regions], color="tab:red", marker="o", label="power (W)")
    ax_p.set_ylabel("average power (W)")
    ax_e.set_title(f"{title} per {ax_e.get_xlabel()} [{_all_sources(regions)}]")
    cats: dict[str, float] = {}
    for r in regions:
        for c, j in r.by_category().items():
            cats[c] = cats.get(c, 0.0) + j
    names = sorted(cats, key=lambda c: -cats[c])
    ax_c.barh(names[::-1], [cats[c] for c in names[::-1]], color="tab:green")
    ax_c.set_xlabel("energy (J)")
    ax_c.set_title("by op category")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


__all__ = ["plot", "table"]
