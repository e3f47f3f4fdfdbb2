"""`energy_budget(max_joules=..., max_watts=...)`: stop a block (or a decorated function) that
spends more energy, or draws more power, than allowed. DESIGN.md section 8.

The budget is an accounting window (`EnergyMonitor`) that also checks each op before it runs
(`Observer.before`, called by the eager interpreter) and each optimizer step before it
assigns (`check_budgets`). Spent energy is the window's measured joules, read from the
meters at most every `read_every` seconds, plus the cost-model estimate of the ops since that
read, so a check costs a clock read and a few adds. An eager op is refused once the budget is
already spent; a compiled call is refused when spent plus its graph's estimated cost would
cross it, so a compiled train step never starts (its donated inputs stay valid).
`max_watts` compares the average power since the block began, once `min_window` seconds have
passed. Refusing raises `EnergyBudgetExceeded` (`spent`, `budget`, `where`, `unit`) before
the op or assignment, so every tensor and optimizer state is as before it.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import time
from typing import Any

import numpy as np

from tenferro_core.errors import ArgumentError, EnergyBudgetExceeded, TenferroError

from .. import tracing
from ..graph_prims import call_p
from ..tensor import Tensor
from .accounting import EnergyMonitor, check_runtime, cost_of, innermost
from .records import Region


class InvalidBudgetError(TenferroError, ValueError):
    """An energy budget's limit is negative, NaN, infinite or too large for a float."""


def _limit(name: str, value: Any, required: bool = False) -> float | None:
    """`value` as a float: a finite number >= 0 (or None for no limit, where allowed)."""
    if value is None and not required:
        return None
    none = "" if required else "; leave it None for no limit"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"energy_budget: {name} must be a number (joules, watts or seconds)"
                            f"{'' if required else ' or None'}, got {type(value).__name__} {value!r:.60}")
    try:
        f = float(value)
    except OverflowError:  # a Python int beyond float's range
        raise InvalidBudgetError(f"energy_budget: {name} must be a finite number >= 0, got an "
                                 f"{type(value).__name__} too large for a float (>= 2**1024){none}"
                                 ) from None
    if not math.isfinite(f) or f < 0:
        raise InvalidBudgetError(f"energy_budget: {name} must be a finite number >= 0, got "
                                 f"{value!r:.60}{none}")
    return f


class _BudgetMonitor(EnergyMonitor):
    """The accounting window of one open `EnergyBudget`, checking ops before they run."""

    def __init__(self, budget: EnergyBudget):
        super().__init__(budget.label, "region", runtime=budget.runtime)
        self.budget = budget
        self._measured = 0.0  # joules read from the meters at the last read
        self._est_at_read = 0.0  # `estimated` then
        self._read_at = 0.0

    def begin(self) -> Region:
        region = super().begin()
        self._measured = self._est_at_read = 0.0
        self._read_at = region.start
        return region

    def spent(self, now: float | None = None) -> float:
        """Joules spent in the window so far (meters read at most every `read_every` s)."""
        now = time.perf_counter() if now is None else now
        if now - self._read_at >= self.budget.read_every:
            self._root._flush()
            self._measured = math.fsum(d.joules for d in self._energies(final=False)[0].values())
            self._est_at_read, self._read_at = self.estimated, now
        return self._measured + (self.estimated - self._est_at_read)

    def before(self, prim: Any, args: tuple, params: dict) -> None:
        if prim is call_p:
            try:
                extra = cost_of(prim, args, params).joules
            except Exception:  # its cost cannot be known: checked as an eager op
                extra = 0.0
            self.check(lambda: f"before compiled call {params['fn'].name!r}", extra)
        else:
            self.check(lambda: f"before op {prim.name!r}" + "".join(
                f" on {a._aval.device}" for a in args[:1] if isinstance(a, Tensor)))

    def check(self, where: Any, extra: float = 0.0) -> None:
        """Raise EnergyBudgetExceeded if spent (+ `extra` J about to be spent) crosses a limit;
        `where` (a string or a function making it) names what is refused."""
        b = self.budget
        now = time.perf_counter()
        spent = self.spent(now)
        if b.max_joules is not None and spent + extra > b.max_joules:
            place = where() if callable(where) else where
            more = f" + {extra:.4g} J estimated for it" if extra else ""
            raise EnergyBudgetExceeded(
                f"energy budget exceeded {place}: spent {spent:.4g} J{more} > max_joules="
                f"{b.max_joules:.4g} J (sources: {self._sources()}); it did not run, so its inputs, the "
                f"parameters and the optimizer state are as before it", spent, b.max_joules, place, "J")
        elapsed = now - self.region.start
        judged = elapsed >= b.min_window and elapsed > 0
        if b.max_watts is not None and judged and spent > b.max_watts * elapsed:
            place = where() if callable(where) else where
            watts = spent / elapsed
            raise EnergyBudgetExceeded(
                f"power budget exceeded {place}: {watts:.4g} W on average over {elapsed:.3g} s > "
                f"max_watts={b.max_watts:.4g} W (sources: {self._sources()}); it did not run",
                watts, b.max_watts, place, "W")

    def _sources(self) -> str:
        got = sorted({d.source for d in self._energies(final=False)[0].values()})
        return f"{', '.join(got) or 'none'}, read every {self.budget.read_every:g} s, plus the estimate since"


