"""Entry point of tenferro-distributed: registers the collective primitives, their NumPy and
torch kernels and their AD, batch and cost rules, and the async start/wait primitives with the
`distributed_overlap` compiler pass (overlap.py). torch is imported only when a collective runs."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    from tenferro_distributed import ops, overlap

    ops.register(registry)
    overlap.register(registry)
