"""Hypothesis profiles (shared with the root suite), and the devices the suite runs on: every
test runs on numpy:cpu and, when the tenferro-torch backend is installed, on torch:cpu.

A test module may narrow that with a module-level ``DEVICES`` tuple; single tests are
narrowed by name in ``NUMPY_ONLY``, each with the reason.
"""

from __future__ import annotations

from tenferro_runtime.testing.devices import backend_device, on_backends  # noqa: F401
from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: F401

load_profiles()

NUMPY_ONLY = {  # test name: why it runs on numpy:cpu only
    "test_the_scipy_path_for_big_matrices": "patches the NumPy kernels' size threshold",
    "test_scipy_path_for_single_large_matrices": "the NumPy kernels' SciPy path for big matrices",
}

pytest_generate_tests = on_backends(NUMPY_ONLY)
