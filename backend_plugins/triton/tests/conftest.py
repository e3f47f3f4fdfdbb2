"""The Triton kernels run in Triton's CPU interpreter here: TRITON_INTERPRET is set before
any test module imports triton (conftest modules are imported before test modules)."""

from __future__ import annotations

import os
import tempfile

os.environ["TRITON_INTERPRET"] = "1"
# generated kernels and autotuning results go to a fresh folder per test process
os.environ.setdefault("TENFERRO_TRITON_CACHE", tempfile.mkdtemp(prefix="tenferro-triton-"))

from tenferro_runtime.testing.profiles import load_profiles  # noqa: E402

load_profiles()
