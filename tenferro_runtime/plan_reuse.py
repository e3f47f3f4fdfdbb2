"""Buffer reuse for plans: which steps write their result into a dead buffer.

A backend that can write a kernel's result into a given buffer says so with the optional
``Backend.out_kernel(name, kernel) -> fn(*bufs, out) | None``. With a memory plan (the
`memory` pass ran), a step whose kernel has such a form writes into a buffer of its
result's shape and dtype whose value is dead, instead of allocating one. Safe at slot
level: only buffers the plan's own out-capable steps allocated are reused (never inputs,
constants or outputs), and a buffer is dead only when every slot that may share its
memory is (a step without an out form may return a view of its operands, so its results
join its operands' alias class). Donated inputs are not written into: a NumPy-backed input
may share memory with the caller's own arrays (zero-copy `asarray`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def plan_reuse(steps: list, avals: dict, protected: set, out_forms: list) -> dict[int, int]:
    """{step index: the dead slot it writes into}. `out_forms[k]` is step k's out form or
    None; `protected` holds slots never written (inputs, constants, graph outputs)."""
    parent: dict[int, int] = {}

    def find(s: int) -> int:
        while parent.get(s, s) != s:
            s = parent[s]
        return s

    owned: set[int] = set()
    end: dict[int, int] = {}  # slot -> last step that makes or reads it
    for k, (_, _, ins, outs, *_rest) in enumerate(steps):
        for s in (*ins, *outs):
            end[s] = k
        if out_forms[k] is not None:
            owned.add(outs[0])
        else:
            for o in outs:
                for i in ins:
                    parent[find(o)] = find(i)
    members: dict[int, list[int]] = defaultdict(list)
    for s in end:
        members[find(s)].append(s)
    blocked = {find(s) for s in protected}
    released: dict[int, list[int]] = defaultdict(list)  # step -> owned buffers free after it
    for root, slots in members.items():
        if root not in blocked:
            released[max(end[s] for s in slots)] += [s for s in slots if s in owned]
    pool: dict[Any, list[int]] = defaultdict(list)
    reuse: dict[int, int] = {}
    for k, step in enumerate(steps):
        if out_forms[k] is not None:
            a = avals[step[3][0]]
            free = pool[(a.shape, a.dtype)]
            if free:
                reuse[k] = free.pop()
        for s in released[k]:
            pool[(avals[s].shape, avals[s].dtype)].append(s)
    return reuse


__all__ = ["plan_reuse"]
