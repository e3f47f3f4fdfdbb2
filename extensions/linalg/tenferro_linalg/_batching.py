"""Batch rules of the linalg ops.

Every op takes leading batch dimensions equal on its operands, so the generic rule moves
each operand's batch axis first (`leading_batch`). The solves (`solve`, `lu_solve`,
`solve_triangular`) with a matrix shared by every example and a batched right-hand side
fold the examples into the right-hand side's columns instead: one factorization for the
whole batch, as a Python loop over the examples would never do.
"""

from __future__ import annotations

from typing import Any

from tenferro_ad.batching import moveaxis
from tenferro_ad.rules.batching import leading_batch
from tenferro_runtime import lax

RHS = {"solve": 1, "lu_solve": 2, "solve_triangular": 1}  # op -> the right-hand side operand


def rhs_batch(prim: Any, rhs: int) -> Any:
    """Batch rule of a solve whose right-hand side is operand `rhs` (shape (..., n, k))."""
    generic = leading_batch(prim)

    def rule(args: tuple, dims: tuple, **params: Any) -> tuple:
        if any(d is not None for i, d in enumerate(dims) if i != rhs):
            return generic(args, dims, **params)
        b = moveaxis(args[rhs], dims[rhs], args[rhs].ndim - 1)  # (..., n, k, B)
        *lead, n, k, size = b.shape
        b = lax.reshape(b, new_sizes=(*lead, n, k * size))
        out = prim.bind(*args[:rhs], b, *args[rhs + 1:], **params)
        return lax.reshape(out, new_sizes=(*lead, n, k, size)), len(lead) + 2

    return rule


def batch_rule(prim: Any) -> Any:
    """The batch rule registered for a linalg op."""
    short = prim.name.split(".")[1]
    return rhs_batch(prim, RHS[short]) if short in RHS else leading_batch(prim)


__all__ = ["batch_rule", "rhs_batch"]
