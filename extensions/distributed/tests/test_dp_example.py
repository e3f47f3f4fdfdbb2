"""examples/ddp_digits.py runs: 2 self-spawned ranks train the digits CNN data-parallel, print
the test accuracy and the job's energy table (every rank's joules and sources)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp_digits.py"


def test_ddp_digits_example_trains_on_two_ranks():
    env = dict(os.environ, TENFERRO_THREADS="1")
    env.pop("RANK", None)
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--epochs", "2", "--timeout", "100"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    acc = float(re.search(r"final test accuracy: ([0-9.]+)", proc.stdout).group(1))
    assert acc > 0.6, proc.stdout
    table = proc.stdout.split("job energy per epoch")[1]
    assert "rank 0 J" in table and "rank 1 J" in table and "0: " in table and "1: " in table
    assert "misses=1" in proc.stdout  # the compiled step traced once
