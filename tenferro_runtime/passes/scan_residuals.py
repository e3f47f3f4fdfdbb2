"""Scan residuals recomputed where they are read: a stacked output of one scan that only
another scan reads, and that the first computes elementwise from its other stacked outputs,
is computed per iteration by the reader from those outputs instead.

Reverse-mode AD stores what a loop's backward pass needs as stacked outputs of the forward
loop (`1 - tanh(z)**2` of an RNN cell beside `tanh(z)` itself). Writing such a residual costs
the forward loop a pass over fresh memory every iteration (on the 2-core VM the scan RNN's
forward loop went from 3.3 to 1.8 ms without it, docs/performance.md), where the backward
loop can rebuild it from a row it reads anyway or in its place. The reader gets the rows of
the leaves instead (at most one new stacked operand for the one it loses, so no more memory
is read), the same elementwise nodes run on the same values, so the results are bitwise the
same; dead code elimination then drops the unread output and its nodes from the first loop.
"""

from __future__ import annotations

from typing import Any

from ..graph import Graph, Node, Var

MAX_NODES = 8
"""The largest expression recomputed (elementwise nodes per residual)."""


def recompute_scan_residuals(graph: Graph) -> Graph:
    """`graph` with every eligible residual of a scan recomputed by the scan that reads it."""
    while True:
        rewrite = _find(graph)
        if rewrite is None:
            return graph
        graph = _apply(graph, *rewrite)


def _find(graph: Graph) -> tuple | None:
    """(reader index, its operand position, the residual's expression, its leaves (body var
    -> ("xs", stacked outer var) or ("const", loop-constant operand)), the producing body's
    graph constants) of the first eligible residual, or None."""
    from ..control_flow_prims import scan_p

    readers: dict[Var, list] = {}
    for i, n in enumerate(graph.nodes):
        for p, v in enumerate(n.inputs):
            readers.setdefault(v, []).append((i, p))
    outs = {v for v in graph.outputs if isinstance(v, Var)}
    for n in graph.nodes:
        if n.prim is not scan_p:
            continue
        body, nk = n.params["body"].graph, n.params["num_carry"]
        stacked: dict[Var, Var] = {}  # body var -> the outer var it is stacked into
        for bv, y in zip(body.outputs[nk:], n.outputs[nk:]):
            if isinstance(bv, Var):
                stacked.setdefault(bv, y)
        producer = {o: m for m in body.nodes for o in m.outputs}
        nc = n.params["num_consts"]
        invariant = dict(zip(body.inputs[:nc], n.inputs[:nc]))  # body const -> its operand
        for bv, y in zip(body.outputs[nk:], n.outputs[nk:]):
            uses = readers.get(y, [])
            if y in outs or len(uses) != 1 or not isinstance(bv, Var) or bv not in producer:
                continue
            (r, p), = uses
            reader = graph.nodes[r]
            if not _reads_as_xs(reader, p, n.params["length"]):
                continue
            expr = _expression(bv, producer, stacked, invariant, body.consts, y)
            if expr is None:
                continue
            nodes, leaves = expr
            xs = set(reader.inputs[reader.params["num_consts"] + reader.params["num_carry"]:])
            if sum(v in stacked and stacked[v] not in xs for v in leaves) > 1:
                continue  # it would read more rows per iteration than it does now
            where = {v: ("xs", stacked[v]) if v in stacked else ("const", invariant[v]) for v in leaves}
            return r, p, nodes, where, body.consts
    return None


def _reads_as_xs(node: Node, position: int, length: int) -> bool:
    from ..control_flow_prims import scan_p

    if node.prim is not scan_p or node.params["body"].donated or node.params["length"] != length:
        return False
    return position >= node.params["num_consts"] + node.params["num_carry"]


def _expression(root: Var, producer: dict, stacked: dict, invariant: dict, consts: dict,
                own: Var) -> tuple | None:
    """(the elementwise nodes computing `root` in order, its leaves: stacked body vars other
    than its own, and loop constants) when `root` is computed from them and graph constants
    by at most `MAX_NODES` elementwise nodes reading at least one stacked value; else None."""
    order: list[Node] = []
    leaves: list[Var] = []
    seen: set = set()

    def visit(v: Var) -> bool:
        if v in seen or v in consts:
            return True
        seen.add(v)
        if (v is not root and v in stacked and stacked[v] is not own) or v in invariant:
            leaves.append(v)
            return True
        node = producer.get(v)
        if node is None or node.prim.category != "elementwise" or node.prim.effects \
                or node.prim.multiple_results or not all(visit(u) for u in node.inputs if isinstance(u, Var)):
            return False
        order.append(node)
        return len(order) <= MAX_NODES

    if not visit(root) or not any(v in stacked for v in leaves):
        return None
    return order, leaves


def _apply(graph: Graph, r: int, p: int, expr: list, leaves: dict, consts: dict) -> Graph:
    """`graph` whose node `r` (a scan) computes its operand `p`'s rows by `expr` from
    `leaves` (body var -> ("xs", stacked outer var) or ("const", loop-constant operand))
    instead of reading them."""
    from ..compiled import Callee

    reader = graph.nodes[r]
    callee = reader.params["body"]
    body = callee.graph
    nc, nk = reader.params["num_consts"], reader.params["num_carry"]
    # the body's inputs and the node's operands, as [consts, carry, xs] lists of (input, operand)
    parts = [list(zip(body.inputs[a:b], reader.inputs[a:b]))
             for a, b in ((0, nc), (nc, nc + nk), (nc + nk, len(body.inputs)))]
    gone = parts[2].pop(p - nc - nk)[0]
    env: dict[Var, Any] = {}
    for bv, (kind, outer) in leaves.items():
        part = parts[2] if kind == "xs" else parts[0]
        env[bv] = next((inp for inp, op in part if op is outer), None)
        if env[bv] is None:
            env[bv] = Var(bv.aval)
            part.append((env[bv], outer))
    new_consts = dict(body.consts)
    for v, value in consts.items():
        if any(v in n.inputs for n in expr):
            env[v] = Var(v.aval)
            new_consts[env[v]] = value
    nodes = []
    for n in expr:
        outs = [Var(o.aval) for o in n.outputs]
        nodes.append(Node(n.prim, [env.get(v, v) for v in n.inputs], dict(n.params), outs, n.site))
        env.update(zip(n.outputs, outs))
    sub = {gone: env[expr[-1].outputs[0]]}
    nodes += [Node(n.prim, [sub.get(v, v) for v in n.inputs], n.params, n.outputs, n.site)
              for n in body.nodes]
    outputs = [sub.get(v, v) if isinstance(v, Var) else v for v in body.outputs]
    pairs = [pair for part in parts for pair in part]
    new_graph = body.replace(inputs=[i for i, _ in pairs], nodes=nodes, outputs=outputs, consts=new_consts)
    new_body = Callee(new_graph, callee.name, callee.passes, (), callee.executor)
    params = {**reader.params, "body": new_body, "num_consts": len(parts[0])}
    node = Node(reader.prim, [o for _, o in pairs], params, reader.outputs, reader.site)
    return graph.replace(nodes=[node if i == r else n for i, n in enumerate(graph.nodes)])


__all__ = ["MAX_NODES", "recompute_scan_residuals"]
