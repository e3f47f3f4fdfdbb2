"""Entry point of tenferro-torch: registers the ``torch`` backend (torch is not imported)."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .backend import TorchBackend


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_backend(TorchBackend())
