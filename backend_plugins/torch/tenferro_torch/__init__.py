"""tenferro-torch: the PyTorch backend (devices torch:cpu and torch:cuda:N).

Importing this package (or discovering its plugin) does not import torch; the first
transfer or kernel call does.
"""

from __future__ import annotations

from .backend import SUPPORTED, TorchBackend

__version__ = "0.1.0"
__all__ = ["SUPPORTED", "TorchBackend"]
