"""Energy inputs and readings no device can produce: an energy budget whose limit overflows a
float or is not finite is an `InvalidBudgetError` (a ValueError), a `runtime` that is not a
Runtime an `ArgumentError` (a TypeError); a meter reading that jumps by more than one device can
draw, or goes back, is a `MeterError` (a RuntimeError), and accounting falls back to the next
meter with a `MeterWarning` and a note, leaving the program's values untouched."""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest

from tenferro_core.energy import MAX_DEVICE_WATTS, MeterError, MeterWarning, Reading
from tenferro_core.errors import ArgumentError, TenferroError
from tenferro_runtime import array_api as xp
from tenferro_runtime import tracing
from tenferro_runtime.energy import EnergyMonitor, InvalidBudgetError, energy_budget, measure
from tenferro_runtime.energy.meters import EstimateMeter, checked

DEV = "numpy:cpu"


# ---- energy_budget ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, fragment", [
    (dict(max_joules=2**2000), "max_joules must be a finite number >= 0, got an int too large for a float"),
    (dict(max_watts=-(2**5000)), "max_watts must be a finite number >= 0, got an int too large"),
    (dict(max_joules=1.0, min_window=2**1100), "min_window must be a finite number >= 0, got an int too"),
    (dict(max_joules=math.inf), "max_joules must be a finite number >= 0, got inf"),
    (dict(max_joules=-math.inf), "got -inf"),
    (dict(max_joules=math.nan), "got nan"),
    (dict(max_joules=-1), "got -1; leave it None for no limit"),
    (dict(max_joules=np.float32("nan")), "nan"),  # np.float32(nan) in NumPy 2
    (dict(max_joules=1.0, read_every=math.inf), "read_every must be a finite number >= 0, got inf"),
])
def test_a_limit_that_is_not_a_finite_non_negative_float_is_a_value_error(kwargs, fragment):
    observers = tracing.observers()
    with pytest.raises(InvalidBudgetError) as info:
        energy_budget(**kwargs)
    e = info.value
    assert isinstance(e, TenferroError) and isinstance(e, ValueError) and not isinstance(e, TypeError)
    assert fragment in str(e), str(e)
    assert tracing.observers() == observers  # no window was opened


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(max_joules=1.0, runtime="numpy"), "energy_budget: runtime must be a tenferro_runtime.Runtime"),
    (dict(max_joules=1.0, runtime=3), "or None for the current one, got int 3"),
    (dict(max_joules="1"), "max_joules must be a number (joules, watts or seconds) or None, got str '1'"),
    (dict(max_joules=None, max_watts=[1]), "max_watts must be a number"),
])
def test_a_wrong_type_is_a_type_error(kwargs, fragment):
    observers = tracing.observers()
    with pytest.raises(ArgumentError) as info:
        energy_budget(**kwargs)
    e = info.value
    assert isinstance(e, TenferroError) and isinstance(e, TypeError) and not isinstance(e, ValueError)
    assert fragment in str(e), str(e)
    assert tracing.observers() == observers


def test_monitors_refuse_a_runtime_that_is_not_one():
    for make in (lambda: EnergyMonitor("w", runtime=object()), lambda: measure(runtime="rt").__enter__()):
        with pytest.raises(ArgumentError, match="runtime must be a tenferro_runtime.Runtime") as info:
            make()
        assert isinstance(info.value, TypeError)
    assert not any(isinstance(o, EnergyMonitor) for o in tracing.observers())


def test_numpy_limits_and_a_real_runtime_are_accepted(counter):
    from tenferro_runtime import default_runtime

    b = energy_budget(max_joules=np.float32(5.0), max_watts=np.int64(10), runtime=default_runtime())
    assert (b.max_joules, b.max_watts) == (5.0, 10.0) and type(b.max_joules) is float


# ---- impossible readings -----------------------------------------------------------------------
class Fixed:
    """A meter returning the Reading the test sets."""

    name, source, update_period, priority = "fixed", "rapl", 0.0, 0

    def __init__(self, reading):
        self.reading = reading

    def read(self, device):
        return self.reading


