"""Learning-rate schedules: callables of the step count giving the learning rate.

A schedule called with a Python int returns a float; called with an integer tensor (an
optimizer state's step, inside `compile`) it returns a 0-d float64 tensor computed with tensor
ops, so the learning rate is part of the compiled graph and the step does not retrace.
`schedule(t)` is the rate of update t + 1 (t updates done), as `torch.optim.lr_scheduler`'s
`get_last_lr()` after t calls of `scheduler.step()`.

Each uses the closed form of its PyTorch counterpart (StepLR, CosineAnnealingLR, LinearLR,
SequentialLR); PyTorch's `step()` uses recursive forms that agree with these to about 1e-15
relative (checked to 1e-12 in the tests over 50 steps, past t_max for the cosine).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from .checks import HyperparameterError, integer, number

Step = int | Tensor
Schedule = Callable[[Any], Any]


def _step(name: str, t: Any) -> Any:
    if isinstance(t, Tensor):
        if t.ndim != 0 or t.dtype.kind not in "iu":
            raise ArgumentError(f"{name}: the step must be a Python int or a 0-d integer tensor, got "
                                f"{t.dtype}{list(t.shape)}")
        return t
    if not isinstance(t, int) or isinstance(t, bool):
        raise ArgumentError(f"{name}: the step must be a Python int or a 0-d integer tensor, got "
                            f"{type(t).__name__}")
    if t < 0:
        raise HyperparameterError(f"{name}: the step must be >= 0, got {t}")
    return t


def _f64(t: Tensor) -> Tensor:
    return xp.astype(t, xp.float64)


def _fields(obj: Any, **checks: Any) -> None:
    """Check (and normalize to float / int) the named fields of a frozen schedule: each
    value of `checks` is the check's keywords, with ``integer=True`` for an int >= 1."""
    name = type(obj).__name__
    for field, kw in checks.items():
        v = getattr(obj, field)
        v = integer(name, field, v, 1) if kw.pop("integer", False) else number(name, field, v, **kw)
        object.__setattr__(obj, field, v)


@dataclass(frozen=True)
class step_lr:
    """lr * gamma ** (t // step_size) (torch's StepLR)."""

    lr: float
    step_size: int
    gamma: float = 0.1

    def __post_init__(self) -> None:
        _fields(self, lr={}, step_size={"integer": True}, gamma={})

    def __call__(self, t: Step) -> Any:
        t = _step("step_lr", t)
        if isinstance(t, Tensor):
            return self.lr * xp.pow(float(self.gamma), _f64(t // self.step_size))
        try:
            return self.lr * self.gamma ** (t // self.step_size)
        except OverflowError:  # gamma > 1 for long enough: as the tensor path, inf (refused by a step)
            return math.inf if self.lr else 0.0


@dataclass(frozen=True)
class cosine_annealing:
    """eta_min + (lr - eta_min) (1 + cos(pi t / t_max)) / 2 (torch's CosineAnnealingLR; past
    t_max it rises again, with period 2 t_max, as PyTorch's does)."""

    lr: float
    t_max: int
    eta_min: float = 0.0

    def __post_init__(self) -> None:
        _fields(self, lr={}, t_max={"integer": True}, eta_min={})

    def __call__(self, t: Step) -> Any:
        t = _step("cosine_annealing", t)
        cos = xp.cos(math.pi * _f64(t) / self.t_max) if isinstance(t, Tensor) else \
            math.cos(math.pi * t / self.t_max)
        return self.eta_min + (self.lr - self.eta_min) * (1 + cos) / 2


@dataclass(frozen=True)
class linear_warmup:
    """lr * (start_factor + (end_factor - start_factor) min(t, warmup_steps) / warmup_steps)
    (torch's LinearLR with total_iters=warmup_steps; start_factor 0 is allowed here)."""

    lr: float
    warmup_steps: int
    start_factor: float = 1.0 / 3
    end_factor: float = 1.0

    def __post_init__(self) -> None:
        _fields(self, lr={}, warmup_steps={"integer": True}, start_factor={}, end_factor={})

    def __call__(self, t: Step) -> Any:
        t = _step("linear_warmup", t)
        n = self.warmup_steps
        done = _f64(xp.minimum(t, n)) if isinstance(t, Tensor) else min(t, n)
        return self.lr * (self.start_factor + (self.end_factor - self.start_factor) * done / n)


@dataclass(frozen=True)
class sequential:
    """schedules[i](t - milestones[i - 1]) for milestones[i - 1] <= t < milestones[i]: each
    schedule restarts from 0 at its milestone (torch's SequentialLR), e.g.
    ``sequential([linear_warmup(0.1, 5), cosine_annealing(0.1, 95)], [5])``."""

    schedules: tuple
    milestones: tuple

    def __init__(self, schedules: Sequence[Schedule], milestones: Sequence[int]) -> None:
        for what, v in (("schedules", schedules), ("milestones", milestones)):
            if isinstance(v, (str, bytes)) or not isinstance(v, Sequence):
                raise ArgumentError(f"sequential: {what} must be a list or tuple, got {type(v).__name__}")
        schedules = tuple(schedules)
        if not schedules or any(not callable(s) for s in schedules):
            raise ArgumentError(f"sequential: expected a non-empty sequence of schedules (callables of "
                                f"the step), got {schedules!r}")
        milestones = tuple(integer("sequential", "a milestone", m, 0) for m in milestones)
        if len(milestones) != len(schedules) - 1:
            raise HyperparameterError(f"sequential: expected {len(schedules) - 1} milestone(s) for "
                                      f"{len(schedules)} schedules, got {len(milestones)}")
        if list(milestones) != sorted(milestones):
            raise HyperparameterError(f"sequential: milestones must be increasing, got {list(milestones)}")
        object.__setattr__(self, "schedules", schedules)
        object.__setattr__(self, "milestones", milestones)

    def __call__(self, t: Step) -> Any:
        t = _step("sequential", t)
        if not isinstance(t, Tensor):
            i = bisect.bisect_right(self.milestones, t)
            return self.schedules[i](t - (self.milestones[i - 1] if i else 0))
        out = self.schedules[0](t)
        for m, s in zip(self.milestones, self.schedules[1:]):
            out = xp.where(t >= m, s(xp.maximum(t - m, 0)), out)
        return out


__all__ = ["Schedule", "cosine_annealing", "linear_warmup", "sequential", "step_lr"]
