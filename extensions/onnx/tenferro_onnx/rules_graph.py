"""Lowering rules of graph-holding primitives (`call`, `fused`, checkpoints: inlined; `cond`,
`while`, `scan`: ONNX If and Loop with sub-graphs), of tenferro_ad's and the runtime's
bookkeeping ops, and of the op families (einsum, fft, linalg)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tenferro_core import dtypes as D

from ._builder import Builder, onnx_dtype
from .errors import ExportError


def _vi(name: str, aval: Any) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, onnx_dtype(aval.dtype), list(aval.shape))


def _inline(graph_of: Any) -> Any:
    def rule(b: Builder, node: Any, ins: list[str]) -> list[str]:
        from .lower import lower_graph

        graph = graph_of(node)
        return lower_graph(b, graph, dict(zip(graph.inputs, ins)))
    return rule


def _subgraph(b: Builder, name: str, inputs: list, body: Any) -> Any:
    """An ONNX GraphProto: `inputs` (name, aval) pairs, `body(sub_builder)` returns
    (output names, avals); outputs not made inside get an Identity."""
    from onnx import helper

    sb = b.sub()
    outs, avals = body(sb)
    made = {o for n in sb.nodes for o in n.output}
    final = [o if o in made else sb.op("Identity", [o]) for o in outs]
    return helper.make_graph(sb.nodes, b.fresh(name), [_vi(n, a) for n, a in inputs],
                             [_vi(n, a) for n, a in zip(final, avals)])


def _out_avals(node: Any) -> list:
    return [v.aval for v in node.outputs]


def cond(b: Builder, node: Any, ins: list[str]) -> list[str]:
    from .lower import lower_graph

    branches = node.params["branches"]
    index, ops = ins[0], ins[1:]
    avals = _out_avals(node)
    known = b.constant_value(index)
    if known is not None:  # the branch itself: onnxruntime 1.32 crashed folding a constant If
        g = branches[min(max(int(known), 0), len(branches) - 1)].graph  # whose branch held loops
        return lower_graph(b, g, dict(zip(g.inputs, ops)))

    def chain(sb: Builder, k: int) -> tuple[list[str], list]:
        g = branches[k].graph
        if k == len(branches) - 1:
            return lower_graph(sb, g, dict(zip(g.inputs, ops))), avals
        pred = sb.op("LessOrEqual", [index, sb.scalar(k, D.int32)])
        then = _subgraph(sb, "then", [], lambda s: (lower_graph(s, g, dict(zip(g.inputs, ops))), avals))
        other = _subgraph(sb, "else", [], lambda s: chain(s, k + 1))
        outs = sb.op("If", [pred], outs=len(avals), then_branch=then, else_branch=other, hint="if")
        outs = outs if isinstance(outs, list) else [outs]
        return [sb.settype(o, a.dtype) for o, a in zip(outs, avals)], avals

    return chain(b, 0)[0]


def while_(b: Builder, node: Any, ins: list[str]) -> list[str]:
    from .lower import lower_graph

    p = node.params
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    cg, bg = p["cond"].graph, p["body"].graph
    avals = _out_avals(node)
    first = lower_graph(b, cg, dict(zip(cg.inputs, cconsts + carry)))[0]
    it, c_in = b.settype(b.fresh("iter"), D.int64), b.settype(b.fresh("cond_in"), D.bool_)
    names = [b.settype(b.fresh("carry"), a.dtype) for a in avals]

    def body(sb: Builder) -> tuple[list[str], list]:
        new = lower_graph(sb, bg, dict(zip(bg.inputs, bconsts + names)))
        c = lower_graph(sb, cg, dict(zip(cg.inputs, cconsts + new)))[0]
        return [c, *new], [cg.outputs[0].aval, *avals]

    g = _subgraph(b, "while_body", [(it, _scalar(D.int64)), (c_in, _scalar(D.bool_))]
                  + list(zip(names, avals)), body)
    if not carry:
        raise ExportError(f"while (at {node.site}): a loop without a carry has no effect to export")
    outs = b.op("Loop", ["", first, *carry], outs=len(carry), body=g, hint="while")
    outs = outs if isinstance(outs, list) else [outs]
    return [b.settype(o, a.dtype) for o, a in zip(outs, avals)]


class _ScalarAval:
    def __init__(self, dtype: Any, shape: tuple = ()):
        self.dtype, self.shape = dtype, shape


def _scalar(dtype: Any) -> Any:
    return _ScalarAval(dtype)


def scan(b: Builder, node: Any, ins: list[str]) -> list[str]:
    from .lower import lower_graph

    p = node.params
    n_consts, n_carry, length, rev = p["num_consts"], p["num_carry"], p["length"], p["reverse"]
    consts, init, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    bg = p["body"].graph
    avals = _out_avals(node)
    carry_avals, y_avals = avals[:n_carry], avals[n_carry:]
    if length == 0:
        return ([b.op("Identity", [c]) for c in init]
                + [b.full(0, a.dtype, a.shape) for a in y_avals])
    it, c_in = b.settype(b.fresh("iter"), D.int64), b.settype(b.fresh("cond_in"), D.bool_)
    names = [b.settype(b.fresh("carry"), a.dtype) for a in carry_avals]
    y_inner = [_ScalarAval(a.dtype, a.shape[1:]) for a in y_avals]

    def body(sb: Builder) -> tuple[list[str], list]:
        i = sb.op("Sub", [sb.scalar(length - 1, D.int64), it]) if rev else it
        x_i = [sb.op("Gather", [x, i], axis=0) for x in xs]
        outs = lower_graph(sb, bg, dict(zip(bg.inputs, consts + names + x_i)))
        return [sb.op("Identity", [c_in]), *outs], [_scalar(D.bool_), *carry_avals, *y_inner]

    g = _subgraph(b, "scan_body", [(it, _scalar(D.int64)), (c_in, _scalar(D.bool_))]
                  + list(zip(names, carry_avals)), body)
    outs = b.op("Loop", [b.scalar(length, D.int64), b.scalar(True, D.bool_), *init],
                outs=len(avals), body=g, hint="scan")
    outs = outs if isinstance(outs, list) else [outs]
    outs = [b.settype(o, a.dtype) for o, a in zip(outs, avals)]
    if rev:
        big = np.iinfo(np.int64).min
        outs = outs[:n_carry] + [b.op("Slice", [y, b.ints([-1]), b.ints([big]), b.ints([0]), b.ints([-1])])
                                 for y in outs[n_carry:]]
    return outs


def _identity(b: Builder, node: Any, ins: list[str]) -> Any:
    return b.op("Identity", ins[:1])


def _barrier(b: Builder, node: Any, ins: list[str]) -> list[str]:
    return [b.op("Identity", [x]) for x in ins[:node.params["n"]]]


def _dropped(b: Builder, node: Any, ins: list[str]) -> list[str]:
    return []  # debug_print: its effect (a host print) has no ONNX counterpart


def _custom_call(b: Builder, node: Any, ins: list[str]) -> list[str]:
    from tenferro_runtime.graph import trace
    from tenferro_runtime.pytree import tree_flatten, tree_unflatten

    from .lower import lower_graph

    spec = node.params["spec"]

    def flat(*leaves: Any) -> list:
        return tree_flatten(spec.fn.fun(*tree_unflatten(spec.in_tree, list(leaves))))[0]

    g = trace(flat, *[v.aval for v in node.inputs])
    return lower_graph(b, g, dict(zip(g.inputs, ins)))


def _contract(b: Builder, node: Any, ins: list[str]) -> str:
    from .rules_elementwise import _real_only

    _real_only(node)
    spec = node.params["spec"]
    dt = node.inputs[0].aval.dtype
    out = node.outputs[0].aval
    if any(0 in v.aval.shape for v in node.inputs):  # an empty operand: sums of nothing
        return b.full(0, out.dtype, out.shape)
    if len(ins) == 1 and "->" in spec and spec.split("->")[0] == spec.split("->")[1]:
        return b.op("Identity", ins)
    if dt.kind in "iu" and dt not in (D.int32, D.int64):
        r = b.op("Einsum", [b.cast(x, D.int64) for x in ins], equation=spec)
        return b.cast(r, dt)
    if dt == D.bool_:
        raise ExportError(f"{node.prim.name} (at {node.site}): bool einsum has no ONNX lowering")
    return b.op("Einsum", ins, equation=spec)


def _det(b: Builder, node: Any, ins: list[str]) -> str:
    from .rules_elementwise import _real_only

    _real_only(node)
    a = node.inputs[0].aval
    n = a.shape[-1]
    if n == 0:
        return b.full(1, a.dtype, a.shape[:-2])
    return b.op("Det", ins)


def _graph_param(key: str) -> Any:
    return lambda node: (node.params[key].graph if key == "fn" else node.params[key])


RULES: dict[str, Any] = {
    "call": _inline(_graph_param("fn")), "fused": _inline(_graph_param("graph")),
    "tenferro_ad.checkpoint.v1": _inline(_graph_param("fn")),
    "cond": cond, "while": while_, "scan": scan,
    "tenferro_ad.stop_gradient.v1": _identity, "tenferro_ad.remat_barrier.v1": _barrier,
    "tenferro_ad.custom_call.v1": _custom_call, "tenferro_runtime.debug_print.v1": _dropped,
    "tenferro_einsum.contract.v1": _contract, "tenferro_linalg.det.v1": _det,
}


__all__ = ["RULES"]
