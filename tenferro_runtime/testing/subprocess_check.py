"""Run code in a fresh interpreter and report what it imported (lazy-import tests)."""

from __future__ import annotations

import subprocess
import sys


def imports_module(code: str, module: str) -> bool:
    """Whether `code`, run in a fresh Python, leaves `module` imported. The code's own
    failures (e.g. its asserts) raise AssertionError with its stderr."""
    probe = f"{code}\nimport sys\nprint({module!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    if out.returncode:
        raise AssertionError(f"the probe failed:\n{out.stderr}")
    return out.stdout.strip().splitlines()[-1] == "True"


__all__ = ["imports_module"]
