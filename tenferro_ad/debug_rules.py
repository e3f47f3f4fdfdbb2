"""Rules of `tenferro_runtime.debug.print`'s primitive: cost and batching (it needs no AD rule:
it is not differentiable, so a JVP prints the primal values and carries no tangent)."""

from __future__ import annotations

from typing import Any

from tenferro_core.catalog.cost import Cost, io_bytes
from tenferro_runtime.debug import debug_print_p


def _batch(args: tuple, dims: tuple, **params: Any) -> tuple:
    """Under vmap the whole batch prints at once (batch axis first), as in JAX."""
    from .batching import batch_first

    debug_print_p.bind(*batch_first(args, dims)[0], **params)
    return (), ()


def _cost(in_avals: Any, out_avals: Any, **params: Any) -> Cost:
    """No FLOPs; the operands are read (copied to the host)."""
    return Cost(0, io_bytes(in_avals, out_avals))


def register(registry: Any) -> None:
    registry.add_op(debug_print_p)
    registry.add_rule("batch", debug_print_p, _batch)
    registry.add_rule("cost", debug_print_p, _cost)


__all__ = ["register"]
