"""Whole train steps: a CNN with BatchNorm and Dropout trained three ways (eager functional,
compiled, PyTorch-style with a tape) gives the same parameters and running statistics, and
the same as PyTorch training its equivalent model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tenferro_nn as nn
from tenferro_ad import GradientTape, value_and_grad
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile, random

STEPS = 3


def _model(p_drop: float) -> nn.Module:
    k = random.split(random.key(0), 2)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, key=k[0], dtype=xp.float64), nn.BatchNorm2d(4, dtype=xp.float64),
        nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(p_drop),
        nn.Linear(4 * 4 * 4, 10, key=k[1], dtype=xp.float64))


def _batches():
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((8, 1, 8, 8)), rng.integers(0, 10, 8)) for _ in range(STEPS)]


def _opt():
    return nn.Adam(lr=0.01, weight_decay=1e-3)


def _train_step(opt):
    def train_step(model, state, x, y, key):
        def loss_fn(m):
            return nn.cross_entropy(m(x, key=key), y), m  # m holds the new running statistics

        (loss, model), grads = value_and_grad(loss_fn, has_aux=True)(model)
        model, state = opt.update(model, grads, state)
        return model, state, loss

    return train_step


def _functional(step, p_drop):
    model, opt = _model(p_drop), _opt()
    state = opt.init(model)
    for i, (x, y) in enumerate(_batches()):
        model, state, _ = step(opt)(model, state, xp.asarray(x), xp.asarray(y), random.key(i))
    return model


def _pytorch_style(p_drop):
    model = _model(p_drop)
    opt = nn.Adam(model.parameters(), lr=0.01, weight_decay=1e-3)
    for i, (x, y) in enumerate(_batches()):
        params = model.parameters()
        with GradientTape() as tape:
            tape.watch(params)
            loss = nn.cross_entropy(model(xp.asarray(x), key=random.key(i)), xp.asarray(y))
        opt.step(tape.gradient(loss, params))
    return model


def _same(a: nn.Module, b: nn.Module | dict, rtol: float = 1e-12) -> None:
    sa, sb = a.state_dict(), b if isinstance(b, dict) else b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        np.testing.assert_allclose(sa[k].numpy(), np.asarray(sb[k]), rtol=rtol, atol=rtol, err_msg=k)


def test_compiled_eager_and_tape_train_steps_agree():
    compiled = {}

    def once(opt):
        if "step" not in compiled:
            compiled["step"] = compile(_train_step(opt))
        return compiled["step"]

    eager = _functional(_train_step, 0.3)
    _same(_functional(once, 0.3), eager)
    assert compiled["step"].cache_info().misses == 1
    _same(_pytorch_style(0.3), eager)
    assert not np.allclose(eager.state_dict()["1.running_mean"].numpy(), 0.0)  # statistics moved


def test_training_matches_pytorch():
    ours = _functional(lambda opt: compile(_train_step(opt)), 0.0)
    start = _model(0.0)
    tm = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Dropout(0.0), torch.nn.Linear(64, 10)).double()
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in start.state_dict().items()}, strict=False)
    opt = torch.optim.Adam(tm.parameters(), lr=0.01, weight_decay=1e-3, foreach=False)
    for x, y in _batches():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y)).backward()
        opt.step()
    want = {k: v.detach().numpy() for k, v in tm.state_dict().items() if "num_batches" not in k}
    _same(ours, want, rtol=1e-9)


def test_a_non_finite_loss_stops_the_step_and_names_it():
    model = _model(0.0)
    opt = nn.SGD(model.parameters(), lr=0.1, check_finite=True)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    x, y = _batches()[0]
    params = model.parameters()
    with GradientTape() as tape:
        tape.watch(params)
        loss = nn.cross_entropy(model(xp.asarray(x * np.nan)), xp.asarray(y))
    with pytest.raises(nn.NonFiniteError, match="step 1") as info:
        opt.step(tape.gradient(loss, params), loss=loss)
    assert info.value.step == 1
    after = model.state_dict()
    for k in ("0.weight", "6.weight", "6.bias"):
        np.testing.assert_array_equal(after[k].numpy(), before[k])
