"""Energy budgets: bad limits are typed errors; crossing one raises EnergyBudgetExceeded (spent,
budget, where) before the next op, so an eager sequence stops at the boundary and a compiled
call with donated inputs never starts; decorator form; max_watts; broken meters."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from tenferro_core.errors import ArgumentError, EnergyBudgetExceeded
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, tracing, use_runtime
from tenferro_runtime.energy import EnergyBudget, InvalidBudgetError, energy_budget, measure

NEVER = 1e9  # read_every: the meters are never re-read, spent is the ops' estimate alone


@pytest.mark.parametrize("kwargs, err, what", [
    (dict(max_joules=-1.0), InvalidBudgetError, "max_joules must be a finite number >= 0"),
    (dict(max_joules=math.nan), InvalidBudgetError, "nan"),
    (dict(max_watts=math.inf), InvalidBudgetError, "max_watts"),
    (dict(max_joules=True), ArgumentError, "bool"),
    (dict(max_joules="10"), ArgumentError, "str"),
    (dict(), ArgumentError, "give max_joules=, max_watts= or both"),
    (dict(max_joules=1.0, min_window=-1), InvalidBudgetError, "min_window"),
    (dict(max_joules=1.0, read_every=None), ArgumentError, "read_every"),
])
def test_bad_limits_are_typed_errors(kwargs, err, what):
    with pytest.raises(err, match=what):
        energy_budget(**kwargs)
    assert issubclass(InvalidBudgetError, ValueError) and issubclass(ArgumentError, TypeError)


def _one_add_joules() -> float:
    x = xp.ones(64)
    with energy_budget(max_joules=1e9, read_every=NEVER) as b:
        x + x
        return b.spent


def test_an_eager_sequence_stops_at_the_boundary(estimate_only):
    c = _one_add_joules()
    assert c > 0
    x, ran = xp.ones(64), 0
    with pytest.raises(EnergyBudgetExceeded) as info, energy_budget(max_joules=2.5 * c, read_every=NEVER):
        for _ in range(10):
            x = x + x
            ran += 1
    assert ran == 3  # the 4th add was refused: 3 adds had spent 3c > 2.5c
    e = info.value
    assert math.isclose(e.spent, 3 * c) and e.budget == 2.5 * c and e.unit == "J"
    assert e.where == "before op 'add' on numpy:cpu" and "did not run" in str(e)
    np.testing.assert_array_equal(x.numpy(), np.full(64, 8.0))  # the last value that ran is whole
    assert tracing.interpreters() is tracing.BOTTOM


def test_measured_energy_counts_toward_the_budget(counter):
    x = xp.ones(8)
    with pytest.raises(EnergyBudgetExceeded) as info, energy_budget(max_joules=5.0, read_every=0.0):
        x = x * 2.0  # spent: the estimate of a tiny op
        counter.joules = 6.0  # the meter moves past the budget
        x = x * 2.0
    assert info.value.spent >= 6.0 and "rapl" in str(info.value)
    np.testing.assert_array_equal(x.numpy(), np.full(8, 2.0))


def test_a_compiled_donated_call_is_refused_before_it_runs(estimate_only):
    @compile(donate_argnums=0)
    def step(w, x):
        return w - 0.1 * (x @ w)

    w, x = xp.ones((32, 32)), xp.ones((32, 32)) / 32
    w = step(w, x)  # traced outside the budget
    before = w.numpy().copy()
    with measure() as r:
        step(xp.ones((32, 32)), x)
    assert sum(op.flops for (name, _), op in r.ops.items() if name.startswith("step: ")) > 0
    with pytest.raises(EnergyBudgetExceeded) as info, energy_budget(max_joules=1e-12, read_every=NEVER):
        w = step(w, x)
    assert info.value.where == "before compiled call 'step'" and info.value.spent == 0.0
    assert "estimated for it" in str(info.value)
    np.testing.assert_array_equal(w.numpy(), before)  # not donated: still usable
    w = step(w, x)  # and usable again outside the budget
    assert w.shape == (32, 32)


def test_decorator_form_gives_each_call_its_own_budget(estimate_only):
    c = _one_add_joules()
    calls = []

    @energy_budget(max_joules=2.5 * c, read_every=NEVER)
    def run(n):
        x = xp.ones(64)
        for i in range(n):
            x = x + x
            calls.append(i)
        return x

    assert run(2).shape == (64,)
    for _ in range(2):  # the budget starts over on every call
        calls.clear()
        with pytest.raises(EnergyBudgetExceeded):
            run(10)
        assert calls == [0, 1, 2]
    assert isinstance(energy_budget(max_joules=1.0), EnergyBudget)


def test_max_watts(counter):
    x = xp.ones(8)
    with energy_budget(max_watts=1e12, min_window=0.0, read_every=0.0):
        x = x + 1.0  # a generous limit: runs
    counter.max_watts = math.inf  # a test meter: no physical bound on how fast it may rise
    with pytest.raises(EnergyBudgetExceeded) as info, \
            energy_budget(max_watts=100.0, min_window=0.0, read_every=0.0):
        x = x + 1.0
        counter.joules += 1e6  # a megajoule within microseconds
        x = x + 1.0
    e = info.value
    assert e.unit == "W" and e.budget == 100.0 and e.spent > 100.0 and "power budget exceeded" in str(e)
    np.testing.assert_array_equal(x.numpy(), np.full(8, 3.0))


def test_max_watts_waits_for_min_window(counter):
    x = xp.ones(8)
    counter.max_watts = math.inf
    with energy_budget(max_watts=1.0, min_window=3600.0, read_every=0.0):
        counter.joules += 1e6
        x = x + 1.0  # the window is too short to judge the average power
    assert float(x[0]) == 2.0


def test_a_broken_meter_under_a_budget_falls_back(counter):
    counter.fail = "raise"
    with energy_budget(max_joules=1e6, read_every=0.0) as b:
        y = xp.sum(xp.ones((16, 16)) @ xp.ones((16, 16)))
    assert float(y) == 16.0**3 and b.region.devices["numpy:cpu"].source == "estimate"
    assert "sensor unplugged" in b.region.devices["numpy:cpu"].note and b.spent == b.region.joules


def test_a_budget_is_a_child_region_and_reentry_is_refused(estimate_only):
    b = energy_budget(max_joules=1e6)
    with measure("outer") as outer, b:
        xp.ones(4) + 1.0
        with pytest.raises(Exception, match="already open"):
            b.__enter__()
    assert outer.children == [b.region] and b.region.label == "energy_budget(max_joules=1000000.0)"


def test_a_budget_does_not_stop_other_threads(estimate_only):
    opened, done = threading.Event(), threading.Event()
    out = {}

    def other():
        assert opened.wait(30)
        with use_runtime(estimate_only):
            x = xp.ones(64)
            for _ in range(20):
                x = x + x
        out["x"] = float(x[0])
        done.set()

    t = threading.Thread(target=other)
    t.start()
    y = xp.ones(4)
    with pytest.raises(EnergyBudgetExceeded), energy_budget(max_joules=0.0, read_every=NEVER):
        y = y + y  # runs (nothing spent yet), then the budget is spent
        opened.set()
        assert done.wait(30)  # the other thread's 20 ops ran meanwhile
        y = y + y
    t.join(30)
    assert out["x"] == 2.0**20 and float(y[0]) == 2.0


@pytest.mark.parametrize("op", [lambda x: x * x, lambda x: xp.negative(x), lambda x: xp.sum(x, axis=0),
                                lambda x: xp.reshape(x, (16,))],
                         ids=["fast binary", "fast unary", "with params", "structural"])
def test_every_eager_path_is_checked_before_it_runs(estimate_only, op):
    x = xp.ones((4, 4))
    with pytest.raises(EnergyBudgetExceeded) as info, energy_budget(max_joules=0.0, read_every=NEVER):
        x + x  # spends something
        op(x)
    assert info.value.where.startswith("before op")


def test_only_observers_that_check_ops_are_asked_before(estimate_only):
    from tenferro_ad import GradientTape

    with GradientTape(), measure(), energy_budget(max_joules=1.0) as b:
        stack = tracing.interpreters()
        assert len(stack.observers) == 3 and stack.pre == (b._monitor,)
    assert tracing.interpreters().pre == ()
