"""Layers: `Module` subclasses with PyTorch's constructor arguments, parameter names and default
initializations, so a PyTorch `state_dict` loads by name. Parameterized constructors take
``*, key, dtype=float32, device=None``."""

from __future__ import annotations

from .activation import GELU, LogSoftmax, ReLU, Sigmoid, SiLU, Softmax, Tanh
from .attention import MultiheadAttention
from .container import Dropout, Flatten, Sequential
from .conv import AvgPool2d, Conv2d, MaxPool2d
from .linear import Embedding, Linear
from .norm import BatchNorm1d, BatchNorm2d, LayerNorm

__all__ = [
    "AvgPool2d", "BatchNorm1d", "BatchNorm2d", "Conv2d", "Dropout", "Embedding", "Flatten", "GELU",
    "LayerNorm", "Linear", "LogSoftmax", "MaxPool2d", "MultiheadAttention", "ReLU", "Sequential",
    "SiLU", "Sigmoid", "Softmax", "Tanh",
]
