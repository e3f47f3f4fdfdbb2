"""The kernel table of the torch backend, built without importing torch.

Each entry is a stub that imports the real kernel (and torch) on its first call. The
runtime asks `TorchBackend.specialize` once per call signature, which hands back the real
kernel, so after the first call of a signature no stub stands in between.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tenferro_core import catalog


def real_kernel(name: str) -> Callable[..., Any]:
    """The torch kernel of primitive `name` (imports torch)."""
    from .ops import KERNELS

    return KERNELS[name]


def _stub(name: str) -> Callable[..., Any]:
    def kernel(*args: Any, **params: Any) -> Any:
        return real_kernel(name)(*args, **params)

    kernel.__name__ = kernel.__qualname__ = f"torch_{name}"
    kernel.torch_primitive = name
    return kernel


def _fused(*bufs: Any, graph: Any) -> tuple:
    from .fusion import fused_kernel

    return fused_kernel(*bufs, graph=graph)


_fused.torch_primitive = "fused"

KERNELS: dict[str, Callable[..., Any]] = {p.name: _stub(p.name) for p in catalog.PRIMITIVES}
KERNELS["fused"] = _fused  # elementwise groups of compiled graphs (fusion.py)
