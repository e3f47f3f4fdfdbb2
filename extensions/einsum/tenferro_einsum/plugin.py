"""Entry point of tenferro-einsum: the whole-contraction op with its NumPy and torch kernels,
AD, batch and cost rules. Equations it does not cover lower to core primitives and need nothing
registered."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from ._cost import contract_cost
from ._vmap import contract_batch
from .native import contract_jvp, contract_p, contract_transpose, numpy_contract
from .torch_kernels import torch_contract


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_op(contract_p)
    registry.add_kernel("numpy", contract_p, numpy_contract)
    registry.add_kernel("torch", contract_p, torch_contract)
    registry.add_rule("jvp", contract_p, contract_jvp)
    registry.add_rule("transpose", contract_p, contract_transpose)
    registry.add_rule("cost", contract_p, contract_cost)
    registry.add_rule("batch", contract_p, contract_batch)
