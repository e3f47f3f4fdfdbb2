"""Layout choice: each convolution in the layout its backend declares faster.

A backend MAY declare ``preferred_conv_layout`` ("channels_first" or "channels_last"). A
`conv_general` node whose device's backend prefers the other layout becomes
``transpose(lhs) -> conv_general(layout=preferred) -> transpose(out)``, so the graph keeps
its signature; transposes between consecutive convs are left for simplification to cancel.
Where anything but a transpose reads the result, a `copy` after the transpose back gives it
the row-major layout the original conv gave: BLAS products read operands of other layouts
through other kernels (a complex matrix-vector product differed in its last bit). The numpy
kernels of the two layouts are bitwise equal (one code path); torch's are not (mkldnn/cuDNN
sum in another order per memory format), so on torch the rewrite changes float results by
rounding, and torch declares channels_first.
"""

from __future__ import annotations

from tenferro_core import catalog

from ..graph import Graph, Node, Var

LAYOUTS = ("channels_first", "channels_last")


def preferred_layout(device) -> str | None:
    """The conv layout `device`'s backend declares faster, or None."""
    pref = getattr(getattr(device, "backend", None), "preferred_conv_layout", None)
    return pref if pref in LAYOUTS else None


def _transpose(x: Var, perm: tuple[int, ...], site: str) -> tuple[Node, Var]:
    prim = catalog.transpose
    avals = (x.aval,)
    params = prim.check_params({"permutation": perm}, avals)
    out = Var(prim.abstract_eval(avals, params)[0])
    return Node(prim, [x], params, [out], site), out


def _copy(x: Var, out: Var, site: str) -> Node:
    prim = catalog.copy
    return Node(prim, [x], prim.check_params({}, (x.aval,)), [out], site)


def _rewrite(node: Node, layout: str, row_major: bool) -> list[Node]:
    lhs, rhs = node.inputs
    nd = lhs.aval.ndim
    to_last, to_first = (0, *range(2, nd), 1), (0, nd - 1, *range(1, nd - 1))
    into, back = (to_last, to_first) if layout == "channels_last" else (to_first, to_last)
    t_in, x = _transpose(lhs, into, node.site)
    params = node.prim.check_params({**node.params, "layout": layout}, (x.aval, rhs.aval))
    y = Var(node.prim.abstract_eval((x.aval, rhs.aval), params)[0])
    conv = Node(node.prim, [x, rhs], params, [y], node.site)
    t_out, z = _transpose(y, back, node.site)
    if row_major:
        return [t_in, conv, t_out, _copy(z, node.outputs[0], node.site)]
    t_out.outputs = list(node.outputs)  # the original output var: consumers are unchanged
    return [t_in, conv, t_out]


def choose_conv_layout(graph: Graph) -> Graph:
    """`graph` with every conv_general in the layout its backend prefers (see module doc)."""
    nodes, changed, others = [], False, None
    for node in graph.nodes:
        if node.prim.name == "conv_general":
            want = preferred_layout(node.inputs[0].aval.device)
            if want is not None and want != node.params["layout"]:
                if others is None:  # values read by something other than a transpose
                    others = {v for n in graph.nodes if n.prim is not catalog.transpose for v in n.inputs}
                    others.update(graph.outputs)
                nodes.extend(_rewrite(node, want, node.outputs[0] in others))
                changed = True
                continue
        nodes.append(node)
    return graph.replace(nodes=nodes) if changed else graph


__all__ = ["choose_conv_layout", "preferred_layout"]
