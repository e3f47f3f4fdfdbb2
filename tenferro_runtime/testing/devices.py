"""Run a test suite on each installed CPU backend: numpy:cpu and, when tenferro-torch is
installed, torch:cpu (the op-family suites use it).

In a conftest.py::

    from tenferro_runtime.testing.devices import backend_device, on_backends  # noqa: F401
    pytest_generate_tests = on_backends({"test_name": "why it runs on numpy:cpu only"})

A test module may narrow the devices with a module-level ``DEVICES`` tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

CPU_DEVICES = ("numpy:cpu", "torch:cpu")


def on_backends(numpy_only: Mapping[str, str]) -> Callable[[Any], None]:
    """A `pytest_generate_tests` hook parametrizing `backend_device` with the installed CPU devices."""

    def pytest_generate_tests(metafunc: Any) -> None:
        from tenferro_runtime import default_runtime

        installed = default_runtime().backends
        devices = [d for d in CPU_DEVICES if d.partition(":")[0] in installed]
        if metafunc.function.__name__ in numpy_only:
            devices = devices[:1]
        wanted = getattr(metafunc.module, "DEVICES", devices)
        devices = [d for d in devices if d in wanted]
        metafunc.parametrize("backend_device", devices, indirect=True, scope="module")

    return pytest_generate_tests


@pytest.fixture(scope="module", autouse=True)
def backend_device(request: Any) -> Any:
    """The default device of the test (module scope: set and restored around each module, and
    hypothesis accepts it with @given)."""
    from tenferro_runtime import default_device

    with default_device(request.param):
        yield request.param
