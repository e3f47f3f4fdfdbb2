"""Parameter initializers with PyTorch's conventions (`torch.nn.init`: fan_in / fan_out, gains),
written functionally: each takes an explicit random key, a shape, a dtype and a device, and
returns a new tensor (the same key gives the same values on every backend).

Every initializer has the signature ``init(key, shape, dtype=float32, device=None, **options)``
so they are interchangeable; `zeros` and `ones` accept and ignore the key (it may be None).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError, DTypeError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import default_runtime, random
from tenferro_runtime.tensor import Tensor

from .checks import HyperparameterError, choice, number

Shape = Sequence[int]


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    s = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else shape
    try:
        out = tuple(s)
    except TypeError:
        out = None
    if out is None or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in out):
        raise ShapeError(f"{name}: shape must be a sequence of non-negative ints, got {shape!r}")
    return out


def _dtype(name: str, dtype: Any) -> Any:
    if getattr(dtype, "kind", None) != "f":
        raise DTypeError(f"{name}: dtype must be a real floating dtype (float32, float64, ...), got {dtype}")
    return dtype


def _key_on(name: str, key: Any, device: Any) -> Tensor:
    """The key on `device` (default: the default device), where the numbers are drawn (a key
    is two integers: moving it is cheap, and the values do not depend on the device)."""
    if not isinstance(key, Tensor):
        raise ArgumentError(f"{name}: key must be a random key (tenferro_runtime.random.key(seed)), got "
                            f"{type(key).__name__}")
    dev = default_runtime().device(device)
    return key if key.device == dev else xp.asarray(key, device=dev)


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (`torch.nn.init.calculate_gain`)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    choice("calculate_gain", "nonlinearity", nonlinearity, (*linear, "tanh", "relu", "leaky_relu", "selu"))
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else number("calculate_gain", "negative_slope", param, low=None)
        return math.sqrt(2.0 / (1 + slope ** 2))
    return 3.0 / 4  # selu


def calculate_fan_in_and_fan_out(shape: Shape) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of `shape` (out, in, *receptive field), as PyTorch."""
    s = _shape("calculate_fan_in_and_fan_out", shape)
    if len(s) < 2:
        raise ShapeError(f"fan in and fan out need a shape of at least 2 dimensions, got {list(s)}")
    rf = math.prod(s[2:])
    return s[1] * rf, s[0] * rf


def _fan(shape: Shape, mode: str) -> int:
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    return fan_in if choice("init", "mode", mode, ("fan_in", "fan_out")) == "fan_in" else fan_out


def zeros(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None) -> Tensor:
    """A tensor of zeros (the key is ignored)."""
    return xp.zeros(_shape("zeros", shape), dtype=_dtype("zeros", dtype), device=device)


def ones(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None) -> Tensor:
    """A tensor of ones (the key is ignored)."""
    return xp.ones(_shape("ones", shape), dtype=_dtype("ones", dtype), device=device)


def uniform(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None, a: float = 0.0,
            b: float = 1.0) -> Tensor:
    """Values drawn uniformly from [a, b)."""
    a, b = number("uniform", "a", a, low=None), number("uniform", "b", b, low=None)
    k = _key_on("uniform", key, device)
    return random.uniform(k, _shape("uniform", shape), _dtype("uniform", dtype), a, b)


def normal(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None, mean: float = 0.0,
           std: float = 1.0) -> Tensor:
    """Values drawn from N(mean, std^2)."""
    mean, std = number("normal", "mean", mean, low=None), number("normal", "std", std)
    k = _key_on("normal", key, device)
    z = random.normal(k, _shape("normal", shape), _dtype("normal", dtype))
    return z * std + mean


def truncated_normal(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None, mean: float = 0.0,
                     std: float = 1.0, a: float = -2.0, b: float = 2.0) -> Tensor:
    """N(mean, std^2) restricted to [a, b] (absolute bounds, as `torch.nn.init.trunc_normal_`)."""
    name = "truncated_normal"
    mean, std = number(name, "mean", mean, low=None), number(name, "std", std, low_open=True)
    a, b = number(name, "a", a, low=None), number(name, "b", b, low=None)
    if not a < b:
        raise HyperparameterError(f"truncated_normal: need std > 0 and a < b, got std={std}, a={a}, b={b}")
    k = _key_on("truncated_normal", key, device)
    lo, hi = (a - mean) / std, (b - mean) / std
    shape, dtype = _shape("truncated_normal", shape), _dtype("truncated_normal", dtype)
    z = random.truncated_normal(k, lo, hi, shape, dtype)
    return xp.clip(z * float(std) + float(mean), float(a), float(b))


def xavier_uniform(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None,
                   gain: float = 1.0) -> Tensor:
    """U(-a, a) with a = gain sqrt(6 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    if math.prod(shape) == 0:  # nothing to draw (PyTorch: a no-op)
        return zeros(key, shape, dtype, device)
    bound = number("xavier_uniform", "gain", gain, low=None) * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(key, shape, dtype, device, -bound, bound)


def xavier_normal(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None,
                  gain: float = 1.0) -> Tensor:
    """N(0, std^2) with std = gain sqrt(2 / (fan_in + fan_out)) (Glorot)."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(shape)
    if math.prod(shape) == 0:
        return zeros(key, shape, dtype, device)
    gain = number("xavier_normal", "gain", gain, low=None)
    return normal(key, shape, dtype, device, 0.0, abs(gain) * math.sqrt(2.0 / (fan_in + fan_out)))


def kaiming_uniform(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None, a: float = 0.0,
                    mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """U(-bound, bound) with bound = gain(nonlinearity, a) sqrt(3 / fan) (He)."""
    if math.prod(_shape("kaiming_uniform", shape)) == 0:
        return zeros(key, shape, dtype, device)
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(shape, mode))
    return uniform(key, shape, dtype, device, -math.sqrt(3.0) * std, math.sqrt(3.0) * std)


def kaiming_normal(key: Any, shape: Shape, dtype: Any = D.float32, device: Any = None, a: float = 0.0,
                   mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    """N(0, std^2) with std = gain(nonlinearity, a) / sqrt(fan) (He)."""
    if math.prod(_shape("kaiming_normal", shape)) == 0:
        return zeros(key, shape, dtype, device)
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(shape, mode))
    return normal(key, shape, dtype, device, 0.0, std)


__all__ = [
    "calculate_fan_in_and_fan_out", "calculate_gain", "kaiming_normal", "kaiming_uniform", "normal",
    "ones", "truncated_normal", "uniform", "xavier_normal", "xavier_uniform", "zeros",
]
