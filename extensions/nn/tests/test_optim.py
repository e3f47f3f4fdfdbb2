"""Optimizers against torch.optim over 20 steps (float64, to 1e-12) through the PyTorch-style
API, the functional API and the functional update compiled (traced once); modules and
non-trainable leaves; checkpoints; hooks; the non-finite check; clipping; bad input."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
import torch

from tenferro_ad import GradientTape, value_and_grad
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError, TenferroError
from tenferro_nn import Module, StateDictError
from tenferro_nn.losses import mse_loss
from tenferro_nn.optim import (
    SGD,
    Adam,
    AdamW,
    HyperparameterError,
    NonFiniteError,
    OptState,
    clip_grad_norm,
    leaf_paths,
)
from tenferro_nn.schedules import cosine_annealing, linear_warmup, sequential, step_lr
from tenferro_runtime import array_api as xp
from tenferro_runtime import compile

SHAPES = [(3, 4), (5,), ()]
STEPS = 20
LRS = torch.optim.lr_scheduler

rng = np.random.default_rng(0)
P0 = [rng.standard_normal(s) for s in SHAPES]
GRADS = [[rng.standard_normal(s) for s in SHAPES] for _ in range(STEPS)]

# name: (tenferro class, kwargs, torch class, torch kwargs, torch scheduler factory)
CONFIGS = {
    "sgd": (SGD, dict(lr=0.1), torch.optim.SGD, dict(lr=0.1), None),
    "sgd-momentum-dampening-wd": (
        SGD, dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.02),
        torch.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.02), None),
    "sgd-nesterov-maximize-clip": (
        SGD, dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True, clip_norm=1.5),
        torch.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True), None),
    "sgd-step-lr": (SGD, dict(lr=step_lr(0.1, 6, 0.5), momentum=0.5), torch.optim.SGD,
                    dict(lr=0.1, momentum=0.5), lambda o: LRS.StepLR(o, 6, 0.5)),
    "adam": (Adam, dict(lr=0.01), torch.optim.Adam, dict(lr=0.01), None),
    "adam-amsgrad-wd-maximize": (
        Adam, dict(lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=True, maximize=True),
        torch.optim.Adam,
        dict(lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, amsgrad=True, maximize=True), None),
    "adamw": (AdamW, dict(lr=0.01), torch.optim.AdamW, dict(lr=0.01), None),
    "adamw-amsgrad-clip-warmup-cosine": (
        AdamW, dict(lr=sequential([linear_warmup(0.05, 5, 0.1), cosine_annealing(0.05, 15, 1e-3)], [5]),
                    weight_decay=0.05, amsgrad=True, clip_norm=0.7),
        torch.optim.AdamW, dict(lr=0.05, weight_decay=0.05, amsgrad=True),
        lambda o: LRS.SequentialLR(o, [LRS.LinearLR(o, 0.1, 1.0, 5), LRS.CosineAnnealingLR(o, 15, 1e-3)],
                                   [5])),
}


@functools.cache
def _torch_trajectory(name: str) -> list[list[np.ndarray]]:
    _, kw, tcls, tkw, sched = CONFIGS[name]
    ps = [torch.tensor(p, requires_grad=True) for p in P0]
    opt = tcls(ps, foreach=False, **tkw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sch = sched(opt) if sched else None
    out = []
    for g in GRADS:
        for p, gi in zip(ps, g):
            p.grad = torch.tensor(gi)
        if kw.get("clip_norm"):
            torch.nn.utils.clip_grad_norm_(ps, kw["clip_norm"])
        opt.step()
        if sch:
            sch.step()
        out.append([p.detach().numpy().copy() for p in ps])
    return out


def _check(name, step, got):
    for w, g in zip(_torch_trajectory(name)[step], got):
        np.testing.assert_allclose(np.asarray(g.numpy()), w, rtol=1e-12, atol=1e-12,
                                   err_msg=f"{name}, step {step + 1}")


def _make(name, params=None):
    cls, kw, *_ = CONFIGS[name]
    return cls(**kw) if params is None else cls(params, **kw)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_pytorch_style_trajectory(name):
    ps = [xp.asarray(p) for p in P0]
    objs = list(ps)
    opt = _make(name, ps)
    for i, g in enumerate(GRADS):
        rec = opt.step([xp.asarray(x) for x in g])
        assert rec.step == i + 1
        _check(name, i, ps)
    assert all(a is b for a, b in zip(ps, objs))  # updated in place


@pytest.mark.parametrize("name", list(CONFIGS))
def test_functional_trajectory_eager_and_compiled(name):
    opt = _make(name)
    ps = ps0 = [xp.asarray(p) for p in P0]
    state = opt.init(ps)
    update = compile(opt.update)
    cps, cstate = ps, state
    for i, g in enumerate(GRADS):
        g = [xp.asarray(x) for x in g]
        ps, state = opt.update(ps, g, state)
        cps, cstate = update(cps, g, cstate)
        _check(name, i, ps)
        _check(name, i, cps)
    assert update.cache_info().misses == 1
    assert int(state.step) == int(cstate.step) == STEPS
    assert all(np.array_equal(a.numpy(), b) for a, b in zip(ps0, P0))  # inputs untouched


class Affine(Module):
    def __init__(self):
        super().__init__()
        r = np.random.default_rng(5)
        self.weight = xp.asarray(r.standard_normal((2, 3)))
        self.bias = xp.asarray(r.standard_normal(2))
        self.register_buffer("scale", xp.asarray(2.0))

    def forward(self, x):
        return (x @ self.weight.mT + self.bias) * self.scale


def _torch_affine_trajectory(make_opt, xs, ys):
    m = Affine()
    w = torch.tensor(m.weight.numpy(), requires_grad=True)
    b = torch.tensor(m.bias.numpy(), requires_grad=True)
    opt = make_opt([w, b])
    out = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss((torch.tensor(x) @ w.T + b) * 2.0, torch.tensor(y))
        loss.backward()
        opt.step()
        out.append((w.detach().numpy().copy(), b.detach().numpy().copy(), loss.item()))
    return out


def _batches(n=STEPS):
    r = np.random.default_rng(6)
    return [r.standard_normal((4, 3)) for _ in range(n)], [r.standard_normal((4, 2)) for _ in range(n)]


def test_compiled_train_step_with_a_module_traces_once():
    xs, ys = _batches()
    want = _torch_affine_trajectory(lambda ps: torch.optim.AdamW(ps, lr=0.05, amsgrad=True, foreach=False),
                                    xs, ys)
    opt = AdamW(lr=0.05, amsgrad=True)
    model = Affine()
    state = opt.init(model)
    assert sorted(state.slots) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
    assert all(len(v) == 2 for v in state.slots.values())  # the buffer has no state

    @compile
    def train_step(model, state, x, y):
        loss, g = value_and_grad(lambda m: mse_loss(m(x), y))(model)
        model, state = opt.update(model, g, state)
        return model, state, loss

    for (x, y), (w, b, lv) in zip(zip(xs, ys), want):
        model, state, loss = train_step(model, state, xp.asarray(x), xp.asarray(y))
        np.testing.assert_allclose(model.weight.numpy(), w, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(model.bias.numpy(), b, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(float(loss), lv, rtol=1e-12)
    assert float(model.scale) == 2.0
    assert train_step.cache_info().misses == 1


def test_pytorch_style_module_with_tape_gradients_and_hooks():
    xs, ys = _batches(8)
    want = _torch_affine_trajectory(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=False),
                                    xs, ys)
    model = Affine()
    weight = model.weight
    records = []
    opt = SGD(model, lr=0.1, momentum=0.9, hooks=[lambda o, r: records.append((o, r))])
    for (x, y), (w, b, _) in zip(zip(xs, ys), want):
        with GradientTape() as tape:
            tape.watch(model.parameters())
            loss = mse_loss(model(xp.asarray(x)), xp.asarray(y))
        opt.step(tape.gradient(loss, model.parameters()), loss=loss)  # parameters() order
        np.testing.assert_allclose(model.weight.numpy(), w, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(model.bias.numpy(), b, rtol=1e-12, atol=1e-12)
    assert model.weight is weight and float(model.scale) == 2.0
    assert [r.step for _, r in records] == list(range(1, 9)) and all(o is opt for o, _ in records)
    assert records[-1][1].lr == 0.1 and records[-1][1].grad_norm is None
    assert records[-1][1].loss == pytest.approx(want[-1][2], rel=1e-12)


def test_non_trainable_leaves_pass_through_without_state():
    params = {"w": xp.asarray(np.ones(3)), "n": xp.asarray(np.arange(3)), "m": Affine()}
    opt = Adam(lr=0.1)
    state = opt.init(params)
    assert len(state.slots["exp_avg"]) == 3  # w, m.weight, m.bias: not the int tensor nor the buffer
    grads = {"w": xp.ones(3, dtype=xp.float64), "n": xp.zeros(3, dtype=xp.int64),
             "m": Affine()}
    new, state = opt.update(params, grads, state)
    assert new["n"] is params["n"] and new["m"].scale is params["m"].scale
    assert not np.allclose(new["w"].numpy(), 1.0)
    assert leaf_paths(params) == ["m.weight", "m.bias", "m.scale", "n", "w"]


def test_state_dict_round_trip_continues_the_trajectory():
    name = "adam-amsgrad-wd-maximize"
    ps = [xp.asarray(p) for p in P0]
    opt = _make(name, ps)
    for g in GRADS[:10]:
        opt.step([xp.asarray(x) for x in g])
    sd = opt.state_dict()
    assert sorted(sd["state"])[:3] == ["exp_avg.0", "exp_avg.1", "exp_avg.2"]
    assert int(sd["state"]["step"]) == 10
    assert sd["hyperparameters"]["betas"] == (0.8, 0.95)
    ps2 = [xp.asarray(p.numpy()) for p in ps]
    opt2 = Adam(ps2, lr=1.0)  # hyper-parameters come from the checkpoint
    opt2.load_state_dict({"state": {k: np.asarray(v.numpy()) for k, v in sd["state"].items()},
                          "hyperparameters": sd["hyperparameters"]})
    assert opt2.amsgrad and opt2.lr == 0.02
    for i, g in enumerate(GRADS[10:], start=10):
        opt2.step([xp.asarray(x) for x in g])
        _check(name, i, ps2)
    # functional: a state dict back into an OptState shaped like `like`
    f = _make(name)
    st = f.load_state_dict(sd, ps)
    assert isinstance(st, OptState) and int(st.step) == 10
    assert np.array_equal(st.slots["max_exp_avg_sq"][1].numpy(), sd["state"]["max_exp_avg_sq.1"].numpy())
    with pytest.raises(StateDictError, match="unexpected key"):
        Adam().load_state_dict(sd, ps)  # laid out for this optimizer: no amsgrad slot
    bad = {"state": dict(sd["state"]), "hyperparameters": {}}
    del bad["state"]["exp_avg.1"]
    with pytest.raises(StateDictError, match=r"missing key\(s\) \['exp_avg.1'\]"):
        opt2.load_state_dict(bad)
    bad["state"]["exp_avg.1"] = np.zeros(4)
    with pytest.raises(StateDictError, match=r"'exp_avg.1' is float64\[4\] in the state dict but the param"):
        opt2.load_state_dict(bad)
    assert int(opt2.state.step) == 20  # the failed loads changed nothing
    fresh = Adam(ps2)
    fresh.load_state_dict(sd)  # the checkpoint's amsgrad=True brings its slot along, as in PyTorch
    assert fresh.amsgrad and len(fresh.state.slots["max_exp_avg_sq"]) == 3
    with pytest.raises(StateDictError, match="missing key"):
        Adam(ps2[:2]).load_state_dict(sd)


def test_non_finite_check_names_the_step_and_changes_nothing():
    params = {"a": xp.asarray(np.ones(2)), "b": xp.asarray(np.ones(3))}
    opt = SGD(params, lr=0.1, momentum=0.9, check_finite=True)
    good = {"a": xp.ones(2, dtype=xp.float64), "b": xp.ones(3, dtype=xp.float64)}
    opt.step(good)
    opt.step(good)
    before, state = {k: v.numpy().copy() for k, v in params.items()}, opt.state
    bad = {"a": good["a"], "b": xp.asarray(np.array([1.0, np.nan, np.inf]))}
    with pytest.raises(NonFiniteError, match=r"SGD step 3: the gradient of parameter 'b' has 2 non-fin") as e:
        opt.step(bad)
    assert isinstance(e.value, TenferroError) and isinstance(e.value, ValueError)
    assert e.value.step == 3 and e.value.where == "b"
    with pytest.raises(NonFiniteError, match=r"step 3: the loss is not finite \(inf\)"):
        opt.step(good, loss=float("inf"))
    assert opt.state is state and all(np.array_equal(params[k].numpy(), before[k]) for k in params)
    model = Affine()
    with pytest.raises(NonFiniteError, match="parameter 'bias'"):
        Adam(model, check_finite=True).step([xp.ones((2, 3), dtype=xp.float64),
                                             xp.asarray(np.array([0.0, np.nan]))])
    f = Adam(check_finite=True)  # functional: checked when the gradients are concrete
    with pytest.raises(NonFiniteError, match=r"parameter 1 has 1 non-finite \(nan/inf\) entry;"):
        f.update([xp.ones(1, dtype=xp.float64)] * 2, [xp.ones(1, dtype=xp.float64), xp.asarray([np.nan])],
                 f.init([xp.ones(1, dtype=xp.float64)] * 2))


def test_bad_input_is_a_typed_error_raised_before_any_change():
    ps = [xp.asarray(p) for p in P0]
    opt = Adam(ps, lr=0.1)
    before = [p.numpy().copy() for p in ps]
    g = [xp.asarray(x) for x in GRADS[0]]
    with pytest.raises(ArgumentError, match="grads must have the structure of the parameters"):
        opt.step(g[:2])
    with pytest.raises(ShapeError, match=r"gradient of parameter 1 has shape \[4\]; expected .* \[5\]"):
        opt.step([g[0], xp.ones(4, dtype=xp.float64), g[2]])
    with pytest.raises(DTypeError, match="parameter 0 is float32; expected the parameter's dtype float64"):
        opt.step([xp.astype(g[0], xp.float32), g[1], g[2]])
    assert int(opt.state.step) == 0 and all(np.array_equal(p.numpy(), b) for p, b in zip(ps, before))
    with pytest.raises(ArgumentError, match="state holds slots"):
        opt.update(ps, g, SGD(momentum=0.9).init(ps))
    for make, msg in [(lambda: Adam(lr=-1.0), r"lr must be a finite number >= 0, got -1.0"),
                      (lambda: Adam(eps=-1e-8), r"eps must be a finite number >= 0"),
                      (lambda: AdamW(betas=(1.0, 0.9)), r"betas\[0\] must be a number in \[0, 1\), got 1.0"),
                      (lambda: Adam(betas=(0.9, -0.1)), r"betas\[1\] must be a number in \[0, 1\)"),
                      (lambda: SGD(lr=0.1, nesterov=True), "nesterov momentum needs momentum > 0"),
                      (lambda: SGD(lr=0.1, clip_norm=-1.0), "max_norm must be a finite number >= 0")]:
        with pytest.raises(HyperparameterError, match=msg):
            make()
    with pytest.raises(ArgumentError, match="lr must be a float or a schedule"):
        SGD(lr="0.1")
    with pytest.raises(ArgumentError, match="learning rate both as the first argument"):
        SGD(0.1, lr=0.2)
    with pytest.raises(ArgumentError, match="made without parameters"):
        SGD(0.1).step(g)


def test_first_argument_is_the_parameters_or_the_lr():
    assert SGD(0.5).lr == 0.5 and SGD(0.5).params is None
    sched = cosine_annealing(0.1, 10)
    assert Adam(sched).lr is sched and Adam().lr == 1e-3
    model = Affine()
    opt = Adam(model, 0.2)
    assert opt.params is model and opt.lr == 0.2 and len(opt.state.slots["exp_avg"]) == 2
    assert "Adam(lr=0.2" in repr(opt)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
def test_clip_grad_norm_matches_torch(norm_type):
    gs = [xp.asarray(x * 3) for x in GRADS[0]]
    tg = [torch.tensor(x * 3, requires_grad=True) for x in GRADS[0]]
    for t, x in zip(tg, GRADS[0]):
        t.grad = torch.tensor(x * 3)
    want = torch.nn.utils.clip_grad_norm_(tg, 2.0, norm_type=norm_type, foreach=False)
    f = compile(clip_grad_norm, static_argnums=(1, 2))
    for fn in (clip_grad_norm, f, f):
        clipped, total = fn(gs, 2.0, norm_type)
        np.testing.assert_allclose(float(total), want.item(), rtol=1e-13)
        for c, t in zip(clipped, tg):
            np.testing.assert_allclose(c.numpy(), t.grad.numpy(), rtol=1e-13, atol=1e-15)
    assert f.cache_info().misses == 1
    same, _ = clip_grad_norm({"a": gs[0]}, 1e6)
    assert np.array_equal(same["a"].numpy(), gs[0].numpy())
    with pytest.raises(DTypeError, match="gradient leaf 0 is int64"):
        clip_grad_norm([xp.zeros(2, dtype=xp.int64)], 1.0)


def test_state_and_state_dict_go_through_safetensors(tmp_path):
    from tenferro_nn import load_state, save_state

    ps = [xp.asarray(p) for p in P0]
    opt = Adam(ps, lr=cosine_annealing(0.1, 5), amsgrad=True)
    opt.step([xp.asarray(x) for x in GRADS[0]])
    save_state(tmp_path / "sd.safetensors", opt.state_dict())
    sd = load_state(tmp_path / "sd.safetensors", opt.state_dict())
    assert sd["hyperparameters"]["lr"] is None and int(sd["state"]["step"]) == 1
    other = Adam([xp.asarray(p.numpy()) for p in ps], lr=cosine_annealing(0.1, 5))
    other.load_state_dict(sd)
    assert other.amsgrad and callable(other.lr)
    save_state(tmp_path / "st.safetensors", opt.state)
    st = load_state(tmp_path / "st.safetensors", opt.state)
    assert isinstance(st, OptState) and np.array_equal(st.slots["exp_avg"][0].numpy(),
                                                       opt.state.slots["exp_avg"][0].numpy())


def test_complex_parameters_sgd_matches_torch_and_adam_refuses():
    r = np.random.default_rng(7)
    p0 = r.standard_normal(4) + 1j * r.standard_normal(4)
    gs = [r.standard_normal(4) + 1j * r.standard_normal(4) for _ in range(8)]
    tp = torch.tensor(p0, requires_grad=True)
    topt = torch.optim.SGD([tp], lr=0.1, momentum=0.9, weight_decay=0.1, foreach=False)
    p = xp.asarray(p0)
    opt = SGD([p], lr=0.1, momentum=0.9, weight_decay=0.1, clip_norm=1.0)
    for g in gs:
        tp.grad = torch.tensor(g)
        torch.nn.utils.clip_grad_norm_([tp], 1.0)
        topt.step()
        opt.step([xp.asarray(g)])
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(DTypeError, match="Adam: parameter 0 is complex128; this optimizer supports real"):
        Adam([p])
