"""The energy report: a table with each region's energy, power and sources and the energy
per op category, and a PNG plot; bad input is a typed error."""

from __future__ import annotations

import pytest

from tenferro_core.errors import ArgumentError
from tenferro_runtime.energy.records import DeviceEnergy, OpEnergy, Region
from tenferro_runtime.energy.report import figure, plot, table


def _epoch(i: int, joules: float, source: str = "rapl", note: str = "") -> Region:
    r = Region(f"epoch {i}", kind="epoch", start=10.0 * i, end=10.0 * i + 2.0)
    r.devices["numpy:cpu"] = DeviceEnergy("numpy:cpu", joules, source, source, note=note)
    r.ops[("dot_general", "numpy:cpu")] = OpEnergy("dot_general", "contraction", "numpy:cpu", 3, 10, 10,
                                                   joules * 0.75)
    r.ops[("add", "numpy:cpu")] = OpEnergy("add", "elementwise", "numpy:cpu", 9, 1, 1, joules * 0.25)
    return r


def test_table_lists_regions_totals_categories_and_sources():
    regions = [_epoch(1, 30.0), _epoch(2, 10.0, "estimate", note="estimate: profile 'amd-epyc'")]
    text = table(regions)
    lines = text.splitlines()
    assert lines[0].split() == ["region", "kind", "time", "energy", "power", "source"]
    assert any(ln.startswith("epoch 1") and "30 J" in ln and "15 W" in ln and "rapl" in ln for ln in lines)
    assert any(ln.startswith("total") and "40 J" in ln and "estimate, rapl" in ln for ln in lines)
    assert any(ln.startswith("contraction") and "30 J" in ln and "75.0%" in ln for ln in lines)
    assert any(ln.startswith("elementwise") and "25.0%" in ln for ln in lines)
    assert "numpy:cpu: estimate: profile 'amd-epyc'" in text
    assert table(_epoch(1, 0.002), categories=False).count("2 mJ") == 2


def test_plot_writes_a_png(tmp_path):
    out = plot([_epoch(i, 5.0 + i) for i in range(1, 6)], tmp_path / "sub" / "energy.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_the_power_axis_starts_at_zero_and_epoch_ticks_are_integers():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.ticker import MaxNLocator

    # power near 50 W in every epoch: an axis fitted to the data would start near 50 and make
    # a 1% change look like a cliff; epochs 1..3 would get ticks at 1.0, 1.5, 2.0, ...
    regions = [_epoch(i, 100.0 + i) for i in range(1, 4)]
    fig = figure(regions, title="t")
    ax_e, ax_c, ax_p = fig.axes
    assert ax_p.get_ylabel() == "average power (W)" and ax_e.get_ylabel() == "energy (J)"
    assert ax_p.get_ylim()[0] == 0.0 and ax_p.get_ylim()[1] >= max(r.watts for r in regions)
    assert ax_e.get_ylim()[0] == 0.0
    locator = ax_e.xaxis.get_major_locator()
    assert isinstance(locator, MaxNLocator) and locator._integer
    fig.canvas.draw()
    ticks = [t for t in ax_e.get_xticks() if ax_e.get_xlim()[0] <= t <= ax_e.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
    assert all(label.get_text().lstrip("-").isdigit() for label in ax_e.get_xticklabels() if label.get_text())
    assert ax_e.get_xlabel() == "epoch" and "[rapl]" in ax_e.get_title()
    many = figure([_epoch(i, 1.0) for i in range(1, 41)])  # 40 epochs: still whole-number ticks
    many.canvas.draw()
    assert all(float(t).is_integer() for t in many.axes[0].get_xticks())
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []  # not registered with pyplot: nothing left open


@pytest.mark.parametrize("bad", [[], [1, 2], "regions", None])
def test_bad_input_is_a_typed_error(bad, tmp_path):
    with pytest.raises(ArgumentError, match="expected a Region"):
        table(bad)
    with pytest.raises(ArgumentError, match="expected a Region"):
        plot(bad, tmp_path / "x.png")
    with pytest.raises(ArgumentError, match="expected a Region"):
        figure(bad)
