"""tenferro-softplus: softplus(x) = log(1 + exp(x)), computed without overflow."""

from __future__ import annotations

from typing import Any

from tenferro_core.errors import DTypeError
from tenferro_core.extension import define_op
from tenferro_runtime import lax
from tenferro_runtime.array_api import asarray


def _shape_rule(x):
    if x.dtype.kind != "f":
        raise DTypeError(f"softplus expects a real floating tensor, got {x.dtype}; convert with astype")
    return x.shape, x.dtype


def _decomposition(x):
    """max(x, 0) + log1p(exp(-|x|)): core primitives only, so every backend can run it."""
    zero = lax.broadcast_in_dim(
        lax.full(shape=(), fill_value=0, dtype=x.dtype, device=x.device),
        shape=x.shape, broadcast_dimensions=(),
    )
    return lax.add(lax.maximum(x, zero), lax.log1p(lax.exp(lax.neg(lax.abs(x)))))


softplus_p = define_op(
    "tenferro_softplus.softplus.v1", _shape_rule, decomposition=_decomposition,
    doc="Elementwise softplus, stable for large |x|.",
)


def softplus_jvp(primals, tangents):
    """d softplus(x) = logistic(x) dx; written with primitives, so it differentiates again."""
    (x,), (t,) = primals, tangents
    return softplus_p.bind(x), lax.mul(t, lax.logistic(x))


def softplus_batch(args, dims):
    """Under vmap: elementwise, so the batched operand gives a result batched on the same axis."""
    (x,), (d,) = args, dims
    return softplus_p.bind(x), d


def softplus(x: Any) -> Any:
    """softplus of a tensor (or anything `asarray` accepts)."""
    return softplus_p.bind(asarray(x))


__all__ = ["softplus", "softplus_batch", "softplus_jvp", "softplus_p"]
