"""The energy report: a table with each region's energy, power and sources and the energy
per op category, and a PNG plot; bad input is a typed error."""

from __future__ import annotations

import pytest

from tenferro_core.errors import ArgumentError
from tenferro_runtime.energy.records import DeviceEnergy, OpEnergy, Region
from tenferro_runtime.energy.report import plot, table


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


@pytest.mark.parametrize("bad", [[], [1, 2], "regions", None])
def test_bad_input_is_a_typed_error(bad, tmp_path):
    with pytest.raises(ArgumentError, match="expected a Region"):
        table(bad)
    with pytest.raises(ArgumentError, match="expected a Region"):
        plot(bad, tmp_path / "x.png")