@pytest.mark.parametrize("joules, dt, period, fragment", [
    (1e300, 1.0, 0.0, "rose by 1e+300 J in 1 s"),
    (2e6 + 1.0, 1.0, 0.0, "more than any one device draws (1e+06 W)"),
    (5.0, 0.0, 0.0, "rose by 5 J in 0 s"),  # no time for 5 J (1 us at most at 1 MW)
    (2e5, 0.1, 0.1, "rose by 2e+05 J"),  # more than a whole update period's worth
])
def test_a_jump_no_device_can_draw_is_a_meter_error(joules, dt, period, fragment):
    prev = Reading(1.0, 100.0, "rapl")
    meter = Fixed(Reading(1.0 + joules, 100.0 + dt, "rapl"))
    meter.update_period = period
    with pytest.raises(MeterError) as info:
        checked(meter, DEV, prev)
    e = info.value
    assert isinstance(e, TenferroError) and isinstance(e, RuntimeError)
    assert fragment in str(e) and "'fixed'" in str(e) and DEV in str(e), str(e)


def test_plausible_jumps_pass():
    prev = Reading(10.0, 100.0, "rapl")
    assert checked(Fixed(Reading(10.0 + 0.9e6, 101.0, "rapl")), DEV, prev).joules == 10.0 + 0.9e6
    slow = Fixed(Reading(10.0 + 5e4, 100.0, "nvml"))  # a counter step covering a 100 ms update period,
    slow.update_period = 0.1  # read right after the step: 5e4 J "at once" is 500 kW over the period
    assert checked(slow, DEV, prev).joules == 10.0 + 5e4
    big = Fixed(Reading(10.0 + 1e9, 101.0, "rapl"))
    big.max_watts = 1e10  # a meter covering more than one device raises its own bound
    assert checked(big, DEV, prev).joules == 10.0 + 1e9
    assert MAX_DEVICE_WATTS == 1e6


def test_the_estimate_passes_its_own_check():
    meter = EstimateMeter()
    start = checked(meter, DEV, None)
    meter.charge(DEV, flops=1e9, bytes=1e6)
    time.sleep(0.001)
    assert checked(meter, DEV, start).joules > start.joules


def _work():
    x = xp.ones((16, 16))
    return xp.sum(xp.tanh(x @ x * 0.01))


@pytest.mark.parametrize("move, why", [
    (lambda c: setattr(c, "joules", c.joules + 1e300), "more than any one device draws"),
    (lambda c: setattr(c, "joules", c.joules + 1e7), "more than any one device draws"),
    (lambda c: setattr(c, "joules", c.joules - 5.0), "counter decreased"),
])
def test_accounting_falls_back_to_the_estimate_with_a_warning(counter, move, why):
    counter.joules = 50.0
    x = xp.ones((16, 16))
    with pytest.warns(MeterWarning, match=r"meter\(s\) 'counter' failed or returned an impossible reading; "
                                          r"fell back to 'estimate'"):
        with measure("window") as r:
            y = _work()
            move(counter)
    np.testing.assert_array_equal(x.numpy(), np.ones((16, 16)))  # the program's values: untouched
    assert np.isfinite(float(y))
    d = r.devices[DEV]
    assert (d.source, d.meter) == ("estimate", "estimate")
    assert why in d.note and "fell back to estimate" in d.note
    assert 0 < d.joules < 1.0 and math.isfinite(r.joules)


def test_a_budget_is_not_tripped_by_an_impossible_reading(counter):
    with pytest.warns(MeterWarning), energy_budget(max_joules=1e3, read_every=0.0) as b:
        y = _work()
        counter.joules += 1e300  # a broken counter, not a spent budget
        y = y + 1.0
    assert b.region.devices[DEV].source == "estimate" and b.spent < 1e3 and np.isfinite(float(y))


def test_a_working_meter_warns_nothing(counter):
    with warnings.catch_warnings():
        warnings.simplefilter("error", MeterWarning)
        with measure() as r:
            _work()
            counter.joules += 2.0
    assert r.devices[DEV].source == "rapl" and r.devices[DEV].joules == 2.0


def test_a_reading_decreasing_in_time_is_refused():
    prev = Reading(1.0, 100.0, "rapl")
    with pytest.raises(MeterError, match="time went back"):
        checked(Fixed(replace(prev, joules=2.0, time=99.0)), DEV, prev)
