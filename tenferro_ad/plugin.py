"""Entry point of tenferro_ad: registers the AD rules of the core catalog."""

from __future__ import annotations

from tenferro_core.catalog.cost import ZERO, Cost, io_bytes
from tenferro_core.plugins import hookimpl

from . import checkpoint_rules, control_flow_batching, control_flow_rules, debug_rules
from .call_rules import call_batch, call_jvp, call_transpose, fused_batch, fused_jvp
from .custom import _lin_batch, _lin_transpose, custom_call_jvp, custom_call_p, custom_vjp_lin_p
from .custom_batching import batch_custom_call
from .rules import batching, elementwise, structural
from .stop_gradient import _jvp as _stop_gradient_jvp
from .stop_gradient import stop_gradient_p, strip_stop_gradient


@hookimpl
def tenferro_register(registry) -> None:
    for table in (elementwise, structural):
        for name, fn in table.JVP.items():
            registry.add_rule("jvp", name, fn)
        for name, fn in table.TRANSPOSE.items():
            registry.add_rule("transpose", name, fn)
    for name, fn in batching.BATCH.items():
        registry.add_rule("batch", name, fn)
    registry.add_op(stop_gradient_p)
    registry.add_rule("batch", stop_gradient_p, batching.elementwise(stop_gradient_p))
    registry.add_rule("jvp", stop_gradient_p, _stop_gradient_jvp)
    registry.add_rule("cost", stop_gradient_p, lambda i, o, **p: ZERO)  # the same buffer
    registry.add_pass("stop_gradient", strip_stop_gradient, position=150)  # after inline
    registry.add_op(custom_vjp_lin_p)
    registry.add_rule("transpose", custom_vjp_lin_p, _lin_transpose)
    registry.add_rule("cost", custom_vjp_lin_p, _lin_cost)
    registry.add_rule("batch", custom_vjp_lin_p, _lin_batch)
    registry.add_op(custom_call_p)
    registry.add_rule("jvp", custom_call_p, custom_call_jvp)
    registry.add_rule("cost", custom_call_p, lambda i, o, **p: ZERO)  # its own ops are costed
    registry.add_rule("batch", custom_call_p, batch_custom_call)
    registry.add_rule("jvp", "call", call_jvp)  # compiled functions (tenferro_runtime.compile)
    registry.add_rule("transpose", "call", call_transpose)
    registry.add_rule("jvp", "fused", fused_jvp)
    checkpoint_rules.register(registry)
    control_flow_rules.register(registry)
    control_flow_batching.register(registry)
    debug_rules.register(registry)
    registry.add_rule("batch", "call", call_batch)
    registry.add_rule("batch", "fused", fused_batch)


def _lin_cost(in_avals, out_avals, **params) -> Cost:
    """A lower bound: the user's backward function runs opaquely (its own ops are costed
    where they run); count the tangents it reads and writes, no FLOPs."""
    return Cost(0, io_bytes(in_avals, out_avals))
