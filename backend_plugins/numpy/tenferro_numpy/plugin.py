"""Entry point of tenferro-numpy: registers the ``numpy`` backend."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .backend import NumpyBackend


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_backend(NumpyBackend())
