"""The AD suite runs on numpy:cpu and, with tenferro-torch installed, on torch:cpu: every
rule, transform and the tape with tensors on each backend."""

from __future__ import annotations

from tenferro_runtime.testing.devices import backend_device, on_backends  # noqa: F401

NUMPY_ONLY = {  # test name: why it runs on numpy:cpu only
    "test_missing_rule_names_the_extension_op": "builds a runtime of the numpy backend alone",
}

pytest_generate_tests = on_backends(NUMPY_ONLY)
