"""Elementwise fusion: maximal convex groups of elementwise and broadcast nodes on one device
become one `fused` node whose `graph` param is the group (DESIGN.md section 7).

Groups grow greedily in node order: a node joins the groups of its fusible producers when no
path leaves the union and re-enters it (other groups counting as one node each: their fused
nodes), else the largest one of them that allows it, else it starts its own. Existing `fused`
nodes join by inlining their group. Graph constants a group reads become inputs of its fused
node. The nodes are then put back in a topological order.
"""

from __future__ import annotations

import heapq
from typing import Any

from ..graph import Graph, Node, Var
from ..graph_prims import fused_p

FUSIBLE = frozenset({"elementwise", "broadcast"})


def fuse_elementwise(graph: Graph) -> Graph:
    """`graph` with every fusible group of 2+ nodes replaced by one `fused` node."""
    return fuse_groups(graph, [g for g in _groups(graph.nodes) if len(g) > 1])


def fuse_groups(graph: Graph, groups: list[list[int]]) -> Graph:
    """`graph` with each group (ascending node indices, disjoint, convex: no path leaves a
    group and re-enters it) replaced by one `fused` node, the nodes put back in a
    topological order. Code generators use it to contract groups of their own (row
    reductions with their producers and consumers); a group with no operand is left alone."""
    nodes = graph.nodes
    if not groups:
        return graph
    member = {i: gi for gi, g in enumerate(groups) for i in g}
    readers: dict[Var, set[int]] = {}
    for i, n in enumerate(nodes):
        for v in n.inputs:
            readers.setdefault(v, set()).add(i)
    out_vars = {v for v in graph.outputs if isinstance(v, Var)}
    items: list[tuple[int, Node]] = []  # (original position, node)
    for gi, g in enumerate(groups):
        fused = _fuse([nodes[i] for i in g], g, readers, out_vars, graph.consts)
        if fused is None:  # no operand: nothing would say its device; leave the group alone
            member = {i: m for i, m in member.items() if m != gi}
        else:
            items.append((g[-1], fused))
    items += [(i, n) for i, n in enumerate(nodes) if i not in member]
    return graph.replace(nodes=_toposort(items))


def _fusible(node: Node) -> bool:
    prim = node.prim
    if prim.category not in FUSIBLE or prim.effects:
        return False
    return prim is not fused_p or all(isinstance(v, Var) for v in node.params["graph"].outputs)


def node_device(node: Node) -> Any:
    """The one device of a node's values, or None."""
    vs = node.inputs + node.outputs
    dev = vs[0].aval.device if vs else None
    return dev if all(v.aval.device is dev for v in vs) else None


def bits(b: int):
    """The indices of the set bits of `b`, ascending (node sets are bitsets here)."""
    while b:
        low = b & -b
        yield low.bit_length() - 1
        b ^= low


def _groups(nodes: list[Node]) -> list[list[int]]:
    """Node indices of each fusion group, groups and members in node order."""
    producer: dict[Var, int] = {}
    users: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        for p in {producer[v] for v in n.inputs if v in producer}:
            users[p].append(i)
        producer.update((v, i) for v in n.outputs)
    group_of: dict[int, int] = {}
    members: dict[int, int] = {}  # group id -> bitset of members
    device: dict[int, Any] = {}
    for i, n in enumerate(nodes):
        dev = node_device(n) if _fusible(n) else None
        if dev is None:
            continue
        cands: list[int] = []
        for v in n.inputs:
            g = group_of.get(producer.get(v, -1))
            if g is not None and device[g] is dev and g not in cands:
                cands.append(g)
        options = [cands] if cands else []
        if len(cands) > 1:
            options += [[g] for g in sorted(cands, key=lambda g: -members[g].bit_count())]
        gs, m = [], 1 << i
        for opt in options:
            m2 = m
            for g in opt:
                m2 |= members[g]
            if not closes_cycle(m2, i, users, group_of, members):
                gs, m = opt, m2
                break
        gid = gs[0] if gs else i
        members[gid], device[gid] = m, dev
        for g in gs[1:]:
            for j in bits(members.pop(g)):
                group_of[j] = gid
            del device[g]
        group_of[i] = gid
    return sorted((list(bits(m)) for m in members.values()), key=lambda g: g[0])


