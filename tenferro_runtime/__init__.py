"""tenferro_runtime: Runtime, Tensor, dispatch and the Array API namespace."""

from __future__ import annotations

from . import (
    array_api,  # noqa: E402,I001  (after Tensor: the namespace builds on it)
    lax,
)
from .dispatch import bind, eager
from .runtime import Device, Runtime, default_device, default_runtime, reset_default_runtime, use_runtime
from .tensor import Tensor

__version__ = "0.1.0"
__all__ = [
    "Device", "Runtime", "Tensor", "array_api", "bind", "default_device", "default_runtime",
    "eager", "lax", "reset_default_runtime", "use_runtime",
]
