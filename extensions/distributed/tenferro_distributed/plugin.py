"""Entry point of tenferro-distributed: registers the collective primitives, their NumPy and
torch kernels and their AD, batch and cost rules (torch is imported only when a collective runs)."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    from tenferro_distributed.ops import register

    register(registry)