def closes_cycle(m: int, i: int, users: list, group_of: dict, members: dict) -> bool:
    """True when a path leaves the nodes of bitset `m` (its last node `i`) and comes back,
    the other groups counting as one node each (their fused nodes)."""
    seen, stack = 0, [(j, True) for j in bits(m)]
    while stack:
        j, inside = stack.pop()
        for u in users[j]:
            if (m >> u) & 1:
                if not inside:
                    return True
            elif u < i and not (seen >> u) & 1:
                g = group_of.get(u)
                new = (members[g] if g is not None else 1 << u) & ~seen
                seen |= new
                stack += [(k, False) for k in bits(new)]
    return False


def _fuse(group: list[Node], idx: list[int], readers: dict, out_vars: set,
          consts: dict) -> Node | None:
    """One `fused` node for the group's nodes (at node indices `idx`), or None. The graph
    constants it reads are constants of its group (a kernel then knows them when it is built)."""
    inside = set(idx)
    env: dict[Var, Var] = {}
    ins: list[Var] = []
    sub = Graph(inputs=[])
    produced: list[Var] = []
    for node in group:
        for v in node.inputs:
            if v not in env:
                env[v] = Var(v.aval)
                if v in consts:
                    sub.consts[env[v]] = consts[v]
                else:
                    ins.append(v)
                    sub.inputs.append(env[v])
        if node.prim is fused_p:
            _inline(node, env, sub)
        else:
            outs = [Var(v.aval) for v in node.outputs]
            sub.nodes.append(Node(node.prim, [env[v] for v in node.inputs], node.params, outs, node.site))
            env.update(zip(node.outputs, outs))
        produced += node.outputs
    if not ins:
        return None
    outs = [v for v in produced if v in out_vars or not readers.get(v, set()) <= inside]
    sub.outputs = [env[v] for v in outs]
    return Node(fused_p, ins, {"graph": sub}, outs, group[-1].site)


def _inline(node: Node, env: dict, sub: Graph) -> None:
    """Append the nodes of fused `node`'s group to `sub`, renamed; its consts become sub's."""
    inner = node.params["graph"]
    local = {iv: env[ov] for iv, ov in zip(inner.inputs, node.inputs)}
    for cv, c in inner.consts.items():
        local[cv] = Var(cv.aval)
        sub.consts[local[cv]] = c
    for n in inner.nodes:
        outs = [Var(v.aval) for v in n.outputs]
        sub.nodes.append(Node(n.prim, [local[v] for v in n.inputs], n.params, outs, n.site))
        local.update(zip(n.outputs, outs))
    env.update((ov, local[iv]) for ov, iv in zip(node.outputs, inner.outputs))


def _toposort(items: list[tuple[int, Node]]) -> list[Node]:
    """The nodes in dependency order, ties broken by original position."""
    producer = {v: k for k, (_, n) in enumerate(items) for v in n.outputs}
    waiting = [0] * len(items)
    users: list[list[int]] = [[] for _ in items]
    for k, (_, n) in enumerate(items):
        for p in {producer[v] for v in n.inputs if v in producer}:
            waiting[k] += 1
            users[p].append(k)
    heap = [(pos, k) for k, (pos, _) in enumerate(items) if not waiting[k]]
    heapq.heapify(heap)
    order = []
    while heap:
        _, k = heapq.heappop(heap)
        order.append(items[k][1])
        for u in users[k]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(heap, (items[u][0], u))
    if len(order) != len(items):
        raise AssertionError("fusion made a cycle (a group was not convex)")
    return order


__all__ = ["FUSIBLE", "bits", "closes_cycle", "fuse_elementwise", "fuse_groups", "node_device"]
