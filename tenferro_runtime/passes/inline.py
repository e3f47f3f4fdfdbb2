"""Inlining: every `call` node is replaced by its callee's nodes (recursively, fresh vars);
`inline_decompositions` does the same for extension ops whose decomposition is fusable."""

from __future__ import annotations

from typing import Any

from ..graph import Graph, Node, Var
from ..graph_prims import call_p


def inline_calls(graph: Graph) -> Graph:
    """`graph` with every `call` node (nested ones too) replaced by the callee graph's nodes;
    the callee's constants become constants of `graph`, each inner node keeps its site."""
    if not any(n.prim is call_p for n in graph.nodes):
        return graph.replace()
    nodes: list[Node] = []
    consts = dict(graph.consts)
    env: dict[Var, Any] = {}
    _emit(graph.nodes, env, False, nodes, consts, {})
    outputs = [env.get(v, v) if isinstance(v, Var) else v for v in graph.outputs]
    return graph.replace(nodes=nodes, outputs=outputs, consts=consts)


def _emit(body: list[Node], env: dict, fresh: bool, nodes: list[Node], consts: dict,
          memo: dict, site: str | None = None) -> None:
    """Append `body` to `nodes` with its vars renamed by `env` (fresh outputs when `fresh`),
    calls expanded in place; `memo` maps id(tensor) -> (its outer const var, tensor). With
    `site`, every appended node takes it (a decomposition's nodes, the op's call site)."""
    for n in body:
        ins = [env.get(v, v) for v in n.inputs]
        if n.prim is not call_p:
            outs = n.outputs
            if fresh:
                outs = [Var(v.aval) for v in n.outputs]
                env.update(zip(n.outputs, outs))
            nodes.append(n if not fresh and ins == n.inputs and site is None
                         else Node(n.prim, ins, n.params, outs, site or n.site))
            continue
        _splice(n.params["fn"].graph, ins, n.outputs, env, nodes, consts, memo, site)


def _splice(body: Graph, ins: list, outs: list, env: dict, nodes: list[Node], consts: dict,
            memo: dict, site: str | None = None) -> None:
    """Append `body` (a callee, a traced decomposition) applied to `ins`, with fresh vars, its
    constants made constants of the outer graph; `env` maps `outs` (the outputs of the node it
    replaces) to its results."""
    inner: dict[Var, Any] = dict(zip(body.inputs, ins))
    for v, value in body.consts.items():
        inner[v] = _const_var(v, value, consts, memo)
    _emit(body.nodes, inner, True, nodes, consts, memo, site)
    for o, res in zip(outs, body.outputs):
        if isinstance(res, Var):
            env[o] = inner[res]
        else:  # a literal output value: it becomes a constant of the outer graph
            env[o] = _const_var(o, res, consts, memo)


FUSABLE = frozenset({"elementwise", "broadcast", "reduction", "structural"})


def inline_decompositions(graph: Graph, categories: frozenset = FUSABLE) -> Graph:
    """`graph` with each extension-op node whose decomposition, traced on the node's operands,
    holds only primitives of `categories` replaced by that decomposition's nodes: for an
    executor that generates kernels from core primitives (Triton's rows and elementwise
    groups), an op such as tenferro_nn's log_softmax, opaque to it, becomes code it can fuse.
    Other nodes (no decomposition, or one with products, loops, indexing) stay as they are."""
    bodies: dict[int, Graph] = {}
    for i, n in enumerate(graph.nodes):
        if n.prim.family and n.prim.decomposition is not None and not n.prim.effects:
            try:
                body = inline_decompositions(decomposition_graph(n), categories)
            except Exception:  # a decomposition that does not trace here: keep the op
                continue
            if all(m.prim.category in categories for m in body.nodes):
                bodies[i] = body
    if not bodies:
        return graph.replace()
    nodes: list[Node] = []
    consts = dict(graph.consts)
    env: dict[Var, Any] = {}
    memo: dict = {}
    for i, n in enumerate(graph.nodes):
        ins = [env.get(v, v) for v in n.inputs]
        body = bodies.get(i)
        if body is None:
            nodes.append(n if ins == n.inputs else Node(n.prim, ins, n.params, n.outputs, n.site))
        else:
            _splice(body, ins, n.outputs, env, nodes, consts, memo, n.site)
    outputs = [env.get(v, v) if isinstance(v, Var) else v for v in graph.outputs]
    return graph.replace(nodes=nodes, outputs=outputs, consts=consts)


def decomposition_graph(node: Node) -> Graph:
    """The decomposition of `node`'s op, with its params, traced on its operands' avals."""
    from ..graph import trace

    def decomposition(*xs: Any) -> Any:
        return node.prim.decomposition(*xs, **node.params)

    return trace(decomposition, *[v.aval for v in node.inputs])


def _const_var(v: Var, value: Any, consts: dict, memo: dict) -> Var:
    """The outer const var holding `value` (one per tensor object however often inlined)."""
    hit = memo.get(id(value))
    if hit is None:
        nv = Var(v.aval)
        consts[nv] = value
        memo[id(value)] = hit = (nv, value)  # keeps value alive so its id stays unique
    return hit[0]


__all__ = ["FUSABLE", "decomposition_graph", "inline_calls", "inline_decompositions"]
