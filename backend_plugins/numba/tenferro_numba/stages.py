"""Fused groups with transcendental functions: generated loops around NumPy's own ufuncs.

A group whose nodes include a primitive without generated code (tanh, exp, log: NumPy's SIMD
loops are faster than LLVM's scalar libm calls and define the reference bits) is cut at each
such node: the nodes between two of them form a stage, one generated loop (codegen.py), and
the node itself runs the device's kernel on whole arrays. A GELU group over 262k elements
then makes three passes over memory (the argument of tanh, tanh, the product) where NumPy's
kernel made nine. Values that cross a cut are kept in arrays; the results are the NumPy
kernels' bits, as every part is.
"""

from __future__ import annotations

from typing import Any

from tenferro_runtime.graph import Graph, Var

from .codegen import CAST, EXACT, Unsupported, input_aliases

_IN_LOOPS = frozenset(EXACT) | {"convert", "clamp", "broadcast_in_dim", "full", "iota", "shift_left",
                                 "shift_right"}


def cuts(group: Graph) -> list[int]:
    """Indices of the nodes a loop has no code for (they run NumPy's kernel, on arrays or on
    0-d values alike)."""
    return [k for k, n in enumerate(group.nodes) if n.prim.name not in _IN_LOOPS]


def staged_kernel(group: Graph, device: Any, loop_kernel: Any) -> Any:
    """`(*input buffers) -> [output buffers]` for `group` cut at `cuts(group)`: each stage
    `loop_kernel(stage graph, device)`, each cut node the device's kernel. Raises Unsupported
    where a stage has no generated code or a cut node's dtype is not one loops handle."""
    from tenferro_runtime.eager import dispatch

    at = cuts(group)
    if not at:
        raise Unsupported("no node to cut at")
    for k in at:
        n = group.nodes[k]
        if len(n.outputs) != 1 or any(v.aval.dtype not in CAST for v in [*n.inputs, *n.outputs]):
            raise Unsupported(f"{n.prim.name} of {n.inputs[0].aval.dtype if n.inputs else '?'}")
    later_reads = _later_reads(group)
    steps: list = []  # ("loop", kernel, input vars, output vars) or ("node", fn, node)
    start = 0
    for k in [*at, len(group.nodes)]:
        nodes = group.nodes[start:k]
        if nodes:
            steps.append(_stage(group, nodes, k, later_reads, device, loop_kernel))
        if k < len(group.nodes):
            n = group.nodes[k]
            fn = dispatch(n.prim, tuple(v.aval for v in n.inputs), n.params, device)[0]
            steps.append(("node", fn, n))
        start = k + 1
    kernel = _runner(group, steps)
    made = {o for step in steps if step[0] == "loop" for o in step[3]}
    kernel.new_results = tuple(p for p, v in enumerate(group.outputs) if v in made)
    kernel.aliases = input_aliases(group)
    kernel.in_place, where = _in_place(group, steps)

    def in_place_form(pairs: tuple) -> Any:
        """The kernel with the stages that make outputs `pairs` name write them into
        those inputs (see `_in_place`)."""
        by_stage: dict[int, list] = {}
        for pair in pairs:
            s, stage_pair = where[pair]
            by_stage.setdefault(s, []).append(stage_pair)
        new = list(steps)
        for s, stage_pairs in by_stage.items():
            _, fn, ins, outs = steps[s]
            new[s] = ("loop", fn.in_place_form(tuple(stage_pairs)), ins, outs)
        return _runner(group, new)

    kernel.in_place_form = in_place_form
    return kernel


def _in_place(group: Graph, steps: list) -> tuple[dict, dict]:
    """({output position: inputs it may be written into}, {(output, input): (step, the
    stage's pair)}): a stage's in-place pair (codegen.in_place_candidates) of a group
    output and a group input that nothing after that stage reads."""
    last = _last_step_reads(steps)
    outputs = list(group.outputs)
    found: dict[int, list] = {}
    where: dict[tuple, tuple] = {}
    for s, step in enumerate(steps):
        if step[0] != "loop":
            continue
        _, fn, ins, outs = step
        for sp, sis in getattr(fn, "in_place", {}).items():
            v = outs[sp]
            if outputs.count(v) != 1:
                continue
            for si in sis:
                a = ins[si]
                if a in group.inputs and a not in outputs and last[a] == s:
                    p, i = outputs.index(v), group.inputs.index(a)
                    found.setdefault(p, []).append(i)
                    where[p, i] = (s, (sp, si))
    return found, where


def _last_step_reads(steps: list) -> dict:
    """var -> index of the last step reading it."""
    last: dict[Var, int] = {}
    for s, step in enumerate(steps):
        for v in (step[2] if step[0] == "loop" else step[2].inputs):
            last[v] = s
    return last


def _runner(group: Graph, steps: list) -> Any:
    """`(*input buffers) -> [output buffers]` running `steps` over the group's values."""
    consts = {v: c._buf for v, c in group.consts.items()}
    inputs, outputs = list(group.inputs), list(group.outputs)

    def kernel(*bufs: Any) -> list:
        env = dict(consts)
        env.update(zip(inputs, bufs))
        for step in steps:
            if step[0] == "loop":
                _, fn, ins, outs = step
                env.update(zip(outs, fn(*[env[v] for v in ins])))
            else:
                _, fn, n = step
                env[n.outputs[0]] = fn(*[env[v] for v in n.inputs], **n.params)
        return [env[v] for v in outputs]

    return kernel


def _later_reads(group: Graph) -> dict:
    """var -> index of the last node reading it (len(nodes) for the group's outputs)."""
    last: dict[Var, int] = {}
    for k, n in enumerate(group.nodes):
        for v in n.inputs:
            last[v] = k
    for v in group.outputs:
        last[v] = len(group.nodes)
    return last


def _stage(group: Graph, nodes: list, end: int, later_reads: dict, device: Any, loop_kernel: Any) -> tuple:
    """One stage's loop: the stage graph reads what its nodes need from outside it (group
    inputs and earlier values; constants stay constants) and returns what is read after it."""
    made = {o for n in nodes for o in n.outputs}
    ins: list[Var] = []
    for n in nodes:
        for v in n.inputs:
            if v not in made and v not in group.consts and v not in ins:
                ins.append(v)
    outs = [o for n in nodes for o in n.outputs if later_reads.get(o, -1) >= end]
    if not outs:
        raise Unsupported("a stage whose values nothing reads")
    used = {v for n in nodes for v in n.inputs}
    stage = Graph(inputs=ins, nodes=list(nodes), outputs=outs,
                  consts={v: c for v, c in group.consts.items() if v in used})
    return ("loop", loop_kernel(stage, device), ins, outs)


__all__ = ["cuts", "staged_kernel"]
