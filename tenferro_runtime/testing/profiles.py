"""Hypothesis profiles shared by every tenferro test suite.

`ci` (30 examples, derandomized) is sized for CI's 2 cores (the suite, set-up included,
within 15 minutes); `dev` is quicker;
`thorough` is for hunting bugs; `install-check` (10, derandomized) re-runs a suite to check
an installation. HYPOTHESIS_PROFILE picks one; CI=true means `ci`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings


def load_profiles() -> str:
    """Register the profiles and load the one the environment asks for; returns its name."""
    relaxed = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
    settings.register_profile("ci", max_examples=30, derandomize=True, **relaxed)
    settings.register_profile("dev", max_examples=15, **relaxed)
    settings.register_profile("thorough", max_examples=300, **relaxed)
    # a suite run again inside another test to check an installation (the third-party backend
    # example's kit): what it checks is that the installed package passes, not its numerics,
    # which its own `ci` run covers
    settings.register_profile("install-check", max_examples=10, derandomize=True, **relaxed)
    name = os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
    settings.load_profile(name)
    return name
