"""Overlapping gradient all_reduce with backward inside compiled train steps.

Two effectful primitives split a collective: ``all_reduce_start(x)`` starts it on the group's
communication thread and returns a handle (an int64 scalar), ``all_reduce_wait(handle, x)``
waits for it and returns the reduction. `allreduce_gradients(..., overlap=True)` emits one
pair per bucket when traced. The compiler pass `overlap_schedule` (position 850: after the
built-in scheduling, before memory planning) then reorders the graph: every start, with the
nodes it depends on (the bucket's reshapes and concat), is moved to just after its gradients
are computed, in the middle of backward, and every wait is moved to just before the first
node that uses its result (the optimizer update of that bucket). The starts keep their order
among the graph's effects, so every rank starts the same collectives in the same order.

Registered by `register(registry)`, which the plugin calls.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

import numpy as np

from tenferro_core.catalog.cost import Cost
from tenferro_core.dtypes import int64
from tenferro_core.extension import define_op
from tenferro_distributed import comm
from tenferro_distributed.group import current
from tenferro_distributed.ops import _payload

PASS_POSITION = 850.0
_IDS = itertools.count(1)
_WORKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Group -> {handle: Work}


def _start_rule(x, *, op, algorithm, timeout):
    current()
    if op not in ("sum", "mean"):
        from tenferro_core.errors import ArgumentValueError

        raise ArgumentValueError(f"all_reduce_start: op must be 'sum' or 'mean', got {op!r}")
    return (), int64


def _wait_rule(h, x, *, op, algorithm, timeout):
    return x.shape, x.dtype


all_reduce_start_p = define_op("tenferro_distributed.all_reduce_start.v1", _start_rule,
                               payload=_payload("all_reduce", comm.OPS), effects=True, differentiable=False,
                               doc="Start an all_reduce; returns its handle (see all_reduce_wait).")
all_reduce_wait_p = define_op("tenferro_distributed.all_reduce_wait.v1", _wait_rule, nin=2,
                              payload=_payload("all_reduce", comm.OPS), effects=True, differentiable=False,
                              doc="Wait for the all_reduce a handle names; returns its result.")


def _k_start(x, *, op, algorithm, timeout):
    g = current()
    work = comm.all_reduce_buf(x, op, algorithm, timeout, asynchronous=True)
    h = next(_IDS)
    _WORKS.setdefault(g, {})[h] = work
    if isinstance(x, np.ndarray):
        return np.asarray(h, dtype=np.int64)
    import torch

    return torch.tensor(h, dtype=torch.int64, device=x.device)


def _k_wait(h, x, *, op, algorithm, timeout):
    g = current()
    return _WORKS[g].pop(int(h)).wait()


def _start_batch(args, dims, **payload):
    """A batched operand's all_reduce starts whole (elementwise over ranks); its handle is one."""
    return all_reduce_start_p.bind(args[0], **payload), None


def _wait_batch(args, dims, **payload):
    if dims[0] is not None:
        from tenferro_core.errors import ShapeError

        raise ShapeError("all_reduce_wait: a handle cannot be batched; vmap the all_reduce_start with it")
    return all_reduce_wait_p.bind(*args, **payload), dims[1]


def _cost(in_avals, out_avals, **payload):
    a = in_avals[-1]
    n = int(np.prod(a.shape, dtype=np.int64))
    return Cost(n, 2 * n * a.dtype.itemsize)


def all_reduce_overlapped(x: Any, op: str = "mean", *, algorithm: str | None = None,
                          timeout: float | None = None) -> Any:
    """`all_reduce(x, op)` as a start/wait pair (for traced code; the pass moves them apart)."""
    h = all_reduce_start_p.bind(x, op=op, algorithm=algorithm, timeout=timeout)
    return all_reduce_wait_p.bind(h, x, op=op, algorithm=algorithm, timeout=timeout)


def overlap_schedule(graph: Any) -> Any:
    """Hoist each all_reduce_start (with the structural nodes between it and the gradients:
    reshapes, concat) to right after its gradients exist, sink each all_reduce_wait to right
    before its first use; other nodes keep their order, starts keep theirs."""
    nodes = graph.nodes
    starts = [i for i, n in enumerate(nodes) if n.prim is all_reduce_start_p]
    if not starts:
        return graph
    producer = {v: i for i, n in enumerate(nodes) for v in n.outputs}
    waits = {i for i, n in enumerate(nodes) if n.prim is all_reduce_wait_p}
    wait_of = {v: i for i in waits for v in nodes[i].outputs}
    effects = [i for i, n in enumerate(nodes) if n.prim.effects and i not in waits]
    done = [False] * len(nodes)
    order: list[int] = []
    queue = list(starts)  # in order: a start never passes an earlier one

    def emit(i: int) -> None:
        done[i] = True
        order.append(i)

    def glue(s: int) -> list[int] | None:
        """The not-yet-emitted ancestors of start `s`, if all are structural and pure."""
        need, stack = set(), [s]
        while stack:
            i = stack.pop()
            for v in nodes[i].inputs:
                j = producer.get(v)
                if j is None or done[j] or j in need:
                    continue
                n = nodes[j]
                if n.prim.effects or getattr(n.prim, "category", "") != "structural":
                    return None
                need.add(j)
                stack.append(j)
        return sorted(need)

    def pull() -> None:
        while queue:
            s = queue[0]
            if done[s]:
                queue.pop(0)
                continue
            if not all(done[j] for j in effects if j < s):
                return
            chain = glue(s)
            if chain is None:
                return
            for j in chain:
                emit(j)
            emit(s)
            queue.pop(0)

    pull()
    for i in range(len(nodes)):
        if done[i] or i in waits:
            continue
        for v in nodes[i].inputs:
            w = wait_of.get(v)
            if w is not None and not done[w]:
                emit(w)
        emit(i)
        pull()
    order.extend(i for i in sorted(waits) if not done[i])
    if order == list(range(len(nodes))):
        return graph
    meta = dict(graph.meta, overlap=sum(1 for k, i in enumerate(order) if k != i))
    return graph.replace(nodes=[nodes[i] for i in order], meta=meta)


def register(registry) -> None:
    """Add the start/wait primitives, their kernels and cost rules, and the pass."""
    for prim, kernel in ((all_reduce_start_p, _k_start), (all_reduce_wait_p, _k_wait)):
        registry.add_op(prim)
        registry.add_kernel("numpy", prim, kernel)
        registry.add_kernel("torch", prim, kernel)
        registry.add_rule("cost", prim, _cost)
    registry.add_rule("batch", all_reduce_start_p, _start_batch)
    registry.add_rule("batch", all_reduce_wait_p, _wait_batch)
    registry.add_pass("distributed_overlap", overlap_schedule, position=PASS_POSITION)



__all__ = ["PASS_POSITION", "all_reduce_overlapped", "all_reduce_start_p", "all_reduce_wait_p",
           "overlap_schedule", "register"]
