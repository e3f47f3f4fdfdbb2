"""Entry point of tenferro-numpy: registers the ``numpy`` backend."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .backend import NumpyBackend
from .fusion import fused_kernel


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_backend(NumpyBackend())
    registry.add_kernel("numpy", "fused", fused_kernel)
