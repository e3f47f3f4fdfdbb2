"""Bad hyper-parameters of optimizers, schedules, layers, functional ops, losses, initializers
and data loading, all checked by `tenferro_nn.checks`: a wrong type is an `ArgumentError` (a
TypeError, never a ValueError), a bad value a `HyperparameterError` (a ValueError and an
ArgumentError); each message names the argument and what was given; nothing changes (the
parameters and the optimizer state are as before a refused step or load)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tenferro_nn as nn
from tenferro_core.errors import ArgumentError, ArgumentValueError, TenferroError
from tenferro_nn import functional as F
from tenferro_nn import init
from tenferro_nn.checks import HyperparameterError
from tenferro_nn.optim import SGD, Adam, AdamW
from tenferro_nn.schedules import cosine_annealing, linear_warmup, sequential, step_lr
from tenferro_runtime import array_api as xp
from tenferro_runtime import random

NAN, INF = float("nan"), float("inf")
KEY = random.key(0)


def _value_error(make, fragment):
    """`make()` raises a HyperparameterError: a TenferroError, ValueError and ArgumentError."""
    with pytest.raises(HyperparameterError) as info:
        make()
    e = info.value
    assert isinstance(e, TenferroError) and isinstance(e, ValueError) and isinstance(e, ArgumentValueError)
    assert isinstance(e, ArgumentError)  # still caught where ArgumentError was
    assert fragment in str(e), str(e)
    return e


def _type_error(make, fragment):
    """`make()` raises an ArgumentError: a TenferroError and TypeError, not a ValueError."""
    with pytest.raises(ArgumentError) as info:
        make()
    e = info.value
    assert isinstance(e, TenferroError) and isinstance(e, TypeError) and not isinstance(e, ValueError)
    assert fragment in str(e), str(e)
    return e


def _params():
    return {"w": xp.asarray(np.arange(6.0).reshape(2, 3)), "b": xp.asarray(np.ones(3))}


def _grads():
    return {"w": xp.ones((2, 3), dtype=xp.float64), "b": xp.ones(3, dtype=xp.float64)}


def _snapshot(params, opt):
    return ({k: v.numpy().copy() for k, v in params.items()}, int(opt.state.step),
            {n: [t.numpy().copy() for t in ts] for n, ts in opt.state.slots.items()})


def _same(a, b):
    (pa, sa, la), (pb, sb, lb) = a, b
    assert sa == sb and pa.keys() == pb.keys() and la.keys() == lb.keys()
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)
    assert all(np.array_equal(x, y) for n in la for x, y in zip(la[n], lb[n]))


# ---- optimizers -------------------------------------------------------------------------------
OPT_VALUE = [
    (lambda p: SGD(p, lr=NAN), "SGD: lr must be a finite number >= 0, got nan"),
    (lambda p: SGD(p, lr=INF), "lr must be a finite number >= 0, got inf"),
    (lambda p: SGD(p, lr=-0.1), "lr must be a finite number >= 0, got -0.1"),
    (lambda p: SGD(p, lr=0.1, momentum=NAN), "momentum must be a finite number >= 0, got nan"),
    (lambda p: SGD(p, lr=0.1, momentum=-0.9), "momentum must be a finite number >= 0, got -0.9"),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=NAN), "dampening must be a number in [0, 1], got nan"),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=-0.5), "dampening must be a number in [0, 1]"),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=INF), "dampening must be a number in [0, 1], got inf"),
    (lambda p: SGD(p, lr=0.1, weight_decay=-1e-4), "weight_decay must be a finite number >= 0"),
    (lambda p: SGD(p, lr=0.1, weight_decay=INF), "weight_decay must be a finite number >= 0, got inf"),
    (lambda p: SGD(p, lr=0.1, clip_norm=NAN), "max_norm must be a finite number >= 0, got nan"),
    (lambda p: SGD(p, lr=0.1, nesterov=True), "nesterov momentum needs momentum > 0"),
    (lambda p: Adam(p, eps=NAN), "Adam: eps must be a finite number >= 0, got nan"),
    (lambda p: Adam(p, eps=-1e-8), "eps must be a finite number >= 0, got -1e-08"),
    (lambda p: Adam(p, betas=(NAN, 0.9)), "betas[0] must be a number in [0, 1), got nan"),
    (lambda p: Adam(p, betas=(0.9, 1.0)), "betas[1] must be a number in [0, 1), got 1.0"),
    (lambda p: Adam(p, betas=(-0.1, 0.9)), "betas[0] must be a number in [0, 1)"),
    (lambda p: AdamW(p, weight_decay=NAN), "AdamW: weight_decay must be a finite number >= 0, got nan"),
    (lambda p: Adam(p, lr=2**2000), "lr must be a finite number >= 0"),
]

OPT_TYPE = [
    (lambda p: SGD(p, lr=0.1, momentum=0.9, nesterov="no"), "nesterov must be True or False, got str 'no'"),
    (lambda p: SGD(p, lr=0.1, maximize=1), "maximize must be True or False, got int 1"),
    (lambda p: SGD(p, lr=0.1, momentum=None), "momentum must be a finite number >= 0, got NoneType None"),
    (lambda p: SGD(p, lr=0.1, dampening="0"), "dampening must be a number in [0, 1], got str '0'"),
    (lambda p: SGD(p, lr="0.1"), "lr must be a float or a schedule"),
    (lambda p: SGD(p, lr=0.1, check_finite="yes"), "check_finite must be True or False"),
    (lambda p: SGD(p, lr=0.1, hooks=[3]), "hooks must be callables"),
    (lambda p: SGD(p, lr=0.1, hooks=print), "hooks must be a list or tuple of callables"),
    (lambda p: Adam(p, amsgrad="False"), "amsgrad must be True or False, got str 'False'"),
    (lambda p: Adam(p, eps=None), "eps must be a finite number >= 0, got NoneType None"),
    (lambda p: Adam(p, betas=(0.9, "0.99")), "betas[1] must be a number in [0, 1), got str '0.99'"),
    (lambda p: Adam(p, betas=None), "betas must be a pair of numbers"),
    (lambda p: AdamW(p, weight_decay=None), "weight_decay must be a finite number >= 0, got NoneType"),
    (lambda p: Adam(p, clip_norm="1"), "max_norm must be a finite number >= 0, got str '1'"),
]


@pytest.mark.parametrize("make, fragment", OPT_VALUE)
def test_optimizer_value_errors(make, fragment):
    params = _params()
    before = {k: v.numpy().copy() for k, v in params.items()}
    _value_error(lambda: make(params), fragment)
    assert all(np.array_equal(params[k].numpy(), before[k]) for k in params)


@pytest.mark.parametrize("make, fragment", OPT_TYPE)
def test_optimizer_type_errors(make, fragment):
    params = _params()
    before = {k: v.numpy().copy() for k, v in params.items()}
    _type_error(lambda: make(params), fragment)
    assert all(np.array_equal(params[k].numpy(), before[k]) for k in params)


def test_numpy_numbers_and_bools_are_accepted_and_normalized():
    opt = SGD(_params(), lr=np.float32(0.5), momentum=np.float64(0.9), nesterov=np.bool_(True),
              weight_decay=np.int64(0))
    assert (opt.lr, opt.momentum, opt.nesterov, opt.weight_decay) == (0.5, 0.9, True, 0.0)
    assert type(opt.lr) is float and type(opt.nesterov) is bool
    adam = Adam(betas=[np.float32(0.5), 0.25], amsgrad=np.bool_(False))
    assert adam.betas == (0.5, 0.25) and adam.amsgrad is False


def test_load_state_dict_with_bad_hyperparameters_changes_nothing():
    params = _params()
    opt = SGD(params, lr=0.1, momentum=0.9)
    opt.step(_grads())
    sd = opt.state_dict()
    before = _snapshot(params, opt)
    for hp, err, fragment in [({"nesterov": "no"}, _type_error, "nesterov must be True or False"),
                              ({"momentum": NAN}, _value_error, "momentum must be a finite number >= 0"),
                              ({"lr": -1.0}, _value_error, "lr must be a finite number >= 0, got -1.0")]:
        bad = {"state": sd["state"], "hyperparameters": {**sd["hyperparameters"], **hp}}
        err(lambda bad=bad: opt.load_state_dict(bad), fragment)
        _same(_snapshot(params, opt), before)
        assert (opt.lr, opt.momentum, opt.nesterov) == (0.1, 0.9, False)


# ---- a schedule's value, checked at every step -------------------------------------------------
@pytest.mark.parametrize("schedule, refused_at, fragment", [
    (lambda t: 0.1 if int(t) < 2 else NAN, 3, "gave lr=nan"),
    (lambda t: 0.1 if int(t) < 2 else -0.1, 3, "gave lr=-0.1"),
    (lambda t: xp.asarray(0.1, dtype=xp.float64) if int(t) < 2 else xp.asarray(-1.0, dtype=xp.float64), 3,
     "gave lr=-1.0"),
    (step_lr(0.1, 1, gamma=1e300), 3, "gave lr=inf"),  # 0.1, 1e299, then inf
    (lambda t: INF, 1, "gave lr=inf"),
])
@pytest.mark.parametrize("opt_cls", [SGD, Adam])
def test_a_schedule_giving_nan_or_a_negative_lr_is_refused_before_any_change(opt_cls, schedule, refused_at,
                                                                              fragment):
    params = _params()
    opt = opt_cls(params, lr=schedule, **({"momentum": 0.9} if opt_cls is SGD else {}))
    for _ in range(refused_at - 1):
        opt.step(_grads())
    before, state = _snapshot(params, opt), opt.state
    calls = []
    opt.hooks.append(lambda o, r: calls.append(r))
    e = _value_error(lambda: opt.step(_grads()), fragment)
    assert f"{opt_cls.__name__} step {refused_at}: the learning-rate schedule" in str(e)
    assert "nothing was updated" in str(e)
    assert opt.state is state and calls == []
    _same(_snapshot(params, opt), before)
    # the functional API refuses it too, for a concrete step
    f = opt_cls(lr=schedule)
    fstate = f.init(params)
    for _ in range(refused_at - 1):
        _, fstate = f.update(params, _grads(), fstate)
    _value_error(lambda: f.update(params, _grads(), fstate), fragment)


@pytest.mark.parametrize("schedule, fragment", [
    (lambda t: "0.1", "returned str '0.1'"),
    (lambda t: None, "returned NoneType None"),
    (lambda t: xp.ones(2, dtype=xp.float64), "returned a float64[2] tensor"),
])
def test_a_schedule_returning_no_number_is_a_type_error(schedule, fragment):
    params = _params()
    opt = SGD(params, lr=schedule)
    before = _snapshot(params, opt)
    _type_error(lambda: opt.step(_grads()), fragment)
    _same(_snapshot(params, opt), before)


def test_a_valid_schedule_still_runs_and_compiles():
    from tenferro_runtime import compile

    params = _params()
    opt = SGD(lr=cosine_annealing(0.1, 4))
    state = opt.init(params)
    step = compile(lambda p, g, s: opt.update(p, g, s))  # traced: the value is not known there
    for _ in range(3):
        params, state = step(params, _grads(), state)
    assert int(state.step) == 3 and step.cache_info().misses == 1


# ---- schedules ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make, fragment", [
    (lambda: step_lr(0.1, 0), "step_lr: step_size must be an int >= 1, got 0"),
    (lambda: step_lr(0.1, 2, gamma=NAN), "gamma must be a finite number >= 0, got nan"),
    (lambda: step_lr(0.1, 2, gamma=-0.5), "gamma must be a finite number >= 0, got -0.5"),
    (lambda: step_lr(INF, 2), "lr must be a finite number >= 0, got inf"),
    (lambda: cosine_annealing(0.1, 0), "cosine_annealing: t_max must be an int >= 1, got 0"),
    (lambda: cosine_annealing(0.1, -5), "t_max must be an int >= 1, got -5"),
    (lambda: cosine_annealing(0.1, 10, eta_min=-1e-3), "eta_min must be a finite number >= 0"),
    (lambda: cosine_annealing(0.1, 10, eta_min=NAN), "eta_min must be a finite number >= 0, got nan"),
    (lambda: linear_warmup(0.1, 5, start_factor=INF), "start_factor must be a finite number >= 0"),
    (lambda: linear_warmup(0.1, 0), "warmup_steps must be an int >= 1, got 0"),
    (lambda: sequential([step_lr(0.1, 2)] * 2, [-1]), "a milestone must be an int >= 0, got -1"),
    (lambda: sequential([step_lr(0.1, 2)] * 3, [5, 3]), "milestones must be increasing"),
    (lambda: sequential([step_lr(0.1, 2)], [3]), "expected 0 milestone(s)"),
    (lambda: cosine_annealing(0.1, 2)(-1), "the step must be >= 0, got -1"),
])
def test_schedule_value_errors(make, fragment):
    _value_error(make, fragment)


@pytest.mark.parametrize("make, fragment", [
    (lambda: step_lr(0.1, 2.5), "step_size must be an int >= 1, got float 2.5"),
    (lambda: step_lr(None, 2), "lr must be a finite number >= 0, got NoneType None"),
    (lambda: cosine_annealing(0.1, "10"), "t_max must be an int >= 1, got str '10'"),
    (lambda: cosine_annealing(0.1, 10, eta_min=None), "eta_min must be a finite number >= 0, got NoneType"),
    (lambda: linear_warmup(0.1, True), "warmup_steps must be an int >= 1, got bool True"),
    (lambda: sequential([step_lr(0.1, 2)] * 2, [1.5]), "a milestone must be an int >= 0, got float 1.5"),
    (lambda: sequential(step_lr(0.1, 2), []), "schedules must be a list or tuple"),
    (lambda: step_lr(0.1, 2)(1.0), "the step must be a Python int or a 0-d integer tensor, got float"),
])
def test_schedule_type_errors(make, fragment):
    _type_error(make, fragment)


def test_schedule_fields_are_normalized():
    s = step_lr(np.float32(0.5), np.int64(3), gamma=np.float64(0.5))
    assert (s.lr, s.step_size, s.gamma) == (0.5, 3, 0.5) and type(s.step_size) is int
    assert s(6) == 0.125
    assert step_lr(0.1, 1, gamma=1e300)(5) == math.inf  # no OverflowError: inf, refused by a step


# ---- layers, functional ops, losses, initializers ---------------------------------------------
LAYER_VALUE = [
    (lambda: nn.Dropout(1.5), "Dropout: p must be a probability in [0, 1], got 1.5"),
    (lambda: nn.Dropout(NAN), "p must be a probability in [0, 1], got nan"),
    (lambda: nn.Dropout(-0.1), "p must be a probability in [0, 1], got -0.1"),
    (lambda: nn.Linear(-1, 3, key=KEY), "Linear: in_features must be an int >= 0, got -1"),
    (lambda: nn.Linear(3, -2, key=KEY), "out_features must be an int >= 0, got -2"),
    (lambda: nn.Embedding(3, 2, padding_idx=5, key=KEY), "padding_idx must be an int in [-3, 2], got 5"),
    (lambda: nn.Conv2d(1, 2, 3, stride=0, key=KEY), "Conv2d: stride must be an int >= 1 or a pair of them, "
                                                    "got 0"),
    (lambda: nn.Conv2d(1, 2, 3, stride=(1, 0), key=KEY), "stride must be an int >= 1 or a pair of them"),
    (lambda: nn.Conv2d(1, 2, 0, key=KEY), "kernel_size must be an int >= 1 or a pair of them, got 0"),
    (lambda: nn.Conv2d(1, 2, 3, padding=-1, key=KEY), "padding must be an int >= 0 or a pair of them"),
    (lambda: nn.Conv2d(1, 2, 3, dilation=0, key=KEY), "dilation must be an int >= 1"),
    (lambda: nn.Conv2d(2, 2, 3, groups=0, key=KEY), "groups must be an int >= 1, got 0"),
    (lambda: nn.Conv2d(3, 2, 3, groups=2, key=KEY), "must be divisible by groups"),
    (lambda: nn.Conv2d(1, 2, 3, padding_mode="reflect", key=KEY), "padding_mode"),
    (lambda: nn.Conv2d(1, 2, 3, stride=2, padding="same", key=KEY), "'same' is not supported for strided"),
    (lambda: nn.Conv2d(1, 2, 3, padding="full", key=KEY), "padding must be an int, a pair, 'valid' or"),
    (lambda: nn.MaxPool2d(2, stride=0), "MaxPool2d: stride must be an int >= 1 or a pair of them, got 0"),
    (lambda: nn.AvgPool2d(0), "AvgPool2d: kernel_size must be an int >= 1"),
    (lambda: nn.BatchNorm1d(3, eps=NAN), "BatchNorm1d: eps must be a finite number >= 0, got nan"),
    (lambda: nn.BatchNorm2d(3, eps=-1e-5), "eps must be a finite number >= 0"),
    (lambda: nn.BatchNorm1d(3, momentum=1.5), "momentum must be a number in [0, 1], got 1.5"),
    (lambda: nn.BatchNorm1d(-3), "num_features must be an int >= 0, got -3"),
    (lambda: nn.LayerNorm(4, eps=INF), "LayerNorm: eps must be a finite number >= 0, got inf"),
    (lambda: nn.LayerNorm((4, -1)), "normalized_shape (each size) must be an int >= 0, got -1"),
    (lambda: nn.MultiheadAttention(4, 2, dropout=2.0, key=KEY), "dropout must be a probability in [0, 1]"),
    (lambda: nn.MultiheadAttention(4, 3, key=KEY), "embed_dim (4) must be divisible by num_heads (3)"),
    (lambda: nn.MultiheadAttention(4, 0, key=KEY), "num_heads must be an int >= 1, got 0"),
    (lambda: nn.GELU("fast"), "GELU: approximate must be one of ('none', 'tanh'), got 'fast'"),
    (lambda: nn.CrossEntropyLoss(label_smoothing=NAN), "label_smoothing must be a number in [0, 1], got nan"),
    (lambda: nn.MSELoss(reduction="avg"), "reduction must be one of ('none', 'mean', 'sum'), got 'avg'"),
]

LAYER_TYPE = [
    (lambda: nn.Dropout("0.5"), "Dropout: p must be a probability in [0, 1], got str '0.5'"),
    (lambda: nn.Dropout(None), "p must be a probability in [0, 1], got NoneType None"),
    (lambda: nn.Dropout(0.5, inplace="no"), "inplace must be True or False"),
    (lambda: nn.Linear(2.0, 3, key=KEY), "in_features must be an int >= 0, got float 2.0"),
    (lambda: nn.Linear(2, 3, bias="no", key=KEY), "Linear: bias must be True or False, got str 'no'"),
    (lambda: nn.Conv2d(1, 2, 3, stride="1", key=KEY), "stride must be an int >= 1 or a pair of them, got s"),
    (lambda: nn.Conv2d(1, 2, 3, bias=None, key=KEY), "bias must be True or False, got NoneType None"),
    (lambda: nn.Conv2d(1, 2, 3, padding=1.5, key=KEY), "padding must be an int >= 0 or a pair of them"),
    (lambda: nn.AvgPool2d(2, count_include_pad="yes"), "count_include_pad must be True or False"),
    (lambda: nn.BatchNorm1d(3, momentum=None), "momentum=None is not supported"),
    (lambda: nn.BatchNorm1d(3, affine="yes"), "affine must be True or False"),
    (lambda: nn.BatchNorm1d(3, eps="1e-5"), "eps must be a finite number >= 0, got str"),
    (lambda: nn.LayerNorm("4"), "normalized_shape must be an int or a non-empty sequence"),
    (lambda: nn.LayerNorm(4, elementwise_affine=1), "elementwise_affine must be True or False, got int 1"),
    (lambda: nn.MultiheadAttention(4, 2, batch_first="no", key=KEY), "batch_first must be True or False"),
    (lambda: nn.GELU(None), "approximate must be one of ('none', 'tanh'), got NoneType None"),
    (lambda: nn.ReLU(inplace="no"), "ReLU: inplace must be True or False"),
    (lambda: nn.Softmax(1.0), "Softmax: dim must be an int, got float 1.0"),
    (lambda: nn.Flatten("1"), "Flatten: start_dim must be an int, got str '1'"),
    (lambda: nn.NLLLoss(ignore_index=None), "ignore_index must be an int, got NoneType None"),
    (lambda: nn.MSELoss(reduction=None), "reduction must be one of ('none', 'mean', 'sum'), got NoneType"),
]


@pytest.mark.parametrize("make, fragment", LAYER_VALUE)
def test_layer_value_errors(make, fragment):
    _value_error(make, fragment)


@pytest.mark.parametrize("make, fragment", LAYER_TYPE)
def test_layer_type_errors(make, fragment):
    _type_error(make, fragment)


def test_functional_and_init_checks():
    x = xp.ones((1, 1, 4, 4))
    w = xp.ones((1, 1, 3, 3))
    _value_error(lambda: F.conv2d(x, w, stride=0), "conv2d: stride must be an int >= 1")
    _value_error(lambda: F.conv2d(x, w, groups=0), "conv2d: groups must be an int >= 1, got 0")
    _value_error(lambda: F.dropout(x, 1.5, key=KEY), "dropout: p must be a probability in [0, 1]")
    _type_error(lambda: F.dropout(x, 0.5, key=KEY, training="yes"), "training must be True or False")
    _value_error(lambda: F.layer_norm(x, (4,), eps=NAN), "layer_norm: eps must be a finite number >= 0")
    _value_error(lambda: F.max_pool2d(x, 2, padding=2), "at most half of kernel_size")
    _value_error(lambda: F.scaled_dot_product_attention(x, x, x, dropout_p=-1.0), "dropout_p must be a prob")
    _type_error(lambda: F.scaled_dot_product_attention(x, x, x, is_causal="no"), "is_causal must be True or")
    _value_error(lambda: nn.cross_entropy(xp.ones((2, 3)), xp.asarray([0, 1]), label_smoothing=1.5),
                 "label_smoothing must be a number in [0, 1], got 1.5")
    _value_error(lambda: init.normal(KEY, (3,), std=-1.0), "normal: std must be a finite number >= 0")
    _value_error(lambda: init.uniform(KEY, (3,), a=NAN), "uniform: a must be a finite number, got nan")
    _value_error(lambda: init.truncated_normal(KEY, (3,), std=0.0), "std must be a finite number > 0")
    _value_error(lambda: init.kaiming_uniform(KEY, (3, 3), mode="fan"), "mode must be one of")
    _type_error(lambda: init.normal(KEY, (3,), mean="0"), "normal: mean must be a finite number, got str")


def test_multihead_attention_forward_flags():
    mha = nn.MultiheadAttention(4, 2, key=KEY)
    q = xp.ones((1, 2, 4))
    _type_error(lambda: mha(q, q, q, need_weights="yes"), "need_weights must be True or False")
    _type_error(lambda: mha(q, q, q, is_causal=1), "is_causal must be True or False")


# ---- data ---------------------------------------------------------------------------------------
def _ds(n=10):
    return nn.ArrayDataset(np.arange(n, dtype=np.float32)[:, None], np.arange(n))


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(batch_size=0), "DataLoader: batch_size must be an int >= 1, got 0"),
    (dict(batch_size=-2), "batch_size must be an int >= 1, got -2"),
    (dict(prefetch=-1), "prefetch must be an int >= 0, got -1"),
])
def test_data_loader_value_errors(kwargs, fragment):
    _value_error(lambda: nn.DataLoader(_ds(), **kwargs), fragment)


@pytest.mark.parametrize("kwargs, fragment", [
    (dict(batch_size="2"), "batch_size must be an int >= 1, got str '2'"),
    (dict(batch_size=2.0), "batch_size must be an int >= 1, got float 2.0"),
    (dict(batch_size=None), "batch_size must be an int >= 1, got NoneType None"),
    (dict(shuffle="yes", key=KEY), "shuffle must be True or False, got str 'yes'"),
    (dict(drop_last=1), "drop_last must be True or False, got int 1"),
])
def test_data_loader_type_errors(kwargs, fragment):
    _type_error(lambda: nn.DataLoader(_ds(), **kwargs), fragment)


def test_data_loader_accepts_numpy_ints_and_bools():
    loader = nn.DataLoader(_ds(), np.int64(4), shuffle=np.bool_(False), drop_last=np.bool_(True))
    assert loader.batch_size == 4 and loader.shuffle is False and loader.drop_last is True
    assert len(list(loader)) == 2
    _value_error(lambda: loader.set_epoch(-1), "epoch must be an int >= 0, got -1")
    assert loader.epoch == 1


class _Batched:
    """A dataset whose batch() returns `value` (indices -> value)."""

    def __init__(self, make):
        self.make = make

    def __len__(self):
        return 6

    def __getitem__(self, i):
        return (np.float32(i),)

    def batch(self, indices):
        return self.make(indices)


@pytest.mark.parametrize("make, fragment", [
    (lambda idx: None, "returned None for batch 0"),
    (lambda idx: [1, 2], "returned a list ([1, 2]), holding a int (1)"),
    (lambda idx: "rows", "returned a str ('rows')"),
    (lambda idx: (np.asarray(idx, dtype=np.float32), None), "whose field 1 is None"),
    (lambda idx: {"x": np.asarray(idx), "meta": "ids"}, "holding a str ('ids')"),
])
def test_a_dataset_batch_returning_no_arrays_is_a_typed_error_naming_the_dataset(make, fragment):
    loader = nn.DataLoader(_Batched(make), 3)
    e = _type_error(lambda: next(iter(loader)), fragment)
    assert "_Batched.batch(indices)" in str(e)
    assert "must return the batch's NumPy arrays or tenferro tensors" in str(e)


def test_a_dataset_item_of_none_and_a_collate_fn_returning_none_are_typed_errors():
    class Items:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return None if i == 2 else (np.float32(i),)

    e = _type_error(lambda: list(nn.DataLoader(Items(), 2)), "Items[2] returned None")
    assert "__getitem__ must return the item" in str(e)
    e = _type_error(lambda: next(iter(nn.DataLoader(_ds(), 2, collate_fn=lambda items: None))),
                    "returned None for batch 0")
    assert "collate_fn" in str(e) and "must return the batch" in str(e)


def test_a_dataset_batch_returning_arrays_or_tensors_still_works():
    loader = nn.DataLoader(_Batched(lambda idx: {"x": np.asarray(idx, dtype=np.float32),
                                                 "y": xp.asarray(np.asarray(idx))}), 4)
    (first,) = next(iter(loader))
    assert set(first) == {"x", "y"} and first["x"].shape == (4,)
