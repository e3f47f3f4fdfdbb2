"""`stop_gradient`: the identity whose derivatives of every order are zero."""

from __future__ import annotations

from typing import Any

from tenferro_core.extension import define_op

from .ad_util import Zero


def _rule(x):
    return x.shape, x.dtype


def _identity(x):
    """A new tensor on x's buffer (a distinct value, so tapes see a new node); traced (a pass
    inlining decompositions), the value itself."""
    from tenferro_runtime.tensor import Tensor

    if type(x) is not Tensor:
        return x
    return Tensor._new(x._buf, x._aval)


stop_gradient_p = define_op(
    "tenferro_ad.stop_gradient.v1", _rule, decomposition=_identity,
    doc="Identity in value; zero tangent (so no gradient flows through it, at any order).",
)


def _jvp(primals, tangents):
    (x,) = primals
    return stop_gradient_p.bind(x), Zero(x._aval)


def stop_gradient(x: Any) -> Any:
    """x, with derivatives of every order treated as zero."""
    from tenferro_runtime.array_api import asarray

    return stop_gradient_p.bind(asarray(x))


def strip_stop_gradient(graph: Any) -> Any:
    """The compiler pass that reads x where stop_gradient(x) was read: in an optimized graph,
    which only runs (transformations differentiate the traced graph), it is the identity,
    and without it code generators see the ops around it as one group."""
    from tenferro_runtime.graph import Var

    sub: dict = {}
    nodes = []
    for n in graph.nodes:
        ins = [sub.get(v, v) for v in n.inputs]
        if n.prim is stop_gradient_p:
            sub[n.outputs[0]] = ins[0]
            continue
        nodes.append(n if ins == n.inputs else type(n)(n.prim, ins, n.params, n.outputs, n.site))
    if not sub:
        return graph
    outputs = [sub.get(v, v) if isinstance(v, Var) else v for v in graph.outputs]
    return graph.replace(nodes=nodes, outputs=outputs)
