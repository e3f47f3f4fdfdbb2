"""Installs examples/custom_op as a real distribution and runs its own tests against it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_op"


def test_custom_op_package_installs_and_passes_its_tests(tmp_path):
    target = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(EXAMPLE)],
        capture_output=True, text=True, check=False,
    )
    assert pip.returncode == 0, pip.stderr
    assert (target / "tenferro_softplus" / "plugin.py").exists()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), *sys.path])}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests"),
         "-o", "addopts=", "--rootdir", str(EXAMPLE)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    summary = out.stdout.strip().splitlines()[-1]  # no failures, errors or skips, and some passed
    assert " passed" in summary and not any(w in summary for w in ("failed", "error", "skipped")), summary
