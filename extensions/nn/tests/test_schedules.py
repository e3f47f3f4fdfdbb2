"""Schedules against torch.optim.lr_scheduler's get_last_lr() over 50 steps (past t_max for the
cosine), with a Python int and with an integer tensor step, compiled, and bad input."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from tenferro_core.errors import ArgumentError
from tenferro_nn.schedules import cosine_annealing, linear_warmup, sequential, step_lr
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile

LRS = torch.optim.lr_scheduler
N = 50

CASES = {
    "step": (step_lr(0.1, 7, 0.5), lambda o: LRS.StepLR(o, 7, 0.5)),
    "cosine": (cosine_annealing(0.1, 12, 0.01), lambda o: LRS.CosineAnnealingLR(o, 12, 0.01)),
    "cosine-no-floor": (cosine_annealing(0.1, 17), lambda o: LRS.CosineAnnealingLR(o, 17)),
    "warmup": (linear_warmup(0.1, 8, 0.25), lambda o: LRS.LinearLR(o, 0.25, 1.0, 8)),
    "warmup-decay": (linear_warmup(0.1, 10, 1.0, 0.2), lambda o: LRS.LinearLR(o, 1.0, 0.2, 10)),
    "warmup-cosine": (sequential([linear_warmup(0.1, 5, 0.1), cosine_annealing(0.1, 30, 1e-3)], [5]),
                      lambda o: LRS.SequentialLR(o, [LRS.LinearLR(o, 0.1, 1.0, 5),
                                                     LRS.CosineAnnealingLR(o, 30, 1e-3)], [5])),
    "three": (sequential([linear_warmup(0.1, 5, 0.1), step_lr(0.1, 4, 0.7), cosine_annealing(0.1, 10)],
                         [5, 20]),
              lambda o: LRS.SequentialLR(o, [LRS.LinearLR(o, 0.1, 1.0, 5), LRS.StepLR(o, 4, 0.7),
                                             LRS.CosineAnnealingLR(o, 10)], [5, 20])),
}


def _torch_lrs(make):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = make(opt)
        out = []
        for _ in range(N):
            out.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
    return np.array(out)


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_matches_torch(name):
    schedule, make = CASES[name]
    want = _torch_lrs(make)
    ints = [schedule(t) for t in range(N)]
    assert all(type(v) is float for v in ints)
    np.testing.assert_allclose(ints, want, rtol=0, atol=1e-12)
    tensors = [schedule(xp.asarray(t)) for t in range(N)]
    assert all(v.shape == () and v.dtype == xp.float64 for v in tensors)
    np.testing.assert_allclose([float(v) for v in tensors], want, rtol=0, atol=1e-12)
    f = compile(schedule)
    np.testing.assert_allclose([float(f(xp.asarray(t))) for t in range(N)], want, rtol=0, atol=1e-12)
    assert f.cache_info().misses == 1


def test_bad_input():
    for make, msg in [(lambda: step_lr(0.1, 0), "step_size must be an int >= 1, got 0"),
                      (lambda: cosine_annealing(-0.1, 10), "lr must be a finite number >= 0, got -0.1"),
                      (lambda: linear_warmup(0.1, 2.5), "warmup_steps must be an int >= 1"),
                      (lambda: sequential([step_lr(0.1, 2)], [3]), "expected 0 milestone"),
                      (lambda: sequential([step_lr(0.1, 2)] * 3, [5, 3]), "milestones must be increasing"),
                      (lambda: sequential([1.0, step_lr(0.1, 2)], [3]), "non-empty sequence of schedules")]:
        with pytest.raises(ArgumentError, match=msg):
            make()
    with pytest.raises(ArgumentError, match="step must be a Python int or a 0-d integer tensor, got float64"):
        step_lr(0.1, 2)(xp.asarray(1.0))
    with pytest.raises(ArgumentError, match="step must be >= 0, got -1"):
        cosine_annealing(0.1, 2)(-1)
    assert "cosine_annealing(lr=0.1, t_max=2" in repr(cosine_annealing(0.1, 2))
