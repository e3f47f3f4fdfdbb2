"""Shared test setup: hypothesis profiles sized for CI's 2 cores, and the namespace."""

from __future__ import annotations

import pytest

from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: F401

load_profiles()


@pytest.fixture(scope="session")
def xp():
    from tenferro_runtime import array_api

    return array_api
