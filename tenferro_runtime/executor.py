"""Executables: an optimized Graph made runnable on one device.

In order of preference: the device's backend runs the whole graph its own way
(`Backend.compile(graph, device)`, optional; it may decline with None); the generic plan
executor (plan.py: kernels on buffer slots, no per-op dispatch); node by node through
`bind` where no plan can be built (a graph spanning devices, an op with only a
decomposition). A backend's compile that raises is reported once with a warning and the
generic plan runs instead.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import tracing
from .graph import Graph, Var, eval_graph
from .plan import build_plan, wrap_outputs


class BackendCompileWarning(UserWarning):
    """A backend's compile(graph, device) failed; the generic plan executor runs instead."""


class NodeByNode:
    """Runs a graph through `bind`, below any observer (the caller reports the call)."""

    __slots__ = ("graph",)
    kind = "node-by-node"

    def __init__(self, graph: Graph):
        self.graph = graph

    def run(self, args: tuple) -> list:
        token = tracing._STACK.set(tracing.BOTTOM)
        try:
            return eval_graph(self.graph, *args)
        finally:
            tracing._STACK.reset(token)


class PlanExecutable:
    """The generic executor: a Plan's kernels on buffers."""

    __slots__ = ("plan",)
    kind = "plan"

    def __init__(self, plan: Any):
        self.plan = plan

    def run(self, args: tuple) -> list:
        return self.plan.run(args)


class BackendExecutable:
    """What a backend's compile(graph, device) returned: a function of input buffers giving
    output buffers, wrapped back into tensors of the graph's output avals."""

    __slots__ = ("fn", "wrap")
    kind = "backend"

    def __init__(self, fn: Any, graph: Graph):
        self.fn = fn
        self.wrap = [(v.aval, False) if isinstance(v, Var) else (v, True) for v in graph.outputs]

    def run(self, args: tuple) -> list:
        return wrap_outputs(self.fn([a._buf for a in args]), self.wrap)


def graph_device(graph: Graph) -> Any:
    """The one device every value of `graph` lives on, or None."""
    devices = {id(v.aval.device): v.aval.device for v in graph.inputs}
    devices.update((id(v.aval.device), v.aval.device) for v in graph.consts)
    for n in graph.nodes:
        devices.update((id(v.aval.device), v.aval.device) for v in n.outputs)
    return next(iter(devices.values())) if len(devices) == 1 else None


def build_executable(graph: Graph) -> Any:
    """The best executable for an optimized graph (see the module docstring)."""
    device = graph_device(graph)
    if device is not None:
        compile_ = getattr(device.backend, "compile", None)
        if compile_ is not None:
            try:
                fn = compile_(graph, device)
            except Exception as exc:
                warnings.warn(
                    f"backend {device.backend.name!r} could not compile a graph of "
                    f"{len(graph.nodes)} node(s) ({type(exc).__name__}: {exc}); running it with "
                    f"the generic plan executor", BackendCompileWarning, stacklevel=3)
                fn = None
            if fn is not None:
                return BackendExecutable(fn, graph)
    plan = build_plan(graph)
    if plan is not None:
        return PlanExecutable(plan)
    return NodeByNode(graph)


__all__ = ["BackendCompileWarning", "BackendExecutable", "NodeByNode", "PlanExecutable",
           "build_executable", "graph_device"]
