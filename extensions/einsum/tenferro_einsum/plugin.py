"""Entry point of tenferro-einsum. einsum lowers to core primitives, so it needs no
kernels or rules of its own; the plugin is discovered and listed like any other."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    del registry  # nothing to register: the plan cache is created in the Runtime on first use
