"""Stateless neural-network functions in PyTorch's conventions (`torch.nn.functional`), each a
composition of core primitives, so it traces, differentiates and compiles like user code.

Deviations from PyTorch: `batch_norm` returns ``(y, running_mean, running_var)`` instead of
updating the statistics in place; random functions (`dropout`, attention dropout) take an
explicit key.
"""

from __future__ import annotations

from ._activation import dropout, erf, gelu, log_softmax, relu, sigmoid, silu, softmax, tanh
from ._attention import embedding, scaled_dot_product_attention
from ._conv import avg_pool2d, conv2d, flatten, linear, max_pool2d
from ._norm import batch_norm, layer_norm

__all__ = [
    "avg_pool2d", "batch_norm", "conv2d", "dropout", "embedding", "erf", "flatten", "gelu",
    "layer_norm", "linear", "log_softmax", "max_pool2d", "relu", "scaled_dot_product_attention",
    "sigmoid", "silu", "softmax", "tanh",
]
