"""Conv2d and 2-d pooling, in PyTorch's NCHW layout with its parameter names and defaults."""

from __future__ import annotations

import math
from typing import Any

from tenferro_core import dtypes as D
from tenferro_runtime.tensor import Tensor

from .. import functional as F
from .. import init
from ..checks import HyperparameterError, choice, flag
from ..functional._conv import conv_padding
from ..functional._util import pair
from ..module import Module
from ._util import check, check_floating_input, float_dtype, named_errors, positive_int, split_key


class Conv2d(Module):
    """2-d cross-correlation: `weight` (out_channels, in_channels/groups, kH, kW), `bias`
    (out_channels,), initialized like PyTorch (U(+-1/sqrt(fan_in)) for both)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] | str = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", *, key: Tensor, dtype: Any = D.float32, device: Any = None):
        super().__init__()
        self.in_channels = positive_int("Conv2d", "in_channels", in_channels)
        self.out_channels = positive_int("Conv2d", "out_channels", out_channels)
        self.groups = positive_int("Conv2d", "groups", groups)
        if in_channels % groups or out_channels % groups:
            raise HyperparameterError(f"Conv2d: in_channels ({in_channels}) and out_channels "
                                      f"({out_channels}) must be divisible by groups ({groups})")
        choice("Conv2d", "padding_mode (only 'zeros' is supported)", padding_mode, ("zeros",))
        bias = flag("Conv2d", "bias", bias)
        self.kernel_size = pair("Conv2d", "kernel_size", kernel_size, 1)
        self.stride = pair("Conv2d", "stride", stride, 1)
        self.dilation = pair("Conv2d", "dilation", dilation, 1)
        self.padding = padding if isinstance(padding, str) else pair("Conv2d", "padding", padding, 0)
        conv_padding("Conv2d", self.padding, self.kernel_size, self.stride, self.dilation)  # check it
        float_dtype("Conv2d", dtype)
        kw, kb = split_key("Conv2d", key, 2)
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = init.kaiming_uniform(kw, shape, dtype, device, a=math.sqrt(5))
        bound = 1 / math.sqrt(math.prod(shape[1:]))
        self.bias = init.uniform(kb, (out_channels,), dtype, device, -bound, bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        check(self, x, f"(N, {self.in_channels}, H, W) or ({self.in_channels}, H, W)", ndim=(3, 4),
              sizes={-3: self.in_channels}, like=self.weight)
        with named_errors(self):
            return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
                f"groups={self.groups}, bias={self.bias is not None}")


class _Pool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0):
        super().__init__()
        name = type(self).__name__
        self.kernel_size = pair(name, "kernel_size", kernel_size, 1)
        self.stride = self.kernel_size if stride is None else pair(name, "stride", stride, 1)
        self.padding = pair(name, "padding", padding, 0)

    def _check(self, x: Any) -> None:
        check_floating_input(self, x, "(N, C, H, W) or (C, H, W)")
        check(self, x, "(N, C, H, W) or (C, H, W)", ndim=(3, 4))


class MaxPool2d(_Pool2d):
    """Maximum over windows (padding counts as -inf); no parameters."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1):
        super().__init__(kernel_size, stride, padding)
        self.dilation = pair("MaxPool2d", "dilation", dilation, 1)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        with named_errors(self):
            return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}")


class AvgPool2d(_Pool2d):
    """Mean over windows (zero padding, counted unless count_include_pad=False); no parameters."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 count_include_pad: bool = True):
        super().__init__(kernel_size, stride, padding)
        self.count_include_pad = flag("AvgPool2d", "count_include_pad", count_include_pad)

    def forward(self, x: Tensor) -> Tensor:
        self._check(x)
        with named_errors(self):
            return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


__all__ = ["AvgPool2d", "Conv2d", "MaxPool2d"]
