"""Installs examples/third_party_backend (tenferro-mini) as a real distribution, runs its own
tests against it (the conformance kit on mini:cpu among them) and lists it with the plugins CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "third_party_backend"

# The example's suite: 70 own tests + 766 of the conformance kit restricted to mini's 33
# primitives (value tests of those, error tests of all 89, transfer, telemetry). The number
# moves with the kit's case list.
SUMMARY = r"^\d+ passed in "  # and nothing failed, errored or was skipped


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          check=False)


def test_third_party_backend_installs_passes_its_tests_and_is_listed(tmp_path):
    target = tmp_path / "site"
    pip = _run(["-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target",
                str(target), str(EXAMPLE)], dict(os.environ), tmp_path)
    assert pip.returncode == 0, pip.stderr
    assert (target / "tenferro_mini" / "plugin.py").exists()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), *sys.path]),
           "HYPOTHESIS_PROFILE": "install-check"}  # the example's kit at full strength: its own CI

    out = _run(["-m", "pytest", "-q", "--rootdir", str(EXAMPLE), str(EXAMPLE / "tests")], env, tmp_path)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr
    assert re.search(SUMMARY, out.stdout, re.MULTILINE), out.stdout[-2000:]

    cli = _run(["-m", "tenferro_runtime", "plugins"], env, tmp_path)
    assert re.search(r"^\s+mini\s+ok\s+tenferro-mini 0\.1\.0\s+\[tenferro_mini\.plugin\]$", cli.stdout,
                     re.MULTILINE), cli.stdout
    assert "- backend mini (priority -10, 33 kernels)" in cli.stdout
    devices = re.search(r"^devices: (.*)$", cli.stdout, re.MULTILINE)
    assert devices and "mini:cpu" in devices.group(1).split(", "), cli.stdout
    assert re.search(r"^default device: numpy:cpu$", cli.stdout, re.MULTILINE), cli.stdout
