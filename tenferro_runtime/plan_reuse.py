"""Buffer reuse for plans: which steps write their result into a dead buffer.

A backend that can write a kernel's result into a given buffer says so with the optional
``Backend.out_kernel(name, kernel) -> fn(*bufs, out) | None``. With a memory plan (the
`memory` pass ran), a step whose kernel has such a form writes into a buffer of its
result's shape and dtype whose value is dead, instead of allocating one. Safe at slot
level: only buffers the plan's own out-capable steps allocated are reused (never inputs,
constants or outputs), and a buffer is dead only when every slot that may share its
memory is (a step without an out form may return a view of its operands, so its results
join its operands' alias class). A donated input joins the pool after its last use, on a
condition checked when the step runs: the executor counts the references beyond its own
and the backend's ``donatable(buf, others)`` says whether the buffer may be written (numpy:
no other reference, the array owns its memory and is writeable), since a NumPy-backed
input may still be the caller's own array (zero-copy `asarray`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any


def plan_reuse(steps: list, avals: dict, protected: set, out_forms: list,
               donated: tuple = (), known: dict | None = None) -> dict[int, tuple]:
    """{step index: (the dead slot it writes into, whether only if the buffer is donatable)}.
    `out_forms[k]` is step k's out form or None; `protected` holds slots never written
    (graph outputs, and inputs and constants that are not donated); `donated` input slots
    (with their avals in `avals`) may be written once their last use has passed.
    `known[k]` = (candidates, aliases, new) for a step without an out form whose results'
    memory is known (otherwise a result may be a view of any operand): `new` holds the
    positions of results that are new arrays (reusable like an out form's), `aliases` maps
    results to the operands they are (any other may share memory with any operand), and
    `candidates` maps results to the operands whose
    buffers the kernel can write them into (a generated loop's in-place form). Such a
    step's entry is (the operand slots written, ((result position, operand position), ...))
    where some of those operands die there."""
    known = known or {}
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
        elif k in known:
            _, aliases, new = known[k]
            owned.update(outs[p] for p in new)
            for p, o in enumerate(outs):
                if p not in new:  # an operand as it is, or (not known which) any of them
                    for i in ([ins[aliases[p]]] if p in aliases else ins):
                        parent[find(o)] = find(i)
        else:
            for o in outs:
                for i in ins:
                    parent[find(o)] = find(i)
    members: dict[int, list[int]] = defaultdict(list)
    for s in end:
        members[find(s)].append(s)
    donated_set = set(donated) - protected
    blocked = {find(s) for s in protected}
    released: dict[int, list[int]] = defaultdict(list)  # step -> reusable buffers free after it
    for root, slots in members.items():
        if root not in blocked:
            released[max(end[s] for s in slots)] += [
                s for s in slots if s in owned or s in donated_set]
    pool: dict[Any, list[int]] = defaultdict(list)
    reuse: dict[int, tuple] = {}
    for k, step in enumerate(steps):
        now = released[k]
        if k in known and known[k][0]:
            now = _written_in_place(k, step[2], known[k][0], now, donated_set, find, reuse)
        if out_forms[k] is not None:
            a = avals[step[3][0]]
            key = (a.shape, a.dtype)
            # in place first: an operand of exactly the result's shape whose buffer dies here
            # (a ufunc reads and writes the same elements: exact overlap is safe)
            here = [s for s in now if s in step[2] and (avals[s].shape, avals[s].dtype) == key]
            if here:  # the plan's own buffer before a donated one (that one is conditional)
                slot = next((s for s in reversed(here) if s not in donated_set), here[-1])
                now = [s for s in now if s != slot]
                reuse[k] = (slot, slot in donated_set)
            elif pool[key]:
                slot = pool[key].pop()
                reuse[k] = (slot, slot in donated_set)
        for s in now:
            pool[(avals[s].shape, avals[s].dtype)].append(s)
    return reuse


def _written_in_place(k: int, ins: tuple, candidates: dict, now: list, donated: set, find: Any,
                      reuse: dict) -> list:
    """Step k's results written into its operands whose buffers die there (the plan's own
    before donated ones; an operand read at one position only, sharing its memory with no
    other operand); returns `now` less everything sharing the buffers taken."""
    dying = set(now)
    pairs, taken = [], []
    for p, positions in candidates.items():
        for i in sorted(positions, key=lambda i: ins[i] in donated):
            s = ins[i]
            if (s in dying and s not in taken and ins.count(s) == 1
                    and all(find(x) != find(s) for x in ins if x != s)):
                pairs.append((p, i))
                taken.append(s)
                break
    if not pairs:
        return now
    reuse[k] = (tuple(taken), tuple(pairs))
    gone = {find(s) for s in taken}
    return [s for s in now if find(s) not in gone]


__all__ = ["plan_reuse"]
