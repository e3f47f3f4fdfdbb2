"""tenferro-mini: a minimal third-party tenferro backend (see docs/backends.md).

One device, ``mini:cpu``; buffers are `MiniBuffer` objects (an immutable NumPy array
behind a wrapper); five dtypes; kernels for 33 of the 89 core primitives, so the
others are a MissingKernelError; energy is a cost-model estimate.
"""

from __future__ import annotations

from .backend import MiniBackend
from .buffer import MiniBuffer
from .kernels import KERNEL_NAMES

__version__ = "0.1.0"
__all__ = ["KERNEL_NAMES", "MiniBackend", "MiniBuffer"]
