"""Energy-aware scheduling: reorder nodes to cut the peak of live bytes, estimate joules.

Greedy list scheduling: among the ready nodes (inputs made, and every earlier effectful node
run, so effects keep their order) take the one that allocates the fewest bytes net of
what it frees (ties: traced order). The estimate is FLOPs x `JOULES_PER_FLOP` + bytes x
`JOULES_PER_BYTE` from the `cost` rules, where a node reading a value made within the last
`CACHE_BYTES` written pays `JOULES_PER_CACHED_BYTE` for it instead: an order that uses a
temporary soon after making it is cheaper. The traced order stays unless the greedy one has a
lower peak (or the same peak and fewer joules).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

from tenferro_core.errors import MissingRuleError

from ..cost import op_cost
from ..graph import Graph, Var
from .memory import _fmt, live_bytes_peak, nbytes

# CPU defaults (the cost-model meter's, tenferro_core.energy.EstimatedTelemetry): DRAM traffic
# costs about 5x a FLOP; a last-level-cache hit about 10x less than DRAM.
JOULES_PER_FLOP = 1e-10
JOULES_PER_BYTE = 5e-10
JOULES_PER_CACHED_BYTE = 5e-11
CACHE_BYTES = 2 << 20


@dataclass(frozen=True)
class ScheduleReport:
    """What scheduling did to one graph."""

    peak_bytes_before: int
    peak_bytes_after: int
    joules_before: float
    joules_after: float
    moved: int = 0  # nodes whose position changed (0: the traced order was kept)
    uncosted: tuple[str, ...] = ()  # primitives without a cost rule (counted as 0)

    def __str__(self) -> str:
        b, a = self.peak_bytes_before, self.peak_bytes_after
        s = (f"schedule: peak {_fmt(b)} -> {_fmt(a)}, estimated {self.joules_before:.3g} J -> "
             f"{self.joules_after:.3g} J, {self.moved} node(s) moved")
        if self.uncosted:
            s += f"; no cost rule (counted as 0): {', '.join(self.uncosted)}"
        return s


def estimate_joules(graph: Graph, uncosted: set | None = None) -> float:
    """Estimated joules of running `graph` in node order (see the module docstring); names of
    primitives without a cost rule go into `uncosted`."""
    rt = graph.runtime
    made: dict[Var, int] = {}  # var -> bytes written when it was made
    clock, total = 0, 0.0
    for node in graph.nodes:
        flops, moved = _cost(rt, node, uncosted)
        hot = sum(nbytes(v) for v in set(node.inputs)
                  if v in made and clock - made[v] + nbytes(v) <= CACHE_BYTES)
        hot = min(hot, moved)
        total += flops * JOULES_PER_FLOP + (moved - hot) * JOULES_PER_BYTE + hot * JOULES_PER_CACHED_BYTE
        for v in node.outputs:
            clock += nbytes(v)
            made[v] = clock
    return total


def _cost(rt: Any, node: Any, uncosted: set | None) -> tuple[int, int]:
    inner = getattr(node.prim, "graph_of", None)  # call / fused: the cost of their graph
    if inner is not None:
        g = inner(node.params)
        costs = [_cost(rt, n, uncosted) for n in g.nodes]
        return sum(c[0] for c in costs), sum(c[1] for c in costs)
    try:
        return tuple(op_cost(rt, node.prim, [v.aval for v in node.inputs],
                             [v.aval for v in node.outputs], node.params))
    except MissingRuleError:
        if uncosted is not None:
            uncosted.add(node.prim.name)
        return 0, 0


def greedy_order(graph: Graph) -> list[int]:
    """A topological order of node indices (effectful nodes in their order) that greedily
    keeps few bytes live: a heap of ready nodes by (bytes made - bytes freed, traced index)."""
    nodes = graph.nodes
    producer = {v: i for i, n in enumerate(nodes) for v in n.outputs}
    keep = {v for v in graph.outputs if isinstance(v, Var)}
    readers: dict[Var, list[int]] = {}  # var -> the nodes that read it
    succs: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    last_effect = None
    for i, n in enumerate(nodes):
        deps = {producer[v] for v in n.inputs if v in producer}
        if n.prim.effects:
            if last_effect is not None:
                deps.add(last_effect)
            last_effect = i
        for d in deps:
            succs[d].append(i)
        waiting[i] = len(deps)
        for v in set(n.inputs):
            readers.setdefault(v, []).append(i)
    left = {v: len(r) for v, r in readers.items()}  # var -> readers not yet scheduled

    def score(i: int) -> int:
        freed = sum(nbytes(v) for v in set(nodes[i].inputs)
                    if left[v] == 1 and v in producer and v not in keep)
        return sum(map(nbytes, nodes[i].outputs)) - freed

    current = [score(i) if w == 0 else 0 for i, w in enumerate(waiting)]
    heap = [(current[i], i) for i in range(len(nodes)) if waiting[i] == 0]
    heapq.heapify(heap)
    done = [False] * len(nodes)
    order = []
    while heap:
        s, best = heapq.heappop(heap)
        if done[best] or s != current[best]:
            continue  # a stale entry: the node was rescored (scores only fall) or ran
        done[best] = True
        order.append(best)
        for v in set(nodes[best].inputs):
            left[v] -= 1
            if left[v] == 1:  # its last reader now frees it
                for r in readers[v]:
                    if not done[r] and waiting[r] == 0:
                        current[r] = score(r)
                        heapq.heappush(heap, (current[r], r))
        for r in succs[best]:
            waiting[r] -= 1
            if waiting[r] == 0:
                current[r] = score(r)
                heapq.heappush(heap, (current[r], r))
    return order


def schedule(graph: Graph) -> Graph:
    """`graph` with its nodes reordered where that lowers the peak of live bytes; the
    `ScheduleReport` is in ``meta["schedule"]``."""
    uncosted: set[str] = set()
    peak0, joules0 = live_bytes_peak(graph), estimate_joules(graph, uncosted)
    order = greedy_order(graph)
    new = graph.replace(nodes=[graph.nodes[i] for i in order])
    peak1, joules1 = live_bytes_peak(new), estimate_joules(new)
    if (peak1, joules1) >= (peak0, joules0):
        new, peak1, joules1, order = graph.replace(), peak0, joules0, list(range(len(graph.nodes)))
    moved = sum(i != j for i, j in enumerate(order))
    report = ScheduleReport(peak0, peak1, joules0, joules1, moved, tuple(sorted(uncosted)))
    meta = {**new.meta, "schedule": report}
    if moved:
        meta.pop("memory", None)  # a buffer plan is for the old order
    return new.replace(meta=meta)


__all__ = ["CACHE_BYTES", "JOULES_PER_BYTE", "JOULES_PER_CACHED_BYTE", "JOULES_PER_FLOP",
           "ScheduleReport", "estimate_joules", "greedy_order", "live_bytes_peak", "schedule"]
