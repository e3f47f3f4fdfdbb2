"""Entry point of tenferro-nn. Its layers, losses and optimizers are compositions of core
primitives (traced, differentiated and compiled like user code); four of those compositions
(linear, relu, log_softmax, the class-index negative log-likelihood) and their derivatives
are also ops with torch kernels, which torch devices run in one call each (`tenferro_nn.ops`)."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    import tenferro_nn  # noqa: F401  (importing it registers the module classes as pytrees)

    from . import _torch_kernels, ops

    for op in ops.OPS:
        registry.add_op(op)
    for kind, op, fn in ops.RULES:
        registry.add_rule(kind, op, fn)
    for op, fn in _torch_kernels.KERNELS.items():
        registry.add_kernel("torch", op, fn)
