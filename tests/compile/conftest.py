"""The compiler suite runs on numpy:cpu and, with tenferro-torch installed, on torch:cpu."""

from __future__ import annotations

from tenferro_runtime.testing.devices import backend_device, on_backends  # noqa: F401

NUMPY_ONLY = {  # test name: why it runs on numpy:cpu only
    "test_bounded_under_ten_thousand_signatures": "cache bookkeeping, the same on every device",
    "test_ieee_special_values_are_as_silent_as_in_eager": "runs its own interpreter on numpy:cpu",
}

pytest_generate_tests = on_backends(NUMPY_ONLY)
