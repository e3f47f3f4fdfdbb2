"""Fused groups of one-element integer values as operators on NumPy scalars.

A random key's threefry rounds are a group of ~140 integer nodes (add, xor, shifts, and, or)
on 0-d values. Run as kernel calls, each node costs a call on a 0-d array (~1 us in NumPy;
~10 us per torch op, more for uint32, which torch computes through signed twins); as
operators on NumPy scalars (``x + y``, ``x << c``) it costs ~0.1 us. The operators are the
same C integer operations in the same types, wrapping on overflow, so the bits are those of
the kernels node by node (NumPy's, which the torch backend's kernels reproduce). Backends
use `scalar_group` in their `fused` kernels, with how their buffers cross to and from NumPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .graph_prims import GroupKernels

_BINARY = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|",
           "bitwise_xor": "^"}
_SHIFTS = {"shift_left": "<<", "shift_right": ">>"}
_SAME_VALUE = frozenset(("broadcast_in_dim", "reshape", "copy"))  # one element: the same value


def scalar_group(graph: Any, to_host: Any = None, from_host: Any = None) -> tuple[Any, str] | None:
    """(fused(*bufs) -> tuple of bufs, its source) for a group whose values all hold one
    integer element and whose nodes are the operators above (shifts by constant counts in
    [0, bits)), conversions between integer types and reshapes; None otherwise. `to_host`
    turns a buffer into a NumPy array and `from_host` a 0-d or one-element array into a
    buffer (None: the buffers are NumPy arrays)."""
    values = [*graph.inputs, *graph.consts, *(v for n in graph.nodes for v in n.outputs)]
    if not graph.nodes or any(v.aval.size != 1 or v.aval.dtype.numpy.kind not in "iu" for v in values):
        return None
    host = to_host or (lambda b: b)
    glb: dict[str, Any] = {"np": np, "_errstate": np.errstate, "_host": host,
                           "_wrap": from_host or (lambda a: a)}
    names: dict[Any, str] = {v: f"x{i}" for i, v in enumerate(graph.inputs)}
    lines = [f"x{i} = _host(b{i}).reshape(-1)[0]" for i in range(len(graph.inputs))]  # NumPy scalars
    for j, (v, c) in enumerate(graph.consts.items()):
        glb[f"c{j}"], names[v] = np.asarray(host(c._buf)).reshape(-1)[0], f"c{j}"
    for i, node in enumerate(graph.nodes):
        a = [names[x] for x in node.inputs]
        name = node.prim.name
        if name in _BINARY and len(a) == 2:
            lines.append(f"y{i} = {a[0]} {_BINARY[name]} {a[1]}")
        elif name in _SHIFTS and _constant_count(graph, node, host):
            lines.append(f"y{i} = {a[0]} {_SHIFTS[name]} {a[1]}")
        elif name == "convert":
            glb[f"t{i}"] = node.outputs[0].aval.dtype.numpy
            lines.append(f"y{i} = {a[0]}.astype(t{i})")  # astype's C cast, as the kernels'
        elif name in _SAME_VALUE and len(a) == 1:
            lines.append(f"y{i} = {a[0]}")
        else:
            return None
        names[node.outputs[0]] = f"y{i}"
    buffers = {v: f"_wrap(np.asarray({n})" + (f".reshape({v.aval.shape}))" if v.aval.shape else ")")
               for v, n in names.items()}
    lines.append(GroupKernels.returned(graph, buffers, glb))
    args = ", ".join(f"b{i}" for i in range(len(graph.inputs)))
    body = ["        " + ln for ln in lines]
    src = "\n".join([f"def fused({args}):", "    with _errstate(all='ignore'):", *body]) + "\n"
    exec(compile(src, f"<tenferro scalar group {id(graph):#x}>", "exec"), glb)
    return glb["fused"], src


def _constant_count(graph: Any, node: Any, host: Any) -> bool:
    """Whether a shift's count is a constant of the operand's dtype, in [0, bits)."""
    count = graph.consts.get(node.inputs[1])
    dtype = node.inputs[0].aval.dtype.numpy
    if count is None or count._aval.dtype.numpy != dtype:
        return False
    return 0 <= int(np.asarray(host(count._buf)).reshape(-1)[0]) < dtype.itemsize * 8


__all__ = ["scalar_group"]
