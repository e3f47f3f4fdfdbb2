"""The torch kernel for `fused`: a group's nodes as generated Python in which an elementwise
result is written in place into an intermediate of the group whose value is dead
(``s3.mul_(b1)``) instead of a new tensor per node.

On the CPU a new result of a few MB is a fresh allocation whose pages fault on first touch:
``torch.add(a, b)`` on 512x784 float32 takes twice as long as ``a.add_(b)``. In-place forms
run the same TensorIterator loops on the same operands, so the bits are those of the group's
kernels node by node. Only the group's own results are written: they are dense (new tensors
from torch's elementwise functions), are no output of the group, and no view of them was
taken (a node other than the in-place-capable functions may return a view of its operands,
so its operands are never written again). Transcendental functions keep their kernels (their
vectorized and scalar loops round differently, see ops/elementwise.py `_dense`).
"""

from __future__ import annotations

from typing import Any

import torch

from tenferro_runtime.graph_prims import GroupKernels
from tenferro_runtime.scalar_groups import scalar_group

from .ops import elementwise
from .ops.common import on_cpu, storage_address
from .threads import run_sized, small_group
from .thresholds import threshold_pattern

# torch function -> its in-place method (same dtype in and out: tenferro's arithmetic is
# homogeneous); a result of one of these (or of `FRESH`) is a new dense tensor
_INPLACE = {torch.add: "add_", torch.sub: "sub_", torch.mul: "mul_", torch.div: "div_",
            torch.neg: "neg_", torch.sqrt: "sqrt_", torch.abs: "abs_", torch.maximum: None,
            torch.minimum: None}
# b.add_(a) for a + b; not a complex mul: torch's vectorized complex product rounds a * b and
# b * a differently (its fused multiply-adds pair the parts in operand order)
_COMMUTATIVE = frozenset((torch.add, torch.mul))
_FRESH = frozenset((elementwise.select_bits,))
# thresholds.py's patterns -> torch's kernel: (x, c, a) and (g, x, c)
_THRESHOLD = {"threshold": torch.threshold, "threshold_backward": torch.ops.aten.threshold_backward}


def _kernels(graph: Any) -> list | None:
    """Each node's torch kernel for its signature, or None where a node has none (an
    extension op whose decomposition runs)."""
    avals = [v.aval for v in (*graph.inputs, *graph.consts)]
    device = avals[0].device if avals else None
    if device is None:
        return None
    out = []
    for n in graph.nodes:
        k = device.kernel_for(n.prim, tuple(v.aval for v in n.inputs),
                              tuple(v.aval for v in n.outputs), n.params)
        if k is None:
            return None
        out.append(getattr(k, "one_thread_of", k))  # the group as a whole is sized (threads.py)
    return out


