"""What every torch kernel module shares: the dtype tables and per-kind dispatch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tenferro_core import dtypes as D

TO_TORCH: dict[D.DType, torch.dtype] = {
    D.bool_: torch.bool, D.int8: torch.int8, D.int16: torch.int16, D.int32: torch.int32,
    D.int64: torch.int64, D.uint8: torch.uint8, D.uint16: torch.uint16, D.uint32: torch.uint32,
    D.uint64: torch.uint64, D.float16: torch.float16, D.bfloat16: torch.bfloat16,
    D.float32: torch.float32, D.float64: torch.float64, D.complex64: torch.complex64,
    D.complex128: torch.complex128,
}
FROM_TORCH: dict[torch.dtype, D.DType] = {v: k for k, v in TO_TORCH.items()}
TORCH_BY_NAME: dict[str, torch.dtype] = {k.name: v for k, v in TO_TORCH.items()}
"""`TO_TORCH` by dtype name, for kernels given a dtype param: dynamo (the Inductor executor)
cannot trace a DType's identity hash (a C slot) and broke the graph at each lookup; a name's
hash it can, and it costs what the identity hash costs."""
KIND: dict[torch.dtype, str] = {v: k.kind for k, v in TO_TORCH.items()}


def storage_address(buf: Any) -> int:
    """The address of the memory `buf`'s storage holds, -1 for an empty tensor: tensors that
    share memory share it (views, reshapes), whatever their offsets."""
    return buf.untyped_storage().data_ptr() if buf.numel() else -1


def on_cpu(aval: Any) -> bool:
    """Whether `aval` is on a torch CPU device (or on none: a bare shape rule's)."""
    device = getattr(aval, "device", None)
    return device is None or getattr(device, "id", None) == "cpu"


def same(x: Any, *args: Any, **params: Any) -> Any:
    """The identity kernel (buffers are immutable, so returning the operand is safe)."""
    return x


def by_kind(**fns: Callable[..., Any]) -> Callable[..., Any]:
    """A kernel choosing its implementation by the first operand's kind.

    Keyword names are groups of kinds (``iu=..., f=...``). The table is kept on the kernel
    as ``by_kind`` so that `specialize` can pick the implementation once per signature.
    """
    table = {k: fn for kinds, fn in fns.items() for k in kinds}

    def kernel(x, *args, **params):
        return table[KIND[x.dtype]](x, *args, **params)

    kernel.by_kind = table
    return kernel
