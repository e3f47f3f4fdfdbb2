"""BatchNorm1d/2d and LayerNorm, with PyTorch's parameter and buffer names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenferro_core import dtypes as D
from tenferro_core.errors import ArgumentError
from tenferro_runtime import array_api as xp
from tenferro_runtime.tensor import Tensor

from .. import functional as F
from ..checks import flag, integer, number
from ..functional._norm import momentum_value
from ..module import Module
from ._util import check, float_dtype, named_errors, not_negative_int


class _BatchNorm(Module):
    """Normalizes each channel (axis 1) by batch statistics in training and by the running
    statistics in eval. Training rebinds `running_mean` / `running_var` to their updated
    values (momentum towards the batch mean and unbiased variance, as PyTorch), so a
    traced or compiled train step that returns the model returns the new statistics."""

    # keys of PyTorch's state dict that this module does not keep: its int64 batch counter,
    # only used by momentum=None (not supported); `Module.load_state_dict` skips them
    _pytorch_only_state = ("num_batches_tracked",)
    _ranks: tuple[int, ...] = ()
    _layout: str = ""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, *, key: Tensor | None = None, dtype: Any = D.float32,
                 device: Any = None):
        super().__init__()
        name = type(self).__name__
        self.num_features = not_negative_int(name, "num_features", num_features)
        self.momentum = momentum_value(name, momentum)
        self.eps = number(name, "eps", eps)
        self.affine = affine = flag(name, "affine", affine)
        track_running_stats = flag(name, "track_running_stats", track_running_stats)
        self.track_running_stats = track_running_stats
        float_dtype(name, dtype)
        n = (num_features,)
        self.weight = xp.ones(n, dtype=dtype, device=device) if affine else None
        self.bias = xp.zeros(n, dtype=dtype, device=device) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", xp.zeros(n, dtype=dtype, device=device))
            self.register_buffer("running_var", xp.ones(n, dtype=dtype, device=device))
        else:
            self.running_mean = self.running_var = None

    def forward(self, x: Tensor) -> Tensor:
        c = self.num_features
        like = self.weight if self.weight is not None else self.running_mean
        check(self, x, self._layout.format(c=c), ndim=self._ranks, sizes={1: c}, like=like)
        training = self.training or self.running_mean is None
        with named_errors(self):
            y, rm, rv = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                     training, self.momentum, self.eps)
        if training and self.running_mean is not None:
            self.running_mean, self.running_var = rm, rv
        return y

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization of (N, C) or (N, C, L) inputs."""

    _ranks = (2, 3)
    _layout = "(N, {c}) or (N, {c}, L)"


class BatchNorm2d(_BatchNorm):
    """Batch normalization of (N, C, H, W) inputs."""

    _ranks = (4,)
    _layout = "(N, {c}, H, W)"


class LayerNorm(Module):
    """Normalizes over the trailing `normalized_shape` axes; `weight` ones and `bias` zeros."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, *, key: Tensor | None = None,
                 dtype: Any = D.float32, device: Any = None):
        super().__init__()
        seq = isinstance(normalized_shape, Sequence) and not isinstance(normalized_shape, str)
        shape = tuple(normalized_shape) if seq else (normalized_shape,)
        if isinstance(normalized_shape, str) or not shape:
            raise ArgumentError(f"LayerNorm: normalized_shape must be an int or a non-empty sequence of "
                                f"ints >= 0, got {normalized_shape!r}")
        shape = tuple(integer("LayerNorm", "normalized_shape (each size)", n, 0) for n in shape)
        float_dtype("LayerNorm", dtype)
        self.normalized_shape, self.eps = shape, number("LayerNorm", "eps", eps)
        self.elementwise_affine = flag("LayerNorm", "elementwise_affine", elementwise_affine)
        bias = flag("LayerNorm", "bias", bias)
        affine = self.elementwise_affine
        self.weight = xp.ones(shape, dtype=dtype, device=device) if affine else None
        self.bias = xp.zeros(shape, dtype=dtype, device=device) if affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        k = len(self.normalized_shape)
        like = self.weight if self.weight is not None else self.bias
        check(self, x, f"(*, {', '.join(map(str, self.normalized_shape))})",
              sizes={i - k: n for i, n in enumerate(self.normalized_shape)}, like=like)
        with named_errors(self):
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm"]
