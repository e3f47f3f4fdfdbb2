"""layer_norm and batch_norm. batch_norm is functional: it returns the updated running
statistics instead of writing them in place, so a traced or compiled step carries them out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tenferro_ad import stop_gradient
from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from ..checks import flag, number
from ._util import check_floating, check_same_dtype


def _eps(name: str, eps: Any) -> float:
    return number(name, "eps", eps)


def momentum_value(name: str, momentum: Any) -> float:
    """BatchNorm's momentum: a number in [0, 1] (None, PyTorch's cumulative average, is not
    supported)."""
    if momentum is None:
        raise ArgumentError(f"{name}: momentum must be a number in [0, 1] (the cumulative average of "
                            f"momentum=None is not supported), got None")
    return number(name, "momentum", momentum, low=0.0, high=1.0)


def layer_norm(x: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` axes (biased variance), then scale by
    `weight` and shift by `bias` (`torch.nn.functional.layer_norm`)."""
    check_floating("layer_norm", x)
    check_same_dtype("layer_norm", x, ("weight", weight), ("bias", bias))
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(shape)
    if k == 0 or x.ndim < k or tuple(x.shape[x.ndim - k:]) != shape:
        raise ShapeError(f"layer_norm: expected input (*, {', '.join(map(str, shape))}) for "
                         f"normalized_shape {list(shape)}, got {list(x.shape)}")
    for what, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise ShapeError(f"layer_norm: {what} must have shape {list(shape)}, got {list(t.shape)}")
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = xp.mean(x, axis=axes, keepdims=True)
    d = x - mean
    var = xp.mean(d * d, axis=axes, keepdims=True)
    y = d * (1.0 / xp.sqrt(var + _eps("layer_norm", eps)))
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Batch normalization over every axis but 1 of x (N, C, ...). Returns (y, new running
    mean, new running var).

    Training normalizes with the batch mean and biased variance and moves the running
    statistics towards the batch mean and the UNBIASED variance by `momentum` (PyTorch);
    otherwise it normalizes with the running statistics, returned unchanged.
    """
    check_floating("batch_norm", x)
    check_same_dtype("batch_norm", x, ("weight", weight), ("bias", bias),
                     ("running_mean", running_mean), ("running_var", running_var))
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expected an input (N, C, *) of rank >= 2, got {list(x.shape)}")
    c = x.shape[1]
    for what, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        if t is not None and t.shape != (c,):
            raise ShapeError(f"batch_norm: {what} must have shape [{c}] (the input's channels), got "
                             f"{list(t.shape)}")
    if (running_mean is None) != (running_var is None):
        raise ArgumentError("batch_norm: give both running_mean and running_var, or neither")
    momentum = momentum_value("batch_norm", momentum)
    training = flag("batch_norm", "training", training)
    eps = _eps("batch_norm", eps)
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (c,) + (1,) * (x.ndim - 2)
    n = math.prod(x.shape[a] for a in axes)
    if training or running_mean is None:
        if n == 1:
            raise ShapeError(f"batch_norm: expected more than 1 value per channel when training, got "
                             f"input shape {list(x.shape)}")
        if n == 0:
            return x, running_mean, running_var
        mean = xp.mean(x, axis=axes, keepdims=True)
        d = x - mean
        var = xp.mean(d * d, axis=axes, keepdims=True)
        y = d * (1.0 / xp.sqrt(var + eps))
        if training and running_mean is not None:
            m = float(momentum)
            bm = stop_gradient(xp.reshape(mean, (c,)))
            bv = stop_gradient(xp.reshape(var, (c,))) * (n / (n - 1))
            running_mean = running_mean * (1.0 - m) + bm * m
            running_var = running_var * (1.0 - m) + bv * m
    else:
        y = (x - xp.reshape(running_mean, bshape)) * xp.reshape(1.0 / xp.sqrt(running_var + eps), bshape)
    if weight is not None:
        y = y * xp.reshape(weight, bshape)
    if bias is not None:
        y = y + xp.reshape(bias, bshape)
    return y, running_mean, running_var


__all__ = ["batch_norm", "layer_norm"]
