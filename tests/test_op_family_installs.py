"""Each op family installs and works alone, and a missing one names the package to install.

For each of tenferro-einsum, tenferro-linalg and tenferro-fft, the root distribution,
tenferro-numpy and that one family are pip-installed (as wheels, not editable) into an
empty folder. A Python started without site-packages then sees only them and their
third-party dependencies, so entry-point discovery finds exactly what was installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEPS = {
    "einsum": ("numpy", "numpy.libs", "pluggy", "threadpoolctl.py", "opt_einsum"),
    "linalg": ("numpy", "numpy.libs", "pluggy", "threadpoolctl.py", "scipy", "scipy.libs"),
    "fft": ("numpy", "numpy.libs", "pluggy", "threadpoolctl.py", "scipy", "scipy.libs"),
}

SCRIPT = r"""
import numpy as np
from tenferro_core.errors import MissingExtensionError
from tenferro_runtime import array_api as xp, default_runtime

family = {family!r}
loaded = sorted(r.name for r in default_runtime().reports if r.ok)
assert loaded == sorted(["ad", "meters", "numpy", "passes", family]), loaded
a = np.array([[2.0, 1.0], [1.0, 3.0]])
if family == "einsum":
    from tenferro_einsum import einsum
    np.testing.assert_allclose(einsum("ij,jk->ik", a, a).numpy(), a @ a)
if family == "linalg":
    np.testing.assert_allclose(xp.linalg.det(xp.asarray(a)).numpy(), 5.0)
if family == "fft":
    np.testing.assert_allclose(xp.fft.fft(xp.asarray(a[0])).numpy(), np.fft.fft(a[0]))
for other, dist in (("linalg", "tenferro-linalg"), ("fft", "tenferro-fft")):
    if other != family:
        try:
            getattr(xp, other)
            raise AssertionError(f"array_api.{{other}} resolved without its package")
        except MissingExtensionError as exc:
            assert dist in str(exc), exc
for other in ("einsum", "linalg", "fft"):
    if other != family:
        try:
            __import__("tenferro_" + other)
            raise AssertionError(f"tenferro_{{other}} importable without its package")
        except ModuleNotFoundError as exc:
            assert exc.name == "tenferro_" + other, exc
print("only", family, "ok")
"""


def _link_deps(site: Path, names: tuple[str, ...]) -> None:
    purelib = Path(sysconfig.get_paths()["purelib"])
    for name in names:
        src = purelib / name
        if src.exists():
            (site / name).symlink_to(src)


@pytest.mark.parametrize("family", sorted(DEPS))
def test_family_installed_alone(tmp_path, family):
    site = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(ROOT), str(ROOT / "backend_plugins" / "numpy"),
         str(ROOT / "extensions" / family)],
        capture_output=True, text=True, check=False,
    )
    assert pip.returncode == 0, pip.stderr
    _link_deps(site, DEPS[family])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TENFERRO_"))}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run(
        [sys.executable, "-S", "-c", SCRIPT.format(family=family)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"only {family} ok" in out.stdout
