"""`clip_grad_norm`: scale a gradient pytree so its total norm is at most `max_norm`
(torch.nn.utils.clip_grad_norm_), with tensor ops only, so it works under `compile`."""

from __future__ import annotations

import math
from typing import Any

from tenferro_core.errors import ArgumentError, DTypeError
from tenferro_runtime import array_api as xp
from tenferro_runtime.pytree import tree_flatten, tree_unflatten
from tenferro_runtime.tensor import Tensor

from ..checks import number


def check_norm_args(fn: str, max_norm: Any, norm_type: Any) -> tuple[float, float]:
    """(max_norm, norm_type) as floats, or an error naming the bad one: max_norm a finite
    number >= 0, norm_type a number > 0 (inf allowed)."""
    return (number(fn, "max_norm", max_norm),
            number(fn, "norm_type", norm_type, low_open=True, finite=False))


def _norm(x: Tensor, p: float) -> Tensor:
    if x.dtype.kind == "c":
        x = xp.abs(x)
    if math.isinf(p):
        return xp.max(xp.abs(x)) if x.size else xp.zeros((), dtype=x.dtype, device=x.device)
    if p == 2.0:
        return xp.sqrt(xp.sum(x * x))
    if p == 1.0:
        return xp.sum(xp.abs(x))
    return xp.sum(xp.abs(x) ** p) ** (1.0 / p)


def global_norm(tensors: list[Tensor], norm_type: float = 2.0) -> Tensor:
    """The norm of the per-tensor norms (torch's total norm), in the tensors' promoted dtype."""
    if not tensors:
        return xp.asarray(0.0)
    dtype = xp.result_type(*[xp.real(t) if t.dtype.kind == "c" else t for t in tensors])
    norms = [xp.astype(_norm(g, norm_type), dtype) for g in tensors]
    return _norm(xp.stack(norms), norm_type)


def clip_tensors(tensors: list[Tensor], max_norm: float,
                 norm_type: float = 2.0) -> tuple[list[Tensor], Tensor]:
    """(tensors scaled by min(1, max_norm / (total + 1e-6)), total norm)."""
    total = global_norm(tensors, norm_type)
    if not tensors:
        return [], total
    coef = xp.minimum(max_norm / (total + 1e-6), 1.0)
    return [g * xp.astype(coef, g.dtype) for g in tensors], total


def clip_grad_norm(grads: Any, max_norm: float, norm_type: float = 2.0) -> tuple[Any, Tensor]:
    """(grads scaled so their total `norm_type`-norm is at most `max_norm`, the total norm
    before clipping). As torch's `clip_grad_norm_`: coef = max_norm / (total + 1e-6), clamped
    at 1, multiplies every gradient; the total is the norm of the per-tensor norms. Functional
    (nothing is modified), so it can sit inside a compiled train step."""
    max_norm, norm_type = check_norm_args("clip_grad_norm", max_norm, norm_type)
    leaves, td = tree_flatten(grads)
    for i, g in enumerate(leaves):
        if not isinstance(g, Tensor):
            raise ArgumentError(f"clip_grad_norm: gradient leaf {i} is a {type(g).__name__}; expected "
                                f"a pytree of tenferro tensors")
        if g.dtype.kind not in "fc":
            raise DTypeError(f"clip_grad_norm: gradient leaf {i} is {g.dtype}; expected floating or "
                             f"complex gradients")
    clipped, total = clip_tensors(leaves, max_norm, norm_type)
    return tree_unflatten(td, clipped), total


__all__ = ["clip_grad_norm", "global_norm"]
