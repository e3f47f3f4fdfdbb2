"""tenferro_runtime.heap: with the runtime built, arrays of a few MiB freed and allocated
again reuse the heap's pages (few page faults); with ``TENFERRO_HEAP=system`` or a user's
own malloc tuning glibc is left alone (the same arrays fault their pages in again)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import numpy as np
import tenferro_runtime
from tenferro_runtime import array_api as xp
from tenferro_runtime.heap import keep_freed_memory

xp.asarray([1.0])  # builds the default runtime
def minor_faults():
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])
for _ in range(3):  # let glibc settle on its thresholds
    arrays = [np.ones(1 << 18) for _ in range(6)]  # 6 x 2 MiB, every page written
    del arrays
before = minor_faults()
arrays = [np.ones(1 << 18) for _ in range(6)]
faults = minor_faults() - before
print(keep_freed_memory(), faults)
"""


def _probe(**env: str) -> tuple[bool, int]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "TENFERRO_HEAP"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                         env={**environ, **env}, check=False)
    assert out.returncode == 0, out.stderr
    kept, faults = out.stdout.split()
    return kept == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/self/stat"),
                    reason="glibc malloc and /proc page-fault counts are Linux's")
def test_freed_arrays_are_reused_without_page_faults():
    kept, faults = _probe()
    assert kept and faults < 256, f"{faults} page faults re-allocating 12 MiB with freed memory kept"
    for env in ({"TENFERRO_HEAP": "system"}, {"MALLOC_TRIM_THRESHOLD_": "131072"}):
        kept, faults = _probe(**env)
        assert not kept and faults >= 1024, f"{env}: {faults} page faults, glibc's own settings expected"
