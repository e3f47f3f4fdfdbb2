"""Hypothesis profiles (CI=true: 100 derandomized examples) for the example's tests."""

from __future__ import annotations

from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: F401

load_profiles()  # before the kit is imported: it sizes its tests from the active profile
