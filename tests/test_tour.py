"""The feature tour (examples/tour.py) runs to the end and shows each of its parts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOUR = Path(__file__).resolve().parents[1] / "examples" / "tour.py"


def test_tour_runs():
    out = subprocess.run([sys.executable, str(TOUR)], capture_output=True, text=True, check=False,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    for part in ("Array API namespace", "automatic differentiation", "compile:", "CacheInfo(hits=2, misses=1",
                 "op families", "errors name"):
        assert part in out.stdout
    assert "d logdet / d A equals inv(A)^T: True" in out.stdout
