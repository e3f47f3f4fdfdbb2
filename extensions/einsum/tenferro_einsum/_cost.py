"""Cost rule of the contract op: opt_einsum's FLOP count along the op's own path."""

from __future__ import annotations

from typing import Any

from tenferro_core.catalog.cost import Cost, io_bytes


def contract_cost(in_avals: tuple, out_avals: tuple, *, spec: str, path: tuple) -> Cost:
    """FLOPs as opt_einsum counts them for `path` (2 M N K for a matmul step); bytes read and
    written: the operands, the result, and each intermediate written once and read once."""
    import opt_einsum

    optimize: Any = [tuple(s) for s in path] if path else "auto"
    _, info = opt_einsum.contract_path(spec, *(a.shape for a in in_avals), shapes=True,
                                       optimize=optimize)
    between = 2 * sum(info.size_list[:-1]) * out_avals[0].dtype.itemsize
    return Cost(int(info.opt_cost), io_bytes(in_avals, out_avals) + int(between))


__all__ = ["contract_cost"]
