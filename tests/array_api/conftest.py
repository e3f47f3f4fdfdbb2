"""The namespace suite runs on every CPU backend.

`xp` is the namespace with one device as the default (``tenferro_runtime.default_device``
around the test): each test that takes it runs once per device in `DEVICES`. A test marked
``@pytest.mark.devices("numpy:cpu")`` runs on those devices only (the mark says why).
Parameter sets naming a dtype the device lacks (bfloat16 on numpy:cpu) are deselected at
collection; tests drawing dtypes ask `device_support.on_device` for the device's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from device_support import DEVICES, dtype_named

import tenferro_runtime as tr
from tenferro_runtime.testing.profiles import load_profiles

load_profiles()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "devices(*names): run this namespace test on these devices only (say why)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test taking `xp` once per device (module-scoped: hypothesis refuses
    function-scoped fixtures in @given tests)."""
    if "xp" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("devices")
    metafunc.parametrize("xp", mark.args if mark else DEVICES, indirect=True, scope="module")


def _lacks(device: str, values: Any) -> bool:
    try:
        dtypes = tr.default_runtime().device(device).dtypes
    except Exception:  # a backend that is not installed: the fixture skips those tests
        return False
    return any((d := dtype_named(v)) is not None and d not in dtypes for v in values)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect parameter sets that name a dtype their device does not hold."""
    keep, drop = [], []
    for item in items:
        spec = getattr(item, "callspec", None)
        device = spec.params.get("xp") if spec is not None else None
        if isinstance(device, str) and _lacks(device, spec.params.values()):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="module")
def xp(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The namespace, with `request.param` the default device while the module's tests run."""
    from tenferro_runtime import array_api

    device = request.param
    if device.startswith("torch"):
        pytest.importorskip("tenferro_torch")
    with tr.default_device(device):
        yield array_api
