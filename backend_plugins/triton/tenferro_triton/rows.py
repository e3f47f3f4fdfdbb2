"""Row reductions fused with their elementwise producers and consumers (placeholder until
the code generator lands: finds no group)."""

from __future__ import annotations

from typing import Any


def find_groups(graph: Any) -> list[list[int]]:
    """Node indices of each row group of `graph` (ascending, disjoint, convex)."""
    return []


def row_kernel(group: Any, device: Any) -> Any:
    """A kernel (input buffers) -> output buffers for a row group's graph, or None."""
    return None
