"""Abstract values: what is known of an array without its data."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .dtypes import DType


class Aval(NamedTuple):
    """Shape, dtype and device of an array (device is None inside shape rules)."""

    shape: tuple[int, ...]
    dtype: DType
    device: Any = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def str_short(self) -> str:
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        dev = f" on {self.device}" if self.device is not None else ""
        return f"Aval({self.str_short()}{dev})"
