"""Common subexpression elimination: one node per (primitive, inputs, params), one constant
var per tensor object or buffer (buffers are never written, so one buffer is one value:
the namespace's scalar constants, ``x * 0.9`` in a loop, share theirs), and one per value
for small constants (equal bits: -0.0 and 0.0, or two NaN payloads, stay apart). Effectful
and random nodes (and calls of graphs holding them) stay."""

from __future__ import annotations

from typing import Any

from ..eager import params_key
from ..graph import Graph, Node, Var
from ..graph_prims import pinned


def common_subexpressions(graph: Graph) -> Graph:
    """`graph` with duplicate constants and duplicate pure nodes merged into the first."""
    sub: dict[Var, Var] = {}
    consts: dict[Var, Any] = {}
    by_id: dict[Any, Var] = {}
    for v, c in graph.consts.items():
        buf = _buffer(c)
        if buf is None:
            key: tuple = (id(c),)
        elif v.aval.size <= _BY_VALUE:
            key = (v.aval, c.numpy().tobytes())
        else:
            key = (id(buf), v.aval)  # kept alive by graph.consts
        first = by_id.setdefault(key, v)
        if first is v:
            consts[v] = c
        else:
            sub[v] = first
    seen: dict[tuple, Node] = {}
    nodes = []
    for n in graph.nodes:
        ins = [sub.get(v, v) for v in n.inputs]
        node = n if ins == n.inputs else Node(n.prim, ins, n.params, n.outputs, n.site)
        key = None if pinned(n) else _key(node)
        if key is not None:
            hit = seen.setdefault(key, node)
            if hit is not node:
                sub.update(zip(n.outputs, hit.outputs))
                continue
        nodes.append(node)
    outputs = [sub.get(v, v) if isinstance(v, Var) else v for v in graph.outputs]
    return graph.replace(nodes=nodes, outputs=outputs, consts=consts)


_BY_VALUE = 64  # elements: constants up to this size are merged by value


def _buffer(t: Any) -> Any:
    try:
        return t._buf
    except Exception:  # a tracer (an outer transformation's value) has none
        return None


def _key(node: Node) -> tuple | None:
    """A hashable identity of what `node` computes, or None (params that do not hash)."""
    key = (node.prim, tuple(node.inputs), tuple(v.aval for v in node.outputs),
           params_key(node.prim, node.params))
    try:
        hash(key)
    except TypeError:
        return None
    return key


__all__ = ["common_subexpressions", "pinned"]
