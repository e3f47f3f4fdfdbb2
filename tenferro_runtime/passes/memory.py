"""Memory planning: liveness (what each node frees), buffer reuse hints and donation.

`plan_memory(graph)` keeps the nodes and stores a `MemoryPlan` in ``meta["memory"]``; the
generic plan executor (plan.py) drops each freed value right after its last use. Only node
results that are not graph outputs are ever freed: inputs and constants belong to the
caller, except that a donated input (``meta["donated"]``, input indices) becomes a reuse
candidate once its last use has passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..graph import Graph, Var


def nbytes(v: Var) -> int:
    """Bytes of the array a var holds."""
    return v.aval.size * v.aval.dtype.itemsize


def last_uses(graph: Graph) -> dict[Var, int]:
    """var -> index of the last node that reads it (vars no node reads are absent)."""
    last: dict[Var, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
    return last


def free_after(graph: Graph) -> tuple[tuple[Var, ...], ...]:
    """Per node, the node results (not graph outputs) whose last use is that node; a result
    nothing reads is freed right after the node that makes it."""
    last = last_uses(graph)
    outs = {v for v in graph.outputs if isinstance(v, Var)}
    frees: list[list[Var]] = [[] for _ in graph.nodes]
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            if v not in outs:
                frees[last.get(v, i)].append(v)
    return tuple(tuple(f) for f in frees)


def live_bytes_peak(graph: Graph, donated: tuple[int, ...] = ()) -> int:
    """Peak bytes live while running `graph` in node order: inputs and constants throughout
    (a donated input only up to its last use), a node result from its node to its last
    use, graph outputs to the end. A node's results and its inputs are live together."""
    last = last_uses(graph)
    dying: dict[int, int] = {}  # node index -> bytes freed after it
    for v in _donated_vars(graph, donated):
        i = last.get(v, -1)
        dying[i] = dying.get(i, 0) + nbytes(v)
    for i, vs in enumerate(free_after(graph)):
        dying[i] = dying.get(i, 0) + sum(map(nbytes, vs))
    live = sum(map(nbytes, graph.inputs)) + sum(map(nbytes, graph.consts)) - dying.get(-1, 0)
    peak = live
    for i, node in enumerate(graph.nodes):
        live += sum(map(nbytes, node.outputs))
        peak = max(peak, live)
        live -= dying.get(i, 0)
    return peak


def _donated_vars(graph: Graph, donated: Any) -> list[Var]:
    """The donated inputs that are not also graph outputs (those stay the caller's)."""
    outs = {v for v in graph.outputs if isinstance(v, Var)}
    n = len(graph.inputs)
    return [graph.inputs[i] for i in sorted(set(donated))
            if type(i) is int and 0 <= i < n and graph.inputs[i] not in outs]


@dataclass(frozen=True)
class MemoryPlan:
    """Liveness and reuse hints of one graph (its node order)."""

    free_after: tuple[tuple[Var, ...], ...]  # per node index
    reuse: dict[Var, Var] = field(default_factory=dict)  # result -> dead var of its aval
    donated: tuple[int, ...] = ()
    peak_bytes_before: int = 0  # nothing freed: every value at once
    peak_bytes_after: int = 0  # with frees (and donated inputs released)

    def __str__(self) -> str:
        freed = sum(map(len, self.free_after))
        before, after = self.peak_bytes_before, self.peak_bytes_after
        drop = f" (-{100 * (before - after) / before:.0f}%)" if before else ""
        return (f"memory plan: peak {_fmt(before)} -> {_fmt(after)}{drop}; {freed} value(s) freed "
                f"early, {len(self.reuse)} buffer reuse hint(s), donated inputs {list(self.donated)}")


def _fmt(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def plan_memory(graph: Graph) -> Graph:
    """`graph` (same nodes) with its `MemoryPlan` in ``meta["memory"]``."""
    frees = free_after(graph)
    n = len(graph.inputs)
    donated = tuple(sorted({i for i in graph.meta.get("donated", ()) if type(i) is int and 0 <= i < n}))
    last = last_uses(graph)
    released: dict[int, list[Var]] = {}
    for v in _donated_vars(graph, donated):
        released.setdefault(last.get(v, -1), []).append(v)
    pool: dict[Any, list[Var]] = {}  # aval -> dead vars whose buffers may be written into
    for v in released.get(-1, ()):
        pool.setdefault(v.aval, []).append(v)
    reuse: dict[Var, Var] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            free = pool.get(v.aval)
            if free:
                reuse[v] = free.pop()
        for v in (*frees[i], *released.get(i, ())):
            pool.setdefault(v.aval, []).append(v)
    values = [*graph.inputs, *graph.consts, *(v for n in graph.nodes for v in n.outputs)]
    plan = MemoryPlan(frees, reuse, donated, sum(map(nbytes, values)), live_bytes_peak(graph, donated))
    return graph.replace(meta={**graph.meta, "memory": plan})


__all__ = ["MemoryPlan", "free_after", "last_uses", "live_bytes_peak", "nbytes", "plan_memory"]
