"""linear, conv2d, pooling and flatten in PyTorch's layouts (NCHW inputs, OIHW weights), on
`dot_general`, `conv_general`, `pad` and strided `slice`s (no pooling primitive)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tenferro_core.errors import ShapeError
from tenferro_runtime import array_api as xp
from tenferro_runtime import lax
from tenferro_runtime.tensor import Tensor

from ..checks import HyperparameterError, flag, integer
from ..ops import call, linear_p
from ._util import check_floating, check_same_dtype, check_tensor, normalize_dim, pair


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias for x of shape (..., in) and weight (out, in)."""
    check_floating("linear", x)
    check_same_dtype("linear", x, ("weight", weight), ("bias", bias))
    if weight.ndim != 2 or x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(f"linear: expected input (..., {weight.shape[-1]}) and weight (out, in), got "
                         f"input {list(x.shape)} and weight {list(weight.shape)}")
    if bias is None:
        return lax.dot_general(x, weight, contracting_dims=((x.ndim - 1,), (1,)))
    if bias.shape != (weight.shape[0],):
        raise ShapeError(f"linear: bias must have shape [{weight.shape[0]}], got {list(bias.shape)}")
    return call(linear_p, x, weight, bias, traced=True)


def _unbatched(name: str, x: Tensor) -> tuple[Tensor, bool]:
    """(N, C, H, W) from a 3- or 4-d input, and whether a batch axis was added."""
    check_floating(name, x)
    if x.ndim not in (3, 4):
        raise ShapeError(f"{name}: expected a 4-d (N, C, H, W) or 3-d (C, H, W) input, got shape "
                         f"{list(x.shape)}")
    return (xp.expand_dims(x, axis=0), True) if x.ndim == 3 else (x, False)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-d cross-correlation as `torch.nn.functional.conv2d`: x (N, C, H, W) or (C, H, W),
    weight (O, C/groups, kH, kW), padding an int, a pair, "valid" or "same"."""
    x4, added = _unbatched("conv2d", x)
    check_same_dtype("conv2d", x, ("weight", weight), ("bias", bias))
    if weight.ndim != 4:
        raise ShapeError(f"conv2d: weight must be 4-d (O, C/groups, kH, kW), got {list(weight.shape)}")
    stride = pair("conv2d", "stride", stride, 1)
    dilation = pair("conv2d", "dilation", dilation, 1)
    groups = integer("conv2d", "groups", groups, 1)
    c, o = x4.shape[1], weight.shape[0]
    if c % groups or o % groups or weight.shape[1] * groups != c:
        raise ShapeError(
            f"conv2d: input has {c} channels and weight {list(weight.shape)} with groups={groups}; "
            f"expected channels == weight.shape[1] * groups ({weight.shape[1] * groups}) and "
            f"out_channels divisible by groups")
    pads = conv_padding("conv2d", padding, weight.shape[2:], stride, dilation)
    for ax in range(2):
        span = dilation[ax] * (weight.shape[2 + ax] - 1) + 1
        if x4.shape[2 + ax] + sum(pads[ax]) < span:
            raise ShapeError(
                f"conv2d: the padded input ({x4.shape[2 + ax] + sum(pads[ax])} along spatial axis "
                f"{ax}) is smaller than the dilated kernel ({span}); input {list(x.shape)}")
    y = lax.conv_general(x4, weight, window_strides=stride, padding=pads, lhs_dilation=(1, 1),
                         rhs_dilation=dilation, feature_group_count=groups)
    if bias is not None:
        if bias.shape != (o,):
            raise ShapeError(f"conv2d: bias must have shape [{o}], got {list(bias.shape)}")
        y = y + xp.reshape(bias, (o, 1, 1))
    return y[0] if added else y


def conv_padding(name: str, padding: Any, kernel: tuple[int, ...], stride: tuple[int, int],
                 dilation: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """(low, high) per spatial axis; "same" puts the odd extra element at the end (PyTorch)."""
    if padding == "valid":
        return ((0, 0), (0, 0))
    if padding == "same":
        if stride != (1, 1):
            raise HyperparameterError(f"{name}: padding='same' is not supported for strided convolutions "
                                      f"(stride={stride}), as in PyTorch")
        total = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return tuple((t // 2, t - t // 2) for t in total)
    if isinstance(padding, str):
        raise HyperparameterError(f"{name}: padding must be an int, a pair, 'valid' or 'same', got "
                                  f"{padding!r}")
    p = pair(name, "padding", padding, 0)
    return ((p[0], p[0]), (p[1], p[1]))


def _pool_args(name: str, kernel_size: Any, stride: Any, padding: Any, dilation: Any):
    k = pair(name, "kernel_size", kernel_size, 1)
    s = k if stride is None or (isinstance(stride, (tuple, list)) and not stride) else pair(
        name, "stride", stride, 1)
    p = pair(name, "padding", padding, 0)
    d = pair(name, "dilation", dilation, 1)
    if any(2 * pi > ki for pi, ki in zip(p, k)):
        raise HyperparameterError(f"{name}: padding {p} must be at most half of kernel_size {k}")
    return k, s, p, d


def _windows(name: str, x: Tensor, k, s, p, d, fill: float) -> tuple[Tensor, list, tuple[int, int]]:
    """The padded input, the strided slices (one per kernel offset) and the output size."""
    h, w = x.shape[2:]
    out = tuple((n + 2 * pi - di * (ki - 1) - 1) // si + 1 for n, pi, di, ki, si in zip((h, w), p, d, k, s))
    if min(out) < 1:
        raise ShapeError(f"{name}: the input {list(x.shape)} is smaller than the window (kernel {k}, "
                         f"dilation {d}, padding {p}); output size would be {list(out)}")
    if p != (0, 0):
        cfg = ((0, 0, 0), (0, 0, 0), (p[0], p[0], 0), (p[1], p[1], 0))
        x = lax.pad(x, xp.asarray(fill, dtype=x.dtype, device=x.device), padding_config=cfg)
    n, c = x.shape[:2]
    slices = []
    for i in range(k[0]):
        for j in range(k[1]):
            lo = (0, 0, i * d[0], j * d[1])
            hi = (n, c, lo[2] + (out[0] - 1) * s[0] + 1, lo[3] + (out[1] - 1) * s[1] + 1)
            slices.append(lax.slice(x, start_indices=lo, limit_indices=hi, strides=(1, 1, *s)))
    return x, slices, out


def _blocks(x: Tensor, k: tuple[int, int]) -> Tensor | None:
    """x as (N, C, Ho, kH, Wo, kW) when the windows tile it (stride == kernel, no padding)."""
    n, c, h, w = x.shape
    ho, wo = h // k[0], w // k[1]
    if ho == 0 or wo == 0:
        return None
    if (h, w) != (ho * k[0], wo * k[1]):
        x = lax.slice(x, start_indices=(0, 0, 0, 0), limit_indices=(n, c, ho * k[0], wo * k[1]))
    return xp.reshape(x, (n, c, ho, k[0], wo, k[1]))


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               dilation: Any = 1) -> Tensor:
    """Maximum over each window, padding with -inf (`torch.nn.functional.max_pool2d`; stride
    defaults to kernel_size). At tied maxima the gradient is shared equally."""
    x4, added = _unbatched("max_pool2d", x)
    k, s, p, d = _pool_args("max_pool2d", kernel_size, stride, padding, dilation)
    b = _blocks(x4, k) if s == k and p == (0, 0) and d == (1, 1) else None
    if b is not None:
        y = xp.max(b, axis=(3, 5))
    else:
        _, slices, _ = _windows("max_pool2d", x4, k, s, p, d, -math.inf)
        y = slices[0]
        for t in slices[1:]:
            y = xp.maximum(y, t)
    return y[0] if added else y


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,
               count_include_pad: bool = True) -> Tensor:
    """Mean over each window (`torch.nn.functional.avg_pool2d`): zero padding, counted in the
    divisor unless ``count_include_pad=False``."""
    x4, added = _unbatched("avg_pool2d", x)
    k, s, p, d = _pool_args("avg_pool2d", kernel_size, stride, padding, 1)
    count_include_pad = flag("avg_pool2d", "count_include_pad", count_include_pad)
    b = _blocks(x4, k) if s == k and p == (0, 0) else None
    if b is not None:
        y = xp.mean(b, axis=(3, 5))
    else:
        _, slices, out = _windows("avg_pool2d", x4, k, s, p, d, 0.0)
        y = slices[0]
        for t in slices[1:]:
            y = y + t
        if count_include_pad or p == (0, 0):
            y = y * (1.0 / (k[0] * k[1]))
        else:  # the number of real (unpadded) elements under each window: a host constant
            counts = [np.minimum(np.arange(o) * si - pi + ki, n) - np.maximum(np.arange(o) * si - pi, 0)
                      for o, si, pi, ki, n in zip(out, s, p, k, x4.shape[2:])]
            inv = 1.0 / np.outer(counts[0], counts[1])
            y = y * xp.astype(xp.asarray(inv, device=x4.device), x4.dtype)
    return y[0] if added else y


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge axes start_dim..end_dim into one (`torch.flatten`)."""
    check_tensor("flatten", x)
    if x.ndim == 0:
        return xp.reshape(x, (1,))
    a = normalize_dim("flatten", start_dim, x.ndim)
    b = normalize_dim("flatten", end_dim, x.ndim)
    if a > b:
        raise HyperparameterError(f"flatten: start_dim ({start_dim}) must not come after end_dim "
                                  f"({end_dim}) for a {x.ndim}-d input")
    shape = x.shape[:a] + (math.prod(x.shape[a:b + 1]),) + x.shape[b + 1:]
    return x if shape == x.shape else xp.reshape(x, shape)


__all__ = ["avg_pool2d", "conv2d", "flatten", "linear", "max_pool2d"]
