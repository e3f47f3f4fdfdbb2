"""ReLU's selects as torch's threshold kernels, and the pass that lets its backward use one.

``relu(x) = where(x <= 0, 0, x)`` traces to ``m = le(x, c); y = select(m, a, x)`` and its
gradient to ``select(m, 0, g)``. On the CPU, torch's comparisons writing bool are scalar
loops (``x <= 0`` on 128x512 float32: ~40 us on two threads), and a select on a bool mask
is a branch per element or three bitwise passes (~40 us), where ``torch.threshold(x, c, a)``
(``x <= c ? a : x``) takes ~8 us and ``threshold_backward(g, x, c)`` (``x <= c ? 0 : g``)
~18 us. Both compute exactly the select's values (a copy of an operand or of the constant),
so the bits are the nodes' own.

- `threshold_pattern` finds such a select in a fused group; the torch `fused` kernel
  (fusion.py) then runs the threshold kernel and skips the comparison when nothing else
  reads it.
- `recompute_masks`, a compiler pass before fusion, gives the gradient's select its own
  ``le(x, c)``: the mask was computed in the forward group and kept as a bool array for the
  backward one; with its own copy, the backward group reads ``x`` instead (kept in its
  place, 4 bytes an element against the mask's 1) and runs ``threshold_backward``. Only on
  torch devices, only where the select cannot join the comparison's group anyway (a
  non-elementwise node, a product, lies between them). The copy and the select leave the
  pass as one `fused` node, which the fusion pass may grow but not merge into the forward
  group.
"""

from __future__ import annotations

import math
from typing import Any

PASS_POSITION = 650.0
"""After layout (600), before fusion (700)."""


UNIFORM_CHECK = 1 << 16
"""Dense constants up to this many elements are compared element by element (bits) to tell
whether they hold one value; larger ones count only when stored as a stride-0 view."""


def uniform_value(v: Any, consts: dict) -> float | None:
    """The value of float constant `v` when every element holds it, bit for bit (0-d, a
    stride-0 view, or a small array of equal elements); else None."""
    c = consts.get(v)
    if c is None or not v.aval.dtype.is_floating:
        return None
    buf = c._buf
    if buf.dim() and any(buf.stride()):
        if not 0 < buf.numel() <= UNIFORM_CHECK:
            return None
        import torch

        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[buf.element_size()]
        flat = buf.reshape(-1).view(ints)
        if not bool((flat == flat[0]).all()):
            return None
    elif buf.numel() == 0:
        return None
    return float(buf[(0,) * buf.dim()].item())


def threshold_pattern(node: Any, producer: dict, consts: dict) -> tuple | None:
    """For ``select(le(x, c), a, b)`` with uniform float constants c and a, and x of the
    select's own shape and dtype: ``("threshold", x, c, a)`` where b is x, or
    ``("threshold_backward", b, x, c)`` where a is +0.0; else None. `producer` maps a var
    to the node computing it (in the same group or graph)."""
    if node.prim.name != "select" or len(node.inputs) != 3:
        return None
    m, a, b = node.inputs
    cmp = producer.get(m)
    if cmp is None or cmp.prim.name != "le" or len(cmp.inputs) != 2:
        return None
    x, c = cmp.inputs
    out = node.outputs[0].aval
    if x.aval.shape != out.shape or x.aval.dtype != out.dtype or b.aval.shape != out.shape:
        return None
    cv, av = uniform_value(c, consts), uniform_value(a, consts)
    if cv is None or av is None:
        return None
    if b is x:
        return ("threshold", x, cv, av)
    if av == 0.0 and math.copysign(1.0, av) > 0 and b.aval.dtype == out.dtype:
        return ("threshold_backward", b, x, cv)
    return None


def _on_torch(node: Any) -> bool:
    from tenferro_runtime.passes.fusion import node_device

    dev = node_device(node)
    return dev is not None and getattr(dev.backend, "name", None) == "torch"


def _fusible(node: Any) -> bool:
    from tenferro_runtime.passes.fusion import FUSIBLE

    return node.prim.category in FUSIBLE and not node.prim.effects


def recompute_masks(graph: Any) -> Any:
    """`graph` where each select of the threshold-backward form on a torch device that
    cannot be fused with its mask's comparison reads a copy of that comparison made just
    before it (see the module docstring)."""
    from tenferro_runtime.graph import Node, Var

    nodes = graph.nodes
    producer = {o: n for n in nodes for o in n.outputs}
    index = {id(n): i for i, n in enumerate(nodes)}
    bit: dict[int, int] = {}  # node index of a candidate comparison -> its bit
    for i, n in enumerate(nodes):
        if n.prim.name == "le" and _on_torch(n) and uniform_value(n.inputs[1], graph.consts) is not None:
            bit[i] = 1 << len(bit)
    if not bit:
        return graph
    reach = [0] * len(nodes)  # comparisons with a path to the node
    barred = [0] * len(nodes)  # ... with a path through a node that cannot be fused
    copies: dict[int, Any] = {}  # select index -> its new (comparison node, select node)
    for i, n in enumerate(nodes):
        for v in n.inputs:
            p = producer.get(v)
            if p is None:
                continue
            j = index[id(p)]
            reach[i] |= reach[j] | bit.get(j, 0)
            barred[i] |= barred[j] | (reach[j] if not _fusible(p) else 0)
        pattern = threshold_pattern(n, producer, graph.consts) if _on_torch(n) else None
        if pattern is None or pattern[0] != "threshold_backward":
            continue
        j = index[id(producer[n.inputs[0]])]
        if j in bit and barred[i] & bit[j]:
            cmp = nodes[j]
            mask = Var(cmp.outputs[0].aval)
            copies[i] = (Node(cmp.prim, list(cmp.inputs), dict(cmp.params), [mask], cmp.site),
                         Node(n.prim, [mask, *n.inputs[1:]], n.params, n.outputs, n.site))
    if not copies:
        return graph
    from tenferro_runtime.passes.fusion import fuse_groups

    out: list = []
    pairs = []
    for i, n in enumerate(nodes):
        if i in copies:
            pairs.append([len(out), len(out) + 1])
        out += copies[i] if i in copies else [n]
    # fused now: left to the fusion pass, the copy would join its operand's (forward) group
    return fuse_groups(graph.replace(nodes=out), pairs)


__all__ = ["PASS_POSITION", "recompute_masks", "threshold_pattern", "uniform_value"]
