"""Entry point of tenferro-linalg: registers the ops, their NumPy/SciPy kernels (numpy
backend) and torch.linalg kernels (torch backend, torch imported on first use), their AD,
batch and cost rules and the ``array_api.linalg`` namespace."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from . import _cost, _decomp, _products, _solve, _torch_kernels
from ._batching import batch_rule

MODULES = (_decomp, _solve, _products)


@hookimpl
def tenferro_register(registry) -> None:
    import tenferro_linalg

    for mod in MODULES:
        for op in mod.OPS:
            registry.add_op(op)
        for op, fn in mod.KERNELS.items():
            registry.add_kernel("numpy", op, fn)
        for kind, op, fn in mod.RULES:
            registry.add_rule(kind, op, fn)
        for op in mod.OPS:
            registry.add_rule("batch", op, batch_rule(op))
    for op, fn in _torch_kernels.KERNELS.items():
        registry.add_kernel("torch", op, fn)
    for op, fn in _cost.COST_RULES.items():
        registry.add_rule("cost", op, fn)
    registry.add_namespace("linalg", tenferro_linalg)
