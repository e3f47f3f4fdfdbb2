"""Hypothesis profiles (shared with the root suite), and the devices the suite runs on: every
test runs on numpy:cpu and, when tenferro-torch is installed,
on torch:cpu. A module narrows that with a module-level ``DEVICES`` tuple, single tests by
name in ``NUMPY_ONLY``, each with the reason."""

from __future__ import annotations

from tenferro_runtime.testing.devices import backend_device, on_backends  # noqa: F401
from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: F401

load_profiles()

NUMPY_ONLY: dict[str, str] = {}

pytest_generate_tests = on_backends(NUMPY_ONLY)
