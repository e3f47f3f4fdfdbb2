"""tenferro-numpy: the CPU reference backend (NumPy, SciPy)."""

from __future__ import annotations

from .backend import NumpyBackend

__version__ = "0.1.0"
__all__ = ["NumpyBackend"]
