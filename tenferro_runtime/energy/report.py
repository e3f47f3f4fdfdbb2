"""Energy reports: a text table (per op category, per region: steps, epochs) with the source
of every number, and a matplotlib figure saved as PNG (energy and power over steps or
epochs, from zero, on integer epoch ticks; energy by op category). matplotlib is imported only
by `figure` and `plot`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def figure(regions: Region | Sequence[Region], *, title: str = "energy") -> Any:
    """The matplotlib Figure `plot` saves: left, energy (bars) and average power (line, right
    axis) per region, numbered 1, 2, ... on integer ticks, both axes starting at zero; right,
    the energy by op category. Each panel says where its numbers come from. A plain
    `matplotlib.figure.Figure`, not registered with pyplot (nothing to close, no GUI)."""
    regions = _check(regions, "figure")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(11, 4))
    ax_e, ax_c = fig.subplots(1, 2, gridspec_kw={"width_ratios": [2, 1]})
    x = range(1, len(regions) + 1)
    ax_e.bar(x, [r.joules for r in regions], color="tab:blue", label="energy (J)")
    ax_e.set_xlabel(regions[0].kind if len({r.kind for r in regions}) == 1 else "region")
    ax_e.set_ylabel("energy (J)")
    ax_e.set_ylim(bottom=0)
    ax_e.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs and steps are counted
    ax_p = ax_e.twinx()
    ax_p.plot(list(x), [r.watts or 0.0 for r in regions], color="tab:red", marker="o", label="power (W)")
    ax_p.set_ylabel("average power (W)")
    ax_p.set_ylim(bottom=0)  # power is compared from zero, not from the lowest epoch
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
    return fig


def plot(regions: Region | Sequence[Region], path: str | Path, *, title: str = "energy") -> Path:
    """Save `figure(regions, title=title)` as a PNG at `path` (its folder created) and return
    the path. Drawn with matplotlib's Agg renderer, whatever pyplot's backend is."""
    regions = _check(regions, "plot")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure(regions, title=title).savefig(path, dpi=100, format="png")
    return path


__all__ = ["figure", "plot", "table"]
