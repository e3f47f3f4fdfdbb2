"""The torch kernels of every core primitive. Importing this package imports torch.

`KERNELS` maps primitive names to the kernels for the dtypes torch computes on natively;
`specialize` (the runtime's entry point, once per call signature) picks the implementation
a kind-dependent kernel would choose on every call, and for signatures with a uint16,
uint32 or uint64 operand or result the emulating kernel of `unsigned` (torch stores those
dtypes but has few kernels for them).
"""

from __future__ import annotations

from typing import Any

from . import elementwise, reductions, structural, unsigned

KERNELS: dict[str, Any] = {**elementwise.KERNELS, **structural.KERNELS, **reductions.KERNELS}


def specialize(name: str, in_avals: tuple, out_avals: tuple, params: dict | None = None) -> Any:
    """The kernel for one signature: the unsigned emulation where an operand or result is
    uint16/32/64, else the by-kind implementation for the first operand's kind; a
    dot_general's index work done once for its shapes (`reductions.dot_kernel`)."""
    if name in unsigned.KERNELS and (unsigned.involved(in_avals) or unsigned.involved(out_avals)):
        return unsigned.KERNELS[name]
    if name == "select":
        return elementwise.select_kernel(in_avals)
    mask = elementwise.mask_kernel(name, in_avals, out_avals)
    if mask is not None:
        return mask
    if name == "dot_general" and params is not None and len(in_avals) == 2:
        return reductions.dot_kernel(in_avals, params)
    kernel = KERNELS[name]
    table = getattr(kernel, "by_kind", None)
    if table is not None and in_avals:
        return table.get(in_avals[0].dtype.kind, kernel)
    return kernel
