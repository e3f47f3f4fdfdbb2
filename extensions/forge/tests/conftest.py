"""Hypothesis profiles shared with the root suite; Forge's fixtures: every test gets its own
registry directory (TENFERRO_FORGE_REGISTRY), never the user's."""

from __future__ import annotations

import pytest

from forge_helpers import BENCH, EXAMPLE, gated, make_task
from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: F401

load_profiles()


@pytest.fixture(autouse=True)
def forge_registry(tmp_path_factory, monkeypatch):
    reg = tmp_path_factory.mktemp("registry")
    monkeypatch.setenv("TENFERRO_FORGE_REGISTRY", str(reg))
    monkeypatch.delenv("TENFERRO_FORGE_DISABLE", raising=False)
    return reg


@pytest.fixture(scope="session")
def example_gates(tmp_path_factory):
    """The honest example's task (BENCH shapes), verified and benchmarked once per session:
    (task dir, verify report, bench report)."""
    d = make_task(tmp_path_factory.mktemp("example") / "task", EXAMPLE, shapes=BENCH)
    return gated(d, tmp_path_factory.mktemp("bench_registry"))
