"""FLOPs and bytes moved of ops and traced graphs, from the ``cost`` rules.

A core primitive's rule comes from `tenferro_core.catalog.cost.CORE_COST_RULES` unless a
plugin registered its own with ``registry.add_rule("cost", op, fn)`` (a backend that
knows its kernels better, say); an extension op needs a rule from its plugin, or asking
its cost is a `MissingRuleError` that says how to register one. Memory planning,
scheduling and the energy estimate read these (DESIGN.md sections 7 and 8).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tenferro_core.avals import Aval
from tenferro_core.catalog.cost import CORE_COST_RULES, ZERO, Cost
from tenferro_core.errors import MissingRuleError, PluginError
from tenferro_core.primitive import Primitive

from .control_flow_prims import ControlFlowPrimitive, control_flow_cost
from .graph_prims import GraphPrimitive

if TYPE_CHECKING:
    from .graph import Graph
    from .runtime import Runtime


def cost_rule(runtime: Runtime, prim: Primitive) -> Any:
    """The cost rule of `prim` in `runtime`: a plugin's, else the core table's, else raise."""
    rule = runtime.rule("cost", prim)
    if rule is None and isinstance(prim, GraphPrimitive):  # call, fused: their graph's cost
        return lambda in_avals, out_avals, **params: graph_cost(prim.graph_of(params), runtime)
    if rule is None and isinstance(prim, ControlFlowPrimitive):  # cond, while, scan: their bodies'
        return lambda in_avals, out_avals, **params: control_flow_cost(prim, runtime, params)
    if rule is None and not prim.family:
        rule = CORE_COST_RULES.get(prim.name)
    if rule is None:
        raise MissingRuleError(
            f"no cost rule for {prim.name!r}: the plugin that defines it registers one with "
            f"registry.add_rule('cost', op, fn), where fn(in_avals, out_avals, **params) returns "
            f"tenferro_core.catalog.cost.Cost(flops, bytes)"
        )
    return rule


def op_cost(runtime: Runtime, prim: Primitive, in_avals: Sequence[Aval],
            out_avals: Sequence[Aval], params: Mapping[str, Any]) -> Cost:
    """The Cost of one application of `prim` (params in the form `check_params` returns)."""
    got = cost_rule(runtime, prim)(tuple(in_avals), tuple(out_avals), **params)
    if not (isinstance(got, tuple) and len(got) == 2
            and all(type(v) is int and v >= 0 for v in got)):
        raise PluginError(
            f"the cost rule of {prim.name!r} returned {got!r}; expected Cost(flops, bytes) of two "
            f"ints >= 0"
        )
    return Cost(*got)


def graph_cost(graph: Graph, runtime: Runtime | None = None) -> Cost:
    """The summed Cost of a traced graph's nodes (runtime: that of its avals' device)."""
    rt = graph.runtime if runtime is None else runtime
    total = ZERO
    for n in graph.nodes:
        total += op_cost(rt, n.prim, [v.aval for v in n.inputs], [v.aval for v in n.outputs],
                         n.params)
    return total


__all__ = ["Cost", "cost_rule", "graph_cost", "op_cost"]
