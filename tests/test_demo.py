"""`make demo`: trains the digits CNN to >= 97% test accuracy, saves, reloads and gets the
same accuracy (the numbers are deterministic: keyed initialization and shuffling)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


def test_demo_trains_the_digits_cnn(tmp_path):
    out = subprocess.run([sys.executable, str(DEMO), "--out", str(tmp_path / "cnn.safetensors")],
                         capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    epochs = re.findall(r"epoch +(\d+): loss ([\d.]+) +train accuracy ([\d.]+) +test accuracy ([\d.]+) +"
                        r"energy ([\d.e+-]+) J \((estimate|rapl|nvml)", out.stdout)
    assert len(epochs) == 20
    assert float(epochs[-1][1]) < float(epochs[0][1]) / 10
    reloaded = re.search(r"reloaded model's test accuracy: ([\d.]+) \(before saving: ([\d.]+), same: True\)",
                         out.stdout)
    assert reloaded and float(reloaded[1]) >= 0.97 and reloaded[1] == reloaded[2]
    assert "CacheInfo(hits=" in out.stdout and "misses=1," in out.stdout  # one trace for the train step
    assert "training" in out.stderr  # the progress bar
    assert (tmp_path / "cnn.safetensors").stat().st_size > 100_000
    assert all(float(e[4]) > 0 for e in epochs)  # energy per epoch, labelled with its source
    assert "op category" in out.stdout and "contraction" in out.stdout
    assert (tmp_path / "energy.png").read_bytes()[:4] == b"\x89PNG"
