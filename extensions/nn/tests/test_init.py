"""Initializers: PyTorch's fans and gains, the bounds and moments of each distribution with fixed
keys, determinism across devices, and argument errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_nn import init
from tenferro_runtime import array_api as xp
from tenferro_runtime import random

N = (200, 100)  # 20000 draws: moments to about 0.7% (one standard error)


def _moments(t):
    a = t.numpy().astype(np.float64)
    return a, a.mean(), a.std()


def test_calculate_gain_and_fans_match_torch():
    for name in ["linear", "conv2d", "sigmoid", "tanh", "relu", "selu", "leaky_relu"]:
        assert init.calculate_gain(name) == pytest.approx(torch.nn.init.calculate_gain(name), rel=1e-15)
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(
        torch.nn.init.calculate_gain("leaky_relu", 0.2))
    for shape in [(3, 4), (5, 2, 3, 3), (4, 6, 2)]:
        assert init.calculate_fan_in_and_fan_out(shape) == torch.nn.init._calculate_fan_in_and_fan_out(
            torch.empty(shape))
    with pytest.raises(ArgumentError, match="nonlinearity must be one of"):
        init.calculate_gain("swish")
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        init.xavier_uniform(random.key(0), (5,))


@pytest.mark.parametrize("dtype", [xp.float32, xp.float64])
def test_uniform_and_normal_moments_and_bounds(dtype):
    u = init.uniform(random.key(1), N, dtype, a=-2.0, b=3.0)
    assert u.dtype == dtype and u.shape == N
    a, mean, std = _moments(u)
    assert a.min() >= -2.0 and a.max() < 3.0 and a.min() < -1.99 and a.max() > 2.99
    assert abs(mean - 0.5) < 0.04 and abs(std - 5 / math.sqrt(12)) < 0.02
    a, mean, std = _moments(init.normal(random.key(2), N, dtype, mean=1.0, std=2.0))
    assert abs(mean - 1.0) < 0.05 and abs(std - 2.0) < 0.04
    assert abs(scipy.stats.skew(a.ravel())) < 0.07 and abs(scipy.stats.kurtosis(a.ravel())) < 0.14


def test_truncated_normal_bounds_and_moments():
    t = init.truncated_normal(random.key(3), N, xp.float64, mean=0.5, std=1.0, a=-1.0, b=1.5)
    a, mean, std = _moments(t)
    assert a.min() >= -1.0 and a.max() <= 1.5
    ref = scipy.stats.truncnorm(-1.5, 1.0, loc=0.5, scale=1.0)
    assert abs(mean - ref.mean()) < 0.015 and abs(std - ref.std()) < 0.01
    b = init.truncated_normal(random.key(3), (1000,), xp.float32).numpy()  # torch's default [-2, 2]
    assert np.abs(b).max() <= 2.0 and b.dtype == np.float32
    with pytest.raises(ArgumentError, match="a < b"):
        init.truncated_normal(random.key(3), (3,), a=1.0, b=0.0)


@pytest.mark.parametrize("shape", [(200, 100), (20, 40, 5, 5)])
def test_xavier_and_kaiming_scales(shape):
    fan_in, fan_out = init.calculate_fan_in_and_fan_out(shape)
    bound = 1.5 * math.sqrt(6 / (fan_in + fan_out))
    a, mean, std = _moments(init.xavier_uniform(random.key(4), shape, gain=1.5))
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.99 * bound
    assert abs(std - bound / math.sqrt(3)) < 0.02 * bound
    a, mean, std = _moments(init.xavier_normal(random.key(5), shape, xp.float64))
    assert abs(std / math.sqrt(2 / (fan_in + fan_out)) - 1) < 0.02 and abs(mean) < 0.03 * std
    for mode, fan in (("fan_in", fan_in), ("fan_out", fan_out)):  # leaky_relu: the slope is a = 0
        for nl, gain in (("relu", math.sqrt(2)), ("leaky_relu", math.sqrt(2)), ("tanh", 5 / 3)):
            bound = gain * math.sqrt(3 / fan)
            a, _, std = _moments(init.kaiming_uniform(random.key(6), shape, mode=mode, nonlinearity=nl))
            assert np.abs(a).max() <= bound * (1 + 1e-6) and abs(std - bound / math.sqrt(3)) < 0.02 * bound
            t = init.kaiming_normal(random.key(7), shape, xp.float64, mode=mode, nonlinearity=nl)
            _, _, std = _moments(t)
            assert abs(std * math.sqrt(fan) / gain - 1) < 0.02
    a = init.kaiming_uniform(random.key(8), shape, a=math.sqrt(5)).numpy()  # PyTorch's Linear/Conv default
    assert np.abs(a).max() <= 1 / math.sqrt(fan_in)
    with pytest.raises(ArgumentError, match="mode must be"):
        init.kaiming_normal(random.key(0), shape, mode="fan_avg")


def test_same_key_same_values_on_every_device_and_edge_cases(backend_device):
    k = random.key(9)
    here = init.normal(k, (4, 5), xp.float64)
    assert str(here.device) == backend_device
    there = init.normal(k, (4, 5), xp.float64, device="numpy:cpu")
    assert str(there.device) == "numpy:cpu"
    np.testing.assert_array_equal(here.numpy(), there.numpy())
    assert not np.array_equal(init.normal(random.key(10), (4, 5), xp.float64).numpy(), here.numpy())
    assert init.zeros(None, (2, 3)).numpy().tolist() == [[0.0] * 3] * 2
    assert init.zeros(None, (2,)).dtype == xp.float32
    assert init.ones(k, 3, xp.float64).numpy().tolist() == [1.0] * 3
    assert init.kaiming_uniform(k, (0, 4)).shape == (0, 4) and init.xavier_normal(k, (3, 0)).shape == (3, 0)
    with pytest.raises(DTypeError, match="real floating dtype"):
        init.normal(k, (2,), xp.int32)
    with pytest.raises(ShapeError, match="shape must be"):
        init.uniform(k, (2, -1))
    with pytest.raises(ArgumentError, match="key must be a random key"):
        init.uniform(3, (2,))
