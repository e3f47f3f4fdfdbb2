"""Triton matmul for `dot_general` (placeholder until the kernel lands: declines every node)."""

from __future__ import annotations

from typing import Any


def dot_kernel(in_avals: tuple, out_aval: Any, contracting_dims: tuple, batch_dims: tuple) -> Any:
    """A kernel (lhs buffer, rhs buffer) -> result buffer for this dot_general signature, or
    None where Triton does not run it (the torch kernel does)."""
    return None
