"""The torch kernels of every core primitive. Importing this package imports torch.

`KERNELS` maps primitive names to kernels; `specialize` picks, once per call signature,
the implementation a kind-dependent kernel would choose on every call.
"""

from __future__ import annotations

from typing import Any

from . import elementwise, reductions, structural

KERNELS: dict[str, Any] = {**elementwise.KERNELS, **structural.KERNELS, **reductions.KERNELS}


def specialize(name: str, in_avals: tuple, out_avals: tuple) -> Any:
    """The kernel for one signature: the by-kind implementation for the first operand's kind."""
    kernel = KERNELS[name]
    table = getattr(kernel, "by_kind", None)
    if table is not None and in_avals:
        return table.get(in_avals[0].dtype.kind, kernel)
    return kernel
