"""The shared backend conformance kit, run on numpy:cpu."""

from __future__ import annotations

from tenferro_runtime.testing.conformance import BackendConformance


class TestNumpyConformance(BackendConformance):
    """Every core primitive on numpy:cpu against the reference."""

    device = "numpy:cpu"
