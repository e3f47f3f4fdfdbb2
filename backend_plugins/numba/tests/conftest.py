"""Hypothesis profiles shared with the root suite; generated sources and numba's compiled
code go to a fresh folder per test process."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TENFERRO_NUMBA_CACHE", tempfile.mkdtemp(prefix="tenferro-numba-"))

from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: E402, F401

load_profiles()
