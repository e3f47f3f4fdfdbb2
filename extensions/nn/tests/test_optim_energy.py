"""Optimizers and energy accounting: inside a monitor each `step` is a child region whose
joules its StepRecord (and the hooks) carry; an energy budget refuses a step before it
assigns, leaving parameters and optimizer state as they were; a compiled train step with
donated state is refused before it runs."""

from __future__ import annotations

import numpy as np
import pytest

from tenferro_ad import value_and_grad
from tenferro_core.errors import EnergyBudgetExceeded
from tenferro_nn.optim import SGD, Adam
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile
from tenferro_runtime.energy import energy_budget, measure

SHAPES = [(3, 4), (5,)]
rng = np.random.default_rng(0)
P0 = [rng.standard_normal(s) for s in SHAPES]
G = [rng.standard_normal(s) for s in SHAPES]
NEVER = 1e9  # read_every: meters never re-read, so a budget's spent is the ops' estimate alone


def _setup(cls=Adam):
    params = [xp.asarray(p) for p in P0]
    opt = cls(params, lr=0.1)
    return params, opt, [xp.asarray(g) for g in G]


def _snapshot(params, opt):
    return ([p.numpy().copy() for p in params], int(opt.state.step),
            {n: [t.numpy().copy() for t in v] for n, v in opt.state.slots.items()})


def _assert_same(a, b):
    assert a[1] == b[1] and a[2].keys() == b[2].keys()
    for x, y in zip(a[0], b[0]):
        np.testing.assert_array_equal(x, y)
    for name in a[2]:
        for x, y in zip(a[2][name], b[2][name]):
            np.testing.assert_array_equal(x, y)


def test_steps_record_their_energy_inside_a_monitor():
    params, opt, grads = _setup()
    seen = []
    opt.hooks.append(lambda o, rec: seen.append(rec))
    with measure("epoch 1", kind="epoch") as epoch:
        recs = [opt.step(grads) for _ in range(3)]
    assert [r.step for r in recs] == [1, 2, 3] and seen == recs
    for r in recs:
        assert r.energy is not None and r.energy >= 0 and r.region.kind == "step"  # RAPL may not tick
        assert r.energy == r.region.joules and r.region.ops
    assert [c.label for c in epoch.children] == ["Adam step 1", "Adam step 2", "Adam step 3"]
    assert epoch.children == [r.region for r in recs]
    assert sum(r.energy for r in recs) <= epoch.joules


def test_no_monitor_no_energy():
    params, opt, grads = _setup(SGD)
    rec = opt.step(grads)
    assert rec.energy is None and rec.region is None and rec.step == 1


def test_a_budget_refuses_the_step_at_its_boundary_state_unchanged():
    params, opt, grads = _setup()
    opt.step(grads)
    with energy_budget(max_joules=1e9, read_every=NEVER) as b:
        opt.step(grads)
        cost = b.spent  # what one update's ops cost (the estimate: meters never re-read)
    before = _snapshot(params, opt)
    # every op of the update runs (spent stays under the limit until the last one has run), and
    # the step boundary sees the limit crossed: nothing is assigned
    with pytest.raises(EnergyBudgetExceeded) as info, \
            energy_budget(max_joules=cost * (1 - 1e-9), read_every=NEVER):
        opt.step(grads)
    assert info.value.where == "Adam step 3" and info.value.spent == pytest.approx(cost)
    _assert_same(before, _snapshot(params, opt))


def test_a_budget_refuses_a_step_midway_state_unchanged():
    params, opt, grads = _setup()
    opt.step(grads)
    before = _snapshot(params, opt)
    with pytest.raises(EnergyBudgetExceeded) as info, energy_budget(max_joules=0.0, read_every=NEVER):
        opt.step(grads)
    assert info.value.where.startswith("before op")
    _assert_same(before, _snapshot(params, opt))
    opt.step(grads)  # the optimizer still works
    assert int(opt.state.step) == 2


def test_a_compiled_train_step_with_donated_state_is_refused_before_it_runs():
    opt = Adam(lr=0.1)
    params = [xp.asarray(p) for p in P0]
    state = opt.init(params)
    x = xp.asarray(rng.standard_normal((4, 3)))

    def loss(ps):
        return xp.sum((x @ ps[0]) ** 2) + xp.sum(ps[1] ** 2)

    @compile(donate_argnums=(0, 1))
    def train_step(ps, st):
        val, g = value_and_grad(loss)(ps)
        ps, st = opt.update(ps, g, st)
        return ps, st, val

    params, state, _ = train_step(params, state)
    kept = [p.numpy().copy() for p in params]
    with pytest.raises(EnergyBudgetExceeded) as info, energy_budget(max_joules=1e-15, read_every=NEVER):
        params, state, _ = train_step(params, state)
    assert info.value.where == "before compiled call 'train_step'"
    for p, k in zip(params, kept):  # not donated: whole
        np.testing.assert_array_equal(p.numpy(), k)
    assert int(state.step) == 1
    params, state, _ = train_step(params, state)
    assert int(state.step) == 2