class EnergyBudget(contextlib.ContextDecorator):
    """An energy budget: a context manager and decorator (see `energy_budget`). While open,
    `spent` is the joules spent so far; `region` is its accounting Region (filled at exit)."""

    def __init__(self, max_joules: float | None = None, max_watts: float | None = None, *,
                 min_window: float = 0.1, read_every: float = 0.05, runtime: Any = None):
        self.max_joules = _limit("max_joules", max_joules)
        self.max_watts = _limit("max_watts", max_watts)
        if self.max_joules is None and self.max_watts is None:
            raise ArgumentError("energy_budget: give max_joules=, max_watts= or both")
        self.min_window = _limit("min_window", min_window, True)
        self.read_every = _limit("read_every", read_every, True)
        self.runtime = check_runtime("energy_budget", runtime)
        limits = [f"max_joules={max_joules!r}"] * (max_joules is not None) + \
            [f"max_watts={max_watts!r}"] * (max_watts is not None)
        self.label = f"energy_budget({', '.join(limits)})"
        self.region: Region | None = None
        self._monitor: _BudgetMonitor | None = None

    def _recreate_cm(self) -> EnergyBudget:  # each call of a decorated function: its own budget
        return EnergyBudget(self.max_joules, self.max_watts, min_window=self.min_window,
                            read_every=self.read_every, runtime=self.runtime)

    def __enter__(self) -> EnergyBudget:
        if self._monitor is not None:
            raise TenferroError(f"{self.label} is already open; make a new energy_budget for a nested block")
        self._monitor = _BudgetMonitor(self)
        self.region = self._monitor.begin()
        return self

    def __exit__(self, *exc: Any) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.end()

    @property
    def spent(self) -> float:
        """Joules spent: so far while open, the measured total once closed."""
        if self._monitor is not None:
            return self._monitor.spent()
        return 0.0 if self.region is None else self.region.joules

    def __repr__(self) -> str:
        return f"<{self.label}>"


def energy_budget(max_joules: float | None = None, max_watts: float | None = None, *,
                  min_window: float = 0.1, read_every: float = 0.05, runtime: Any = None) -> EnergyBudget:
    """A budget for a block (``with energy_budget(max_joules=50):``) or a function
    (``@energy_budget(max_joules=50)``, each call its own budget): the next op or optimizer step
    past `max_joules` joules, or past an average of `max_watts` watts once `min_window` seconds
    have passed, raises `EnergyBudgetExceeded` before it runs. Meters are read at most every
    `read_every` seconds (the cost-model estimate fills in between). Bad limits raise
    `ArgumentError` (a type, a TypeError) or `InvalidBudgetError` (a ValueError: a negative, NaN
    or infinite value, or an int too large for a float); a `runtime` that is not a
    `tenferro_runtime.Runtime` is an `ArgumentError`."""
    return EnergyBudget(max_joules, max_watts, min_window=min_window, read_every=read_every,
                        runtime=runtime)


def check_budgets(where: str, extra: float = 0.0) -> None:
    """Check every energy budget open in this context (a step boundary named `where`): raise
    `EnergyBudgetExceeded` if one is crossed (or would be, with `extra` joules more)."""
    for o in tracing.observers():
        if isinstance(o, EnergyMonitor):
            o.check(where, extra)


class StepEnergy:
    """`Optimizer.step`'s accounting: while a monitor is open, the block is a child region of
    kind "step" (`region`, `joules`); `check(where)` is the step boundary for budgets."""

    __slots__ = ("label", "monitor", "region")

    def __init__(self, label: str = "step"):
        self.label = label
        self.monitor: EnergyMonitor | None = None
        self.region: Region | None = None

    def __enter__(self) -> StepEnergy:
        if innermost() is not None:
            self.monitor = EnergyMonitor(self.label, "step")
            self.monitor.begin()
        return self

    def check(self, where: str) -> None:
        if self.monitor is not None:
            check_budgets(where)

    def __exit__(self, *exc: Any) -> None:
        if self.monitor is not None:
            self.region = self.monitor.end()
            self.region.label = self.label

    @property
    def joules(self) -> float | None:
        return None if self.region is None else self.region.joules


__all__ = ["EnergyBudget", "InvalidBudgetError", "StepEnergy", "check_budgets", "energy_budget"]
