"""Primitives whose parameter is a Graph: `call` (a compiled function) and `fused` (a group of
elementwise and broadcast ops the fusion pass merged).

Both are opaque to eager dispatch (no backend registers a kernel for `call`; a backend may
register one for `fused`, and otherwise the group runs node by node through its
decomposition). Their output avals are the graph's, so no shape rule is repeated. `call`'s
JVP and transpose rules live in tenferro_ad (they derive new graphs from the callee's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenferro_core.avals import Aval
from tenferro_core.errors import ArgumentError, ShapeError
from tenferro_core.primitive import REQUIRED, Primitive


class GraphPrimitive(Primitive):
    """A primitive whose output avals are those of the graph in its params."""

    def __init__(self, name: str, key: str, run: Any, *, category: str, doc: str):
        super().__init__(name, _no_rule, params={key: (_graph_param(key), REQUIRED)}, nin=None,
                         multiple_results=True, decomposition=run, category=category, doc=doc)
        self.key = key

    def graph_of(self, params: dict) -> Any:
        value = params[self.key]
        return value.graph if self.key == "fn" else value

    def abstract_eval(self, avals: Sequence[Aval], params: Any) -> tuple[Aval, ...]:
        graph = self.graph_of(params)
        want = tuple(v.aval for v in graph.inputs)
        if tuple(avals) != want:
            raise ShapeError(
                f"{self.name}: operands {[a.str_short() for a in avals]} do not match the graph's "
                f"inputs {[a.str_short() for a in want]}"
            )
        return tuple(v.aval if hasattr(v, "aval") else _aval_of(v) for v in graph.outputs)


FOLD_MAX = 1 << 16
"""Elements: a node whose results are larger is recomputed rather than kept as a constant."""


def _inner_graphs(node: Any) -> tuple:
    """The graphs a node holds: a `call`/`fused` graph, or control flow's bodies."""
    prim = node.prim
    if isinstance(prim, GraphPrimitive):
        return (prim.graph_of(node.params),)
    subgraphs = getattr(prim, "subgraphs", None)  # control flow (control_flow_prims)
    return tuple(subgraphs(node.params)) if subgraphs is not None else ()


def pinned(node: Any) -> bool:
    """True for a node no pass or plan may merge, drop or evaluate early: effectful, random,
    or holding a graph (a `call`/`fused` graph, a loop body) with such a node."""
    prim = node.prim
    if prim.effects or prim.category == "random":
        return True
    return any(pinned(m) for g in _inner_graphs(node) for m in g.nodes)


def effectful(node: Any) -> bool:
    """True for a node DCE must keep: effectful, or holding a graph with such a node."""
    return node.prim.effects or any(effectful(m) for g in _inner_graphs(node) for m in g.nodes)


def foldable(node: Any, max_elements: int = FOLD_MAX) -> bool:
    """True for a node that may run once, ahead of time, when all its inputs are constants
    (results of at most `max_elements` elements in all): the one rule the `fold` pass and a
    plan's build both follow."""
    return (not pinned(node) and not getattr(node.prim, "loops", False)  # control flow: never
            and sum(v.aval.size for v in node.outputs) <= max_elements)


def _aval_of(value: Any) -> Aval:
    return value._aval


def _no_rule(*avals: Any, **params: Any) -> Any:  # GraphPrimitive.abstract_eval replaces it
    raise AssertionError("unreachable")


def _graph_param(key: str) -> Any:
    def validate(prim: str, name: str, v: Any) -> Any:
        from .graph import Graph

        ok = isinstance(v, Graph) if key == "graph" else isinstance(getattr(v, "graph", None), Graph)
        if not ok:
            what = "a Graph" if key == "graph" else "a compiled callee (tenferro_runtime.compiled.Callee)"
            raise ArgumentError(f"{prim}: parameter {name!r} expects {what}, got {type(v).__name__}")
        return v

    return validate


def _run_call(*args: Any, fn: Any) -> tuple:
    """`call` evaluated eagerly: the callee's executable on the operands' buffers."""
    return tuple(fn.run(args))


def _run_fused(*args: Any, graph: Any) -> tuple:
    """`fused` on a backend without a fused kernel: its nodes, one by one."""
    from .graph import eval_graph

    return tuple(eval_graph(graph, *args))


call_p = GraphPrimitive(
    "call", "fn", _run_call, category="extension",
    doc="Run a compiled function's graph (params: fn, the Callee holding the graph).")
fused_p = GraphPrimitive(
    "fused", "graph", _run_fused, category="elementwise",
    doc="A group of elementwise and broadcast nodes run as one (params: graph, the group).")

BY_NAME = {p.name: p for p in (call_p, fused_p)}

class GroupKernels:
    """A backend's `fused` kernel from ``build(group graph) -> (run(*bufs) -> bufs, source)``,
    the generated code kept in the group graph's derived data under `key`: `kernel` is the
    kernel to register, `specialized(graph)` the kernel for one group (a backend's
    `specialize` makes it when the group's dispatch entry is built, so a call does no lookup),
    `source(graph)` the generated code (for debugging)."""

    def __init__(self, key: str, build: Any):
        self.key, self.build = key, build

    def code(self, graph: Any) -> tuple:
        """(run(*bufs) -> bufs, its source) for `graph`, built once per group graph."""
        return graph.derived(self.key, lambda: self.build(graph))

    def kernel(self, *bufs: Any, graph: Any) -> tuple:
        """The group `graph`'s outputs on `bufs`, one buffer each."""
        return self.code(graph)[0](*bufs)

    def specialized(self, graph: Any) -> Any:
        run = self.code(graph)[0]

        def fused_group(*bufs: Any, graph: Any) -> tuple:
            return run(*bufs)

        fused_group.without_params = run  # type: ignore[attr-defined]  # (plan_codegen)
        return fused_group

    def source(self, graph: Any) -> str:
        return self.code(graph)[1]

    @staticmethod
    def returned(graph: Any, names: dict, glb: dict) -> str:
        """The generated ``return (...)`` of the group's outputs: `names` of its values,
        constant outputs bound in the code's globals `glb`."""
        from .graph import Var  # graph.py imports this module

        res = []
        for j, v in enumerate(graph.outputs):
            if not isinstance(v, Var):  # a constant output
                glb[f"o{j}"] = v._buf
            res.append(names[v] if isinstance(v, Var) else f"o{j}")
        return f"return ({', '.join(res)}{',' if len(res) == 1 else ''})"


__all__ = ["BY_NAME", "GraphPrimitive", "GroupKernels", "call_p", "effectful", "fused_p"]
