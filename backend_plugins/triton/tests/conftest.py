"""Where the Triton kernels of these tests run.

By default in Triton's CPU interpreter, on ``torch:cpu``: TRITON_INTERPRET is set before any
test module imports triton (conftest modules are imported before test modules). With
``TENFERRO_TRITON_REAL=1`` (what ``make gpu-check`` sets) the kernels are compiled for the
real GPU instead and the tests run on ``torch:cuda:0`` (each module reads the same
variable); the autotune-cache tests, written against the interpreter's candidate configs,
skip there. Asking for it without a CUDA device stops the
session with that reason rather than failing every test.
"""

from __future__ import annotations

import os
import tempfile

import pytest

REAL = os.environ.get("TENFERRO_TRITON_REAL") == "1"
if REAL:
    os.environ.pop("TRITON_INTERPRET", None)
else:
    os.environ["TRITON_INTERPRET"] = "1"
# generated kernels and autotuning results go to a fresh folder per test process
os.environ.setdefault("TENFERRO_TRITON_CACHE", tempfile.mkdtemp(prefix="tenferro-triton-"))

from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: E402, F401

load_profiles()


def pytest_configure(config: pytest.Config) -> None:
    if REAL:
        from tenferro_torch.discovery import cuda_device_count

        if not cuda_device_count():
            pytest.exit("TENFERRO_TRITON_REAL=1 needs a CUDA device (torch sees none)", returncode=4)
