"""Constant folding: pure nodes whose inputs are all constants (or that have none, such as
`full` and `iota`) run now, on the eager interpreter; their results become graph constants."""

from __future__ import annotations

from typing import Any

from ..graph import Graph, Var
from ..graph_prims import FOLD_MAX, foldable
from ..tensor import Tensor
from ..tracing import eager_only
from .cse import _key


def fold_constants(graph: Graph, max_elements: int = FOLD_MAX) -> Graph:
    """`graph` with every `foldable` node whose inputs are all constants replaced by
    constants (results of at most `max_elements` elements); a node whose evaluation raises
    stays. Unused constants go. Repeated nodes fold to the same tensors (so CSE can merge
    their constants)."""
    consts = dict(graph.consts)
    nodes = []
    done: dict = {}
    for n in graph.nodes:
        if not foldable(n, max_elements) or not all(type(consts.get(v)) is Tensor for v in n.inputs):
            nodes.append(n)
            continue
        key = _key(n)
        out = done.get(key) if key is not None else None
        if out is None:
            out = _evaluate(n, [consts[v] for v in n.inputs])
            if key is not None and out is not None:
                done[key] = out
        if out is None:
            nodes.append(n)
        else:
            consts.update(zip(n.outputs, out))
    used = {v for n in nodes for v in n.inputs} | {v for v in graph.outputs if isinstance(v, Var)}
    consts = {v: c for v, c in consts.items() if v in used}
    return graph.replace(nodes=nodes, consts=consts)


def _evaluate(node: Any, args: list) -> list | None:
    """`node` bound on `args` under the eager interpreter alone (no trace or tape sees it);
    None if that raises or gives other avals than the node's."""
    try:
        with eager_only():
            out = node.prim.bind(*args, **node.params)
    except Exception:
        return None
    out = list(out) if node.prim.multiple_results else [out]
    if len(out) != len(node.outputs) or any(
            type(t) is not Tensor or t._aval is not v.aval for t, v in zip(out, node.outputs)):
        return None
    return out


__all__ = ["fold_constants"]
