"""The end-to-end CPU example: verified, benchmarked past the gate, promoted, then run by a
fresh runtime eagerly and compiled (the promoted kernel's call counter proves it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tenferro_forge import registry


def test_example_promotes_and_runs_eagerly_and_compiled(monkeypatch, capsys):
    monkeypatch.setenv("TENFERRO_FORGE_COUNT", "1")  # restored after: the example sets both
    monkeypatch.setenv("TENFERRO_FORGE_DISABLE", "")
    path = Path(__file__).parents[1] / "examples" / "run_reduce_max.py"
    spec = importlib.util.spec_from_file_location("forge_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--shapes", "8192x32"]) == 0
    out = capsys.readouterr().out
    assert "verify: passed" in out
    assert "default: promoted-kernel calls during one eager and one compiled call: 0" in out
    assert "promoted: promoted-kernel calls during one eager and one compiled call: 2" in out
    [entry] = registry.entries()
    assert entry["id"] == "numba_reduce_max_numpy-cpu_float32_8192x32_v1"
    assert entry["statistics"][0]["ci_low"] >= 1.10
