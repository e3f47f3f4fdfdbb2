"""Entry point of tenferro-mini (group ``tenferro``, name ``mini``): registers the backend."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from .backend import MiniBackend


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_backend(MiniBackend())
