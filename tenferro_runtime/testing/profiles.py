"""Hypothesis profiles shared by every tenferro test suite.

`ci` (30 examples, derandomized) is sized for CI's 2 cores (the suite, set-up included,
within 15 minutes); `dev` is quicker;
`thorough` is for hunting bugs; `install-check` (10, derandomized) re-runs a suite to check
an installation. HYPOTHESIS_PROFILE picks one; CI=true means `ci`.

Each suite's conftest also imports `pytest_collection_modifyitems`, which seeds derandomized
tests once per test function (see there).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, is_hypothesis_test, seed, settings
from hypothesis.internal.reflection import function_digest


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
    if settings.get_profile(name).derandomize:
        _without_local_constants()
    return name


def _without_local_constants() -> None:
    """Derandomized examples that stay the same from run to run. Hypothesis mixes constants
    from the source of every imported non-library module into 5% of its draws; which of our
    modules are imported when a test runs depends on the tests its pytest worker ran before
    (xdist's work stealing differs between runs), so the same seed drew different examples
    and CI failed on one run in several. The global constants (edge values) stay."""
    from hypothesis.internal.conjecture import providers

    if hasattr(providers, "_get_local_constants") and hasattr(providers, "Constants"):
        none = providers.Constants()
        providers._get_local_constants = lambda: none


def pytest_collection_modifyitems(items: list[Any]) -> None:
    """Give each derandomized @given test the seed derandomize would derive, once per test
    function: Hypothesis otherwise reads and tokenizes the test's source twice on every call
    (the seed, and a database key that derandomize leaves unused), 2-5 ms per call over
    thousands of parametrized calls. The examples drawn are unchanged."""
    for item in items:
        obj = getattr(item, "obj", None)
        fn = getattr(obj, "__func__", obj)  # a test method: its function holds the settings
        if not is_hypothesis_test(fn) or not fn._hypothesis_internal_use_settings.derandomize:
            continue
        if fn._hypothesis_internal_use_seed is None:
            digest = function_digest(fn.hypothesis.inner_test)
            seed(int.from_bytes(digest, "big"))(fn)
            fn._hypothesis_internal_database_key = digest  # what the engine would compute
