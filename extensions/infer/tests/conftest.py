"""Hypothesis profiles shared with the root suite."""

from __future__ import annotations

from tenferro_runtime.testing.profiles import load_profiles, pytest_collection_modifyitems  # noqa: F401

load_profiles()
