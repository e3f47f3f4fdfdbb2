"""Hypothesis profiles for the tenferro-linalg tests (shared with the root suite)."""

from __future__ import annotations

from tenferro_core.testing.profiles import load_profiles

load_profiles()
