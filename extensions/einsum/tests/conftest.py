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
    "test_without_the_plugin_einsum_lowers_and_still_differentiates":
        "builds a runtime of the numpy backend alone",
    "test_with_the_plugin_disabled_einsum_says_so": "builds a runtime of the numpy backend alone",
}

pytest_generate_tests = on_backends(NUMPY_ONLY)
