"""Entry point: registers the op, its NumPy kernel, its JVP, batch and cost rules."""

from __future__ import annotations

from tenferro_core.catalog.cost import TRANSCENDENTAL_FLOPS, elementwise_rule
from tenferro_core.plugins import hookimpl

from . import softplus_batch, softplus_jvp, softplus_p


def _numpy_softplus(x):
    import numpy as np

    return np.logaddexp(np.zeros((), x.dtype), x)


# max(x, 0) + log1p(exp(-|x|)): four cheap operations and two transcendental ones per element
softplus_cost = elementwise_rule(4 + 2 * TRANSCENDENTAL_FLOPS)


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_op(softplus_p)
    registry.add_kernel("numpy", softplus_p, _numpy_softplus)
    registry.add_rule("jvp", softplus_p, softplus_jvp)
    registry.add_rule("batch", softplus_p, softplus_batch)
    registry.add_rule("cost", softplus_p, softplus_cost)
