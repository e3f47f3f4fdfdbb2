"""Reverse mode: transpose a linear Graph with the registered ``transpose`` rules."""

from __future__ import annotations

from typing import Any

from tenferro_runtime.graph import Graph, Var

from .ad_util import UndefinedPrimal, Zero, add_tangents, is_zero
from .jvp import missing_rule


def backward_pass(graph: Graph, cts_out: list[Any]) -> list[Any]:
    """Cotangents of a linear graph's inputs given cotangents of its outputs (Zero allowed).

    Every node of a linearized graph is linear in its non-constant inputs, which
    are passed to the transpose rule as UndefinedPrimal markers. Nodes no cotangent
    reaches are skipped, except those of primitives with `effects` (they get Zero).
    """
    ct_env: dict[Var, Any] = {}

    def accumulate(v: Any, ct: Any) -> None:
        if isinstance(v, Var) and v not in graph.consts and not is_zero(ct):
            ct_env[v] = add_tangents(ct_env[v], ct) if v in ct_env else ct

    for v, ct in zip(graph.outputs, cts_out):
        accumulate(v, ct)
    for node in reversed(graph.nodes):
        cts = [ct_env.pop(v, None) for v in node.outputs]
        if all(ct is None for ct in cts) and not node.prim.effects:
            continue  # no cotangent reaches it; an effectful node is transposed anyway
        cts = [Zero(v.aval) if ct is None else ct for v, ct in zip(node.outputs, cts)]
        operands = [graph.consts[v] if v in graph.consts else UndefinedPrimal(v.aval) for v in node.inputs]
        runtime = node.outputs[0].aval.device.runtime
        rule = runtime.rule("transpose", node.prim)
        if rule is None:
            raise missing_rule(node.prim, "transpose", runtime=runtime)
        ct_arg = tuple(cts) if node.prim.multiple_results else cts[0]
        in_cts = rule(ct_arg, *operands, **node.params)
        for v, op, ct in zip(node.inputs, operands, in_cts):
            if isinstance(op, UndefinedPrimal) and ct is not None:
                accumulate(v, ct)
    return [ct_env.get(v, Zero(v.aval)) for v in graph.inputs]
