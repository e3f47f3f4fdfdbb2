"""The shared backend conformance kit on mini:cpu, for the 33 primitives mini implements.

`primitives` restricts the kit's value tests and its every-kernel check to those (the other 56
have no kernel here: test_mini_backend.py checks they are MissingKernelErrors); the kit's
error, transfer and telemetry tests run for every primitive.
"""

from __future__ import annotations

from tenferro_runtime.testing.conformance import BackendConformance

from tenferro_mini import KERNEL_NAMES


class TestMiniConformance(BackendConformance):
    """Core primitives on mini:cpu against the kit's NumPy references."""

    device = "mini:cpu"
    primitives = KERNEL_NAMES
