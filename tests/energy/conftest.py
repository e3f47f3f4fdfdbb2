"""Fixtures of the accounting and budget tests: a fake measured meter (`Counter`, a counter
the test moves or breaks) registered in a numpy runtime made current for the test."""

from __future__ import annotations

import contextlib
import time

import pytest

import tenferro_ad.plugin as ad_plugin
import tenferro_numpy.plugin as numpy_plugin
from plugin_fixtures import hook_plugin
from tenferro_core.energy import MeterStatus, Reading
from tenferro_runtime import Runtime, use_runtime


class Counter:
    """A measured meter whose counter (`joules`) the test sets; `fail` breaks its reads:
    "raise", "nan" or "garbage" (not a Reading)."""

    source = "rapl"
    update_period = 0.0
    priority = 90

    def __init__(self, name: str = "counter", update_period: float = 0.0):
        self.name = name
        self.update_period = update_period
        self.joules = 0.0
        self.fail: str | None = None
        self.reads = 0

    def covers(self, device):
        return True

    def probe(self):
        return MeterStatus(self.name, self.source, True)

    def read(self, device):
        self.reads += 1
        if self.fail == "raise":
            raise OSError("sensor unplugged")
        if self.fail == "garbage":
            return "12 J"
        value = float("nan") if self.fail == "nan" else self.joules
        return Reading(value, time.perf_counter(), self.source)


def runtime_with(*meters) -> Runtime:
    """A numpy runtime with AD rules and `meters` registered (and the fallback estimate)."""

    def register(registry):
        for m in meters:
            registry.add_meter(m.name, m)

    return Runtime([numpy_plugin, ad_plugin, hook_plugin("fake_meters", register)])


@pytest.fixture
def counter():
    """A Counter registered in a fresh runtime, current for the test."""
    meter = Counter()
    with use_runtime(runtime_with(meter)):
        yield meter


@pytest.fixture
def estimate_only():
    """A fresh runtime with no meter of its own (accounting uses the estimate), current for the test."""
    rt = runtime_with()
    with use_runtime(rt):
        yield rt


@pytest.fixture
def make_counter():
    """`make_counter(name, update_period)`: a Counter registered in a fresh runtime, current until
    the test ends."""
    with contextlib.ExitStack() as stack:

        def make(name: str = "counter", update_period: float = 0.0) -> Counter:
            meter = Counter(name, update_period)
            stack.enter_context(use_runtime(runtime_with(meter)))
            return meter

        yield make
