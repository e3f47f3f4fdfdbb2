"""Entry point of tenferro-fft: registers the ops, their kernels for the numpy backend
(scipy.fft) and the torch backend (torch.fft), both imported on first use, their AD, batch and
cost rules and the ``array_api.fft`` namespace."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl


@hookimpl
def tenferro_register(registry) -> None:
    import tenferro_fft
    from tenferro_ad.rules.batching import axes_rule

    from . import _cost, _kernels, _ops, _rules, _torch_kernels

    for op in _ops.OPS:
        registry.add_op(op)
    for op, fn in _kernels.KERNELS.items():
        registry.add_kernel("numpy", op, fn)
    for op, fn in _torch_kernels.KERNELS.items():
        registry.add_kernel("torch", op, fn)
    for kind, op, fn in _rules.RULES:
        registry.add_rule(kind, op, fn)
    for op, fn in _cost.COST_RULES.items():
        registry.add_rule("cost", op, fn)
    for op in _ops.OPS:  # one operand, transformed over `axes`: the batch axis goes first
        registry.add_rule("batch", op, axes_rule(op, "axes"))
    registry.add_namespace("fft", tenferro_fft)
