"""Entry point: registers the op and its NumPy kernel."""

from __future__ import annotations

from tenferro_core.plugins import hookimpl

from . import softplus_jvp, softplus_p


def _numpy_softplus(x):
    import numpy as np

    return np.logaddexp(np.zeros((), x.dtype), x)


@hookimpl
def tenferro_register(registry) -> None:
    registry.add_op(softplus_p)
    registry.add_kernel("numpy", softplus_p, _numpy_softplus)
    registry.add_rule("jvp", softplus_p, softplus_jvp)
