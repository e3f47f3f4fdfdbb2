"""mini's buffer type.

Buffers are `MiniBuffer`s, not NumPy arrays: the wrapper stands for the memory a real
third-party backend would own (a device allocation, a handle into a C library). The
array inside is read-only, so buffers are immutable and kernels may return views.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class MiniBuffer:
    """An immutable array in mini's memory: a read-only NumPy array behind a wrapper."""

    __slots__ = ("array",)

    def __init__(self, array: Any):
        view = np.asarray(array).view()  # a view, so making it read-only never touches the caller's array
        view.flags.writeable = False
        self.array = view

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def nbytes(self) -> int:
        return self.array.nbytes

    def __repr__(self) -> str:
        return f"MiniBuffer({self.array.dtype}{list(self.array.shape)})"