def _compile(graph: Any, out_mode: int | None = None) -> tuple[Any, str]:
    """(the generated function, its source) for `graph`. With `out_mode` (a one-output
    group's out form, `fused_out`): the function takes a last argument `out`, a dead buffer
    of the result's shape and dtype that the plan gives it: input `out_mode` itself (which
    the group may then write in place after its last read), or, for -1, a separate one.
    Its result is then `out` or a new tensor, never a view of an input."""
    from tenferro_runtime.graph import Var

    kernels = _kernels(graph)
    if kernels is None:
        if out_mode is not None:
            return None, "# no out form (a node has no torch kernel)"
        return _via_eval(graph), "# eval_graph (a node has no torch kernel)"
    if all(str(v.aval.device) == "torch:cpu" for v in (*graph.inputs, *graph.consts)):
        # one-element integer values (a random key's threefry rounds: ~10 us per torch op on
        # a 0-d tensor, more for uint32): operators on NumPy scalars, NumPy's bits, which
        # the kernels reproduce; CPU tensors cross to NumPy without copies
        scalar = scalar_group(graph, lambda t: t.numpy(), torch.from_numpy)
        if scalar is not None:
            return scalar if out_mode is None else (None, "# no out form (a scalar group)")
    glb: dict[str, Any] = {"__name__": __name__}
    names: dict[Any, str] = {}
    args = [f"b{i}" for i in range(len(graph.inputs))]
    names.update(zip(graph.inputs, args))
    for j, (v, c) in enumerate(graph.consts.items()):
        glb[f"c{j}"], names[v] = c._buf, f"c{j}"
    end = len(graph.nodes)
    outputs = {v for v in graph.outputs if isinstance(v, Var)}
    last = {v: end for v in outputs}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            last[v] = max(last.get(v, i), i)
    thresholds, skipped = _thresholds(graph, outputs)
    for i, pattern in thresholds.items():
        for v in pattern[1:]:
            if isinstance(v, Var):
                last[v] = max(last.get(v, i), i)
    owned: set = set()  # the group's own dense results, no view of them taken
    aliasing = set(graph.inputs) | set(graph.consts)  # values that may share an input's memory
    result = graph.outputs[0] if out_mode is not None else None
    if out_mode is not None and out_mode >= 0 and graph.inputs[out_mode] not in outputs:
        owned.add(graph.inputs[out_mode])  # the plan's dead buffer: writable after its last read
    lines = [f"def fused({', '.join(args + (['out'] if out_mode is not None else []))}):"]
    for i, (node, k) in enumerate(zip(graph.nodes, kernels)):
        if i in skipped:  # a mask read only by selects that became thresholds
            continue
        if i in thresholds:  # ("threshold", x, c, a): x <= c ? a : x; ("threshold_backward", g, x, c)
            kind, *operands = thresholds[i]
            glb[f"k{i}"] = _THRESHOLD[kind]
            call = []
            for j, u in enumerate(operands):
                if not isinstance(u, Var):
                    glb[f"t{i}_{j}"], u = u, None
                call.append(names[u] if u is not None else f"t{i}_{j}")
            lines.append(f"    v{i}_0 = k{i}({', '.join(call)})  # {kind}")
            names[node.outputs[0]] = f"v{i}_0"
            owned.add(node.outputs[0])
            continue
        ins, a = node.inputs, [names[x] for x in node.inputs]
        out = node.outputs[0] if len(node.outputs) == 1 else None
        method = _INPLACE.get(k) if out is not None and not node.params else None
        if method:
            swap = k in _COMMUTATIVE and len(ins) == 2 and not (k is torch.mul and out.aval.dtype.kind == "c")
            order = [0, 1] if swap else [0]
            target = next((j for j in order if ins[j] in owned and last[ins[j]] == i
                           and ins[j] not in outputs and ins[j].aval is out.aval), None)
            if target is not None:
                rest = [a[j] for j in range(len(ins)) if j != target]
                lines.append(f"    {a[target]}.{method}({', '.join(rest)})")
                names[out] = a[target]
                owned.add(out)
                continue
        if out is not None and out is result and k in _INPLACE and not node.params:
            glb[f"k{i}"] = k  # the result straight into the plan's buffer
            lines.append(f"    v{i}_0 = k{i}({', '.join(a)}, out=out)")
            names[out] = f"v{i}_0"
            owned.add(out)
            continue
        glb[f"k{i}"] = k
        call = f"k{i}({', '.join(a)}"
        if node.params:
            glb[f"p{i}"] = node.params
            call += f", **p{i}" if a else f"**p{i}"
        outs = [f"v{i}_{j}" for j in range(len(node.outputs))]
        target = ", ".join(outs) + ("," if node.prim.multiple_results and len(outs) == 1 else "")
        lines.append(f"    {target or '_'} = {call})")
        names.update(zip(node.outputs, outs))
        if out is not None and (k in _INPLACE or k in _FRESH) and not node.params:
            owned.add(out)
        else:  # the result may be a view of an operand: never write those again
            owned.difference_update(ins)
            if any(v in aliasing for v in ins):
                aliasing.update(node.outputs)
    if out_mode is not None:
        name = names[result] if isinstance(result, Var) else None
        if name is None or result in aliasing:  # a constant, or a view of an input: a copy
            if name is None:
                glb["o_const"] = result._buf
            if out_mode < 0:  # a free buffer, shared with no input
                lines += [f"    out.copy_({name or 'o_const'})", "    return (out,)"]
            else:
                glb["_clone"] = torch.clone
                lines.append(f"    return (_clone({name or 'o_const'}),)")
        else:
            lines.append(f"    return ({name},)")
    else:
        lines.append("    " + GroupKernels.returned(graph, names, glb))
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<tenferro_torch fused group {id(graph):#x}>", "exec"), glb)
    return glb["fused"], src


def _thresholds(graph: Any, outputs: set) -> tuple[dict, set]:
    """({select node index: its threshold pattern (thresholds.py)}, the indices of the
    comparisons no other node or output reads): ReLU's selects as torch's threshold kernels."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    found = {}
    for i, n in enumerate(graph.nodes):
        pattern = threshold_pattern(n, producer, graph.consts)
        if pattern is not None:
            found[i] = pattern
    readers: dict = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            readers.setdefault(v, set()).add(i)
    skipped = {i for i, n in enumerate(graph.nodes) if n.prim.name == "le"
               and n.outputs[0] not in outputs and readers.get(n.outputs[0])
               and readers[n.outputs[0]] <= found.keys()}
    return found, skipped


def _via_eval(graph: Any) -> Any:
    """The group evaluated node by node through the runtime (a node has no torch kernel)."""
    from tenferro_runtime.graph import eval_graph
    from tenferro_runtime.tensor import Tensor

    def run(*bufs: Any) -> tuple:
        ts = [Tensor._new(b, v.aval) for b, v in zip(bufs, graph.inputs)]
        return tuple(t._buf for t in eval_graph(graph, *ts))

    return run


_GROUPS = GroupKernels("torch_fused", _compile)
fused_kernel = _GROUPS.kernel
specialized = _GROUPS.specialized
generated_source = _GROUPS.source


def fused_out(*args: Any, graph: Any) -> tuple:
    """The out form of the `fused` kernel (Backend.out_kernel): a one-output group's result
    written into `out` (the last argument, a dead buffer the plan gives: one of the inputs
    whose last use this is, or a free one), or a new tensor where the group cannot; never
    a view of an input. Where another input shares the memory of the input given as `out`,
    the group runs as the plain kernel (a new result)."""
    *bufs, out = args
    mode = next((i for i, b in enumerate(bufs) if b is out), -1)
    if mode >= 0:
        mine = storage_address(out)
        if mine != -1 and any(storage_address(b) == mine for j, b in enumerate(bufs) if j != mode):
            mode = None
    run, _, small = _out_code(graph, mode)
    if run is None:  # the plain kernel, on the threads `sized` gives it
        return _fresh(run_sized(small, _GROUPS.code(graph)[0], *bufs), bufs)
    return run_sized(small, run, *bufs, out)


def _out_code(graph: Any, mode: int | None) -> tuple:
    """(the out form's function or None, its source, whether it runs on one thread)."""
    def build() -> tuple:
        avals = [v.aval for v in (*graph.inputs, *graph.consts)]
        small = bool(avals) and on_cpu(avals[0]) and small_group(graph)
        if mode is None or len(graph.outputs) != 1:
            return None, "# no out form", small
        return (*_compile(graph, mode), small)

    return graph.derived(f"torch_fused_out{mode}", build)


def _fresh(results: tuple, bufs: list) -> tuple:
    """`results` with any that shares an input's memory copied (an out form's results are
    the plan's own buffers)."""
    inputs = {storage_address(b) for b in bufs} - {-1}
    return tuple(torch.clone(r) if storage_address(r) in inputs else r for r in results)


def out_source(graph: Any, mode: int) -> str:
    """The generated code of `graph`'s out form for `mode` (for debugging and tests)."""
    return _out_code(graph, mode)[1]


__all__ = ["fused_kernel", "fused_out", "generated_source", "out_source", "specialized"]
